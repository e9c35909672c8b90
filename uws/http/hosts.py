"""Which host names the server answers to, and the ``[server]`` keys that say so.

The Host header is the client's to choose: a page of another site can reach a server
on loopback under that site's own name (DNS rebinding: ``evil.example`` made to resolve
to 127.0.0.1), and the page is then same-origin with it.  So only known names are
answered: localhost and the loopback addresses, the address the server is bound to
(bound to every address: this machine's names and any IP address, which no rebinding
can forge), the host of ``public_url``, and ``allowed_hosts``; any port.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
ANY = "*"
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def public_url(raw) -> str:
    """``[server] public_url``: "" or an http(s) URL, returned with a trailing slash."""
    if not isinstance(raw, str):
        raise TypeError(f"must be a string, not {type(raw).__name__}")
    if not raw:
        return ""
    parts = urlsplit(raw)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (parts.scheme not in _DEFAULT_PORTS or not parts.hostname or port == -1
            or parts.query or parts.fragment or "@" in parts.netloc):
        raise ValueError(f"{raw!r} is not an http(s) URL such as 'https://uws.example.org/uws/'")
    if port == _DEFAULT_PORTS[parts.scheme]:    # as browsers write the Origin
        parts = parts._replace(netloc=parts.netloc.rsplit(":", 1)[0])
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return parts._replace(path=path).geturl()


def host_names(raw) -> tuple[str, ...]:
    """``[server] allowed_hosts``: host names or IP addresses (no port), or "*"."""
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        raise TypeError("must be an array of host names")
    for name in raw:
        if name != ANY and not (_is_address(normal(name)) or _NAME.fullmatch(normal(name))):
            raise ValueError(f"{name!r} is not a host name or IP address (give no scheme "
                             "or port; every port is allowed)")
    return tuple(ANY if name == ANY else normal(name) for name in raw)


def normal(name: str) -> str:
    """A host name as compared: lower case, no IPv6 brackets, no final dot."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name[:-1] if name.endswith(".") else name


class HostPolicy:
    """The host names one server answers to (see the module's documentation)."""

    def __init__(self, bound: str, public: str = "", allowed=()):
        names = set(LOOPBACK) | set(allowed)
        self.any_address = bound in WILDCARDS
        if self.any_address:
            names |= {normal(socket.gethostname()), normal(socket.getfqdn())}
        else:
            names.add(normal(bound))
        if public:
            names.add(normal(urlsplit(public).hostname or ""))
        self.any_name = ANY in names
        self.names = frozenset(names)

    @classmethod
    def of(cls, cfg) -> HostPolicy:
        return cls(cfg.host, cfg.public_url, cfg.allowed_hosts)

    def allows(self, host: str) -> bool:
        """Whether a Host header value (``name[:port]``) names this server."""
        name, port = _split(host)
        if port and not port.isdigit():
            return False
        name = normal(name)
        return self.any_name or name in self.names or (self.any_address and _is_address(name))


def _split(host: str) -> tuple[str, str]:
    """(name, port) of a Host header; a port that is not a number stays visible as one."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        if rest and not rest.startswith(":"):
            return name + "]", "not a port"
        return name + "]", rest[1:]
    name, colon, port = host.rpartition(":")
    return (name, port) if colon else (host, "")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
