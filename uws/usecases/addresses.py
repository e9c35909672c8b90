"""Which addresses a host named in a URL may be reached at: what a job's fetch
(:mod:`uws.execution.fetch`) and a callback (:mod:`uws.usecases.callbacks`) connect to.

Standard library only: each job's child process imports it with the fetch.
"""
from __future__ import annotations

import ipaddress
import socket


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
