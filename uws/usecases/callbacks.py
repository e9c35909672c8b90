"""Callbacks: which URLs a job may name, how a delivery is signed, when it is retried.

A service's ``callback_hosts`` lists the hosts a ``CALLBACK`` URL may name:

- a host name or address written out (``hooks.example.org``, ``127.0.0.1``) is
  trusted by the operator, whatever it resolves to, like ``fetch_hosts``;
- ``*.example.org`` admits its subdomains and ``*`` any host, but only while
  every address they resolve to is public (not loopback, private, link-local,
  multicast or reserved: the rules of :func:`uws.usecases.addresses.public`).

The addresses are checked when the URL is given and again at each delivery
(DNS may change), and the delivery connects to an address that was checked.
No Flask and no SQL here.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import random
from urllib.parse import urlsplit

from .addresses import dns_name, listed, public, resolve

MAX_URL_LENGTH = 2048
MAX_DELAY = 3600.0      # between two attempts, whatever the backoff says


class CallbackError(ValueError):
    """A callback URL that is refused; the message is safe to show its sender."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a delivery goes: the URL's parts and the checked addresses to connect to."""
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


def check_url(url: str, hosts: tuple[str, ...]) -> str:
    """``url`` if a job may name it as its callback; CallbackError otherwise."""
    if not hosts:
        raise CallbackError("CALLBACK: this service accepts no callbacks "
                            "(its callback_hosts setting is empty)")
    scheme, host, port = _parts(url)
    if not _allowed(host, hosts):
        raise CallbackError(f"CALLBACK: host {host!r} is not on this service's "
                            "callback_hosts list")
    if not listed(host, _names(hosts)):
        _checked_addresses(host, port)
    return url


def target(url: str, hosts: tuple[str, ...]) -> Target:
    """Where to deliver to ``url`` now, its addresses resolved and checked again;
    CallbackError if it may no longer be reached."""
    scheme, host, port = _parts(url)
    if not _allowed(host, hosts):
        raise CallbackError(f"host {host!r} is no longer on callback_hosts")
    if listed(host, _names(hosts)):
        try:
            addresses = resolve(host, port, checked=False)
        except (OSError, UnicodeError):
            raise CallbackError(f"host {host!r} cannot be resolved") from None
    else:
        addresses = _checked_addresses(host, port)
    return Target(scheme, host, port, tuple(addresses))


def _parts(url: str) -> tuple[str, str, int]:
    if len(url) > MAX_URL_LENGTH:
        raise CallbackError(f"CALLBACK: longer than {MAX_URL_LENGTH} characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise CallbackError("CALLBACK: a URL has no spaces or control characters")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise CallbackError("CALLBACK: must be an absolute http or https URL")
    if "@" in parts.netloc:
        raise CallbackError("CALLBACK: must not carry credentials (user:password@)")
    try:
        host, port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise CallbackError("CALLBACK: not a valid URL (its port)") from None
    if not host:
        raise CallbackError("CALLBACK: must be an absolute http or https URL")
    try:
        dns_name(host)
    except ValueError as exc:
        raise CallbackError(f"CALLBACK: the host name {host!r} is not valid: {exc}") from None
    return scheme, host, port


def _names(hosts: tuple[str, ...]) -> set[str]:
    return {h.lower().rstrip(".") for h in hosts if not h.startswith("*")}


def _allowed(host: str, hosts: tuple[str, ...]) -> bool:
    name = host.lower().rstrip(".")
    for entry in hosts:
        entry = entry.lower().rstrip(".")
        if entry == "*" or entry == name or (entry.startswith("*.") and name.endswith(entry[1:])):
            return True
    return False


def _checked_addresses(host: str, port: int) -> list[str]:
    """The host's addresses, every one of them public (a host admitted by a wildcard)."""
    if _is_address(host) and not public(host):
        raise CallbackError(f"CALLBACK: {host} is not a public address; only a host "
                            "written out in callback_hosts may be internal")
    try:
        return resolve(host, port, checked=True)
    except (OSError, UnicodeError):     # UnicodeError is a ValueError: first
        raise CallbackError(f"CALLBACK: host {host!r} cannot be resolved") from None
    except ValueError:
        raise CallbackError(f"CALLBACK: {host} resolves to an internal address; only a "
                            "host written out in callback_hosts may be internal") from None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


# -- signing ---------------------------------------------------------------------------

def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 with ``secret`` of ``"<timestamp>." + body``."""
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def signed_headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers that let a receiver check a delivery came from us, unchanged."""
    if not secret:
        return {}
    return {"X-UWS-Timestamp": str(timestamp),
            "X-UWS-Signature": signature(secret, timestamp, body)}


# -- retries ---------------------------------------------------------------------------

def retry_delay(attempts: int, first: float, rng=random.random) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: doubling from
    ``first``, with jitter (half to all of it) so that receivers coming back up are
    not hit by every sender at once."""
    delay = min(first * 2 ** min(attempts - 1, 30), MAX_DELAY)
    return delay * (0.5 + rng() / 2)


def gives_up(attempts: int, max_attempts: int, elapsed: float, delay: float,
             retry_seconds: float) -> bool:
    """Whether a delivery that failed ``attempts`` times, ``elapsed`` seconds after it
    became due, stops: out of attempts, or the next one would be past its time."""
    return attempts >= max_attempts or elapsed + delay > retry_seconds
