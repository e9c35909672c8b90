"""Authentication settings (the ``[auth]`` table); checking requests is the web layer's."""
from __future__ import annotations

import dataclasses
import hashlib

MODES = ("basic", "bearer", "header")


@dataclasses.dataclass(frozen=True)
class AuthConfig:
    modes: tuple[str, ...] = ()
    realm: str = "UWS"
    users: dict = dataclasses.field(default_factory=dict)    # name -> werkzeug password hash
    tokens: dict = dataclasses.field(default_factory=dict)   # sha256 hex of token -> name
    admins: frozenset = frozenset()
    header: str = "X-Remote-User"
    trusted_proxies: frozenset = frozenset()

    @classmethod
    def from_table(cls, table: dict) -> "AuthConfig":
        modes = tuple(table.get("modes", ()))
        unknown = set(modes) - set(MODES)
        if unknown:
            raise ValueError(f"unknown auth modes: {', '.join(sorted(unknown))}")
        return cls(modes=modes, realm=table.get("realm", "UWS"),
                   users=dict(table.get("users", {})), tokens=dict(table.get("tokens", {})),
                   admins=frozenset(table.get("admins", ())),
                   header=table.get("header", "X-Remote-User"),
                   trusted_proxies=frozenset(table.get("trusted_proxies", ())))

    def challenge(self) -> str:
        schemes = [f'Basic realm="{self.realm}"'] if "basic" in self.modes else []
        if "bearer" in self.modes:
            schemes.append(f'Bearer realm="{self.realm}"')
        return ", ".join(schemes) or f'Basic realm="{self.realm}"'


def token_digest(token: str) -> str:
    """What the configuration stores for a bearer token (never the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()
