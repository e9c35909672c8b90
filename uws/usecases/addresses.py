"""Which addresses a host named in a URL may be reached at: what a job's fetch
(:mod:`uws.execution.fetch`) and a callback (:mod:`uws.usecases.callbacks`) connect to.

Standard library only: each job's child process imports it with the fetch.
"""
from __future__ import annotations

import ipaddress
import socket
from encodings import idna

MAX_NAME = 253      # characters of a DNS name in ASCII, its final dot not counted
MAX_LABEL = 63


def resolve(host: str, port: int, checked: bool) -> list[str]:
    """The addresses to connect to: all of them public unless ``checked`` is false
    (the host is allow-listed).  OSError when the name does not resolve,
    ValueError when an answer is internal: the name is refused if any is."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[str] = []
    for *_, sockaddr in infos:
        address = str(sockaddr[0])
        if checked and not public(address):
            raise ValueError(f"{host} has an internal address")
        if address not in found:
            found.append(address)
    if not found:
        raise OSError(f"{host} has no address")
    return found


def dns_name(host: str) -> str:
    """``host`` as DNS is asked for it: an IP address as it is, a name in IDNA (ASCII).
    ValueError saying why for a name that has no such form: an empty label, one longer
    than 63 characters, a character IDNA does not allow, an ``xn--`` label IDNA would
    not make.  (Resolving such a name raises UnicodeError, a ValueError too, which
    callers would take for an address refused.)"""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host    # a final dot names the root
    ascii_name = ".".join(_ascii_label(label) for label in name.split("."))
    if len(ascii_name) > MAX_NAME:
        raise ValueError(f"longer than {MAX_NAME} characters in IDNA")
    return ascii_name


def _ascii_label(label: str) -> str:
    if not label:
        raise ValueError("it has an empty label")
    if label.isascii() and len(label) > MAX_LABEL:
        raise ValueError(f"a label is longer than {MAX_LABEL} characters")
    try:
        encoded = idna.ToASCII(label).decode("ascii")
        if "." in encoded:      # nameprep maps some characters to dots ("⒈" to "1.")
            raise UnicodeError(label)
        idna.ToUnicode(encoded.lower())     # an xn-- label must be one IDNA makes
    except UnicodeError:
        raise ValueError(f"the label {label!r} is not valid IDNA (too long once encoded, a "
                         "character IDNA does not allow, or an xn-- label it would not "
                         "make)") from None
    return encoded


def listed(host: str, allowed) -> bool:
    """Whether ``host`` is one of the ``allowed`` names (lower case, no final dot)."""
    return host.lower().rstrip(".") in allowed


def public(address: str) -> bool:
    """Whether an IP address is one a job may reach without an allow-list."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6:     # an IPv4 address inside IPv6 is judged as IPv4
        ip = ip.ipv4_mapped or ip.sixtofour or ip
    return ip.is_global and not (ip.is_private or ip.is_loopback or ip.is_link_local
                                 or ip.is_multicast or ip.is_reserved or ip.is_unspecified)
