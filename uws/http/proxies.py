"""Trusted reverse proxies (``[server] trusted_proxies``): who the client is behind them.

Behind a proxy every connection comes from the proxy's address.  The proxy names the
client in ``X-Forwarded-For`` (or ``Forwarded: for=``), appending the address it saw
to what the client sent: so the right-most address that is not itself a trusted proxy
is the client, and whatever a client wrote further left is ignored.  The headers of a
peer that is not a trusted proxy are never read (a client cannot choose its address).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Malformed(ValueError):
    """A forwarding header of a trusted proxy that names no address where it should."""


def networks(raw) -> tuple[Network, ...]:
    """``trusted_proxies``: an array of addresses and CIDR ranges ("10.0.0.0/8")."""
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise TypeError("must be an array of addresses and networks (\"10.0.0.0/8\")")
    found = []
    for item in raw:
        try:
            found.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or network "
                             "(\"192.0.2.7\", \"10.0.0.0/8\", \"2001:db8::/32\")") from None
    return tuple(found)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped      # "::ffff:10.0.0.1" from a dual-stack socket
    return address


@dataclasses.dataclass(frozen=True)
class Forwarded:
    """What a trusted proxy says of the request: the client, and maybe scheme and host."""
    client: str
    proto: str | None = None
    host: str | None = None


@dataclasses.dataclass(frozen=True)
class TrustedProxies:
    networks: tuple[Network, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, peer: str) -> bool:
        address = _address(peer)
        return address is not None and any(address in net for net in self.networks)

    def client(self, peer: str, hops: list[str]) -> str:
        """The right-most of ``hops`` (left to right, as the proxies appended them) that
        is not a trusted proxy; the left-most when all are; ``peer`` when there are none.
        :class:`Malformed` when an address must be read and is not one."""
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                raise Malformed(f"{hop[:60]!r} is not an address")
            if not self.trusts(str(address)):
                return str(address)
        return str(_address(hops[0])) if hops else peer

    def forwarded(self, peer: str, headers: dict[str, str]) -> Forwarded | None:
        """What ``peer``'s forwarding headers say, if it is a trusted proxy; None if not.
        ``headers`` maps lower-case names to values (several of one name joined by ",").
        The standard ``Forwarded`` header wins over the ``X-Forwarded-*`` ones."""
        if not self.trusts(peer):
            return None
        if "forwarded" in headers:
            pairs = _forwarded_elements(headers["forwarded"])
            hops = [_node(p["for"]) for p in pairs if "for" in p]
            last = pairs[-1] if pairs else {}
            return Forwarded(self.client(peer, hops), _proto(last.get("proto")),
                             _host(last.get("host")))
        hops = [h for h in (part.strip() for part in
                            headers.get("x-forwarded-for", "").split(",")) if h]
        return Forwarded(self.client(peer, hops),
                         _proto(_last(headers.get("x-forwarded-proto"))),
                         _host(_last(headers.get("x-forwarded-host"))))


def _last(value: str | None) -> str | None:
    """The value the nearest proxy added (proxies append after a comma)."""
    return value.rsplit(",", 1)[-1].strip() if value else None


_PAIR = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;,\s]*)\s*')


def _forwarded_elements(value: str) -> list[dict[str, str]]:
    """RFC 7239: elements separated by ",", pairs by ";", values maybe quoted."""
    elements = []
    for element in _split_outside_quotes(value, ","):
        pairs = {}
        for pair in _split_outside_quotes(element, ";"):
            if not pair.strip():
                continue
            match = _PAIR.fullmatch(pair)
            if match is None:
                raise Malformed(f"{pair[:60]!r} is not a name=value pair")
            name, text = match.group(1).lower(), match.group(2)
            if text.startswith('"'):
                text = re.sub(r"\\(.)", r"\1", text[1:-1])
            pairs[name] = text
        elements.append(pairs)
    return elements


def _split_outside_quotes(value: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in value:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


def _node(text: str) -> str:
    """A ``for=`` node: "192.0.2.7", "192.0.2.7:4711", "[2001:db8::1]:4711"; an
    obfuscated or "unknown" one is no address (Malformed when it must be read)."""
    if text.startswith("["):
        return text[1:].split("]", 1)[0]
    if text.count(":") == 1:
        return text.split(":", 1)[0]
    return text


_HOST = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def _proto(value: str | None) -> str | None:
    value = (value or "").strip().lower()
    return value if value in ("http", "https") else None


def _host(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if value and _HOST.fullmatch(value) else None
