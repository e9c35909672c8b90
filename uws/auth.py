"""Authentication settings (the ``[auth]`` table); checking requests is the web layer's."""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re

MODES = ("basic", "bearer", "header")
_HASH_METHODS = ("scrypt", "pbkdf2")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def _password_hashes(raw) -> dict[str, str]:
    """``[auth.users]``: name -> werkzeug password hash (a plain password never matches)."""
    users = _names(raw, "users")
    for name, stored in users.items():
        method, dollars = stored.split(":", 1)[0], stored.count("$")
        if method not in _HASH_METHODS or dollars != 2:
            raise ValueError(f"{name!r}: not a werkzeug password hash ('scrypt:...$...$...'); "
                             "make one with werkzeug.security.generate_password_hash")
    return users


def _token_digests(raw) -> dict[str, str]:
    """``[auth.tokens]``: sha256 hex digest of a token -> name."""
    tokens = _names(raw, "tokens")
    for digest in tokens:
        if not _DIGEST.fullmatch(digest):
            raise ValueError(f"{digest[:12]!r}... is not a sha256 hex digest; "
                             "store uws.auth.token_digest(token), never the token")
    return tokens


def _names(raw, key: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise TypeError(f"[auth.{key}] must be a table of strings")
    return dict(raw)


@dataclasses.dataclass(frozen=True)
class AuthConfig:
    modes: tuple[str, ...] = dataclasses.field(default=(), metadata={"choices": MODES})
    realm: str = "UWS"
    users: dict[str, str] = dataclasses.field(default_factory=dict,
                                              metadata={"read": _password_hashes})
    tokens: dict[str, str] = dataclasses.field(default_factory=dict,
                                               metadata={"read": _token_digests})
    admins: frozenset[str] = frozenset()
    header: str = "X-Remote-User"
    trusted_proxies: frozenset[str] = frozenset()
    # Password hashing is costly on purpose (scrypt: 32 MiB each): bound it.
    max_concurrent_checks: int = dataclasses.field(default=4, metadata={"min": 1})
    check_wait: float = dataclasses.field(default=2.0, metadata={"min": 0})   # then 503
    max_failures_per_address: int = dataclasses.field(default=20, metadata={"min": 0})
    max_failures_per_user: int = dataclasses.field(default=10, metadata={"min": 0})
    failure_window: int = dataclasses.field(default=60, metadata={"min": 1})  # seconds
    cache_seconds: int = dataclasses.field(default=60, metadata={"min": 0})
    cache_size: int = dataclasses.field(default=1000, metadata={"min": 1})

    def __post_init__(self):
        if "header" in self.modes and not self.trusted_proxies:
            raise ValueError("the header mode needs trusted_proxies (the addresses of the "
                             "proxies whose header is believed)")

    def challenge(self) -> str:
        schemes = [f'Basic realm="{self.realm}"'] if "basic" in self.modes else []
        if "bearer" in self.modes:
            schemes.append(f'Bearer realm="{self.realm}"')
        return ", ".join(schemes) or f'Basic realm="{self.realm}"'

    def token_owner(self, token: str) -> str | None:
        """The name a bearer token stands for, or None; compared in constant time."""
        digest = token_digest(token)
        for known, name in self.tokens.items():
            if hmac.compare_digest(known, digest):
                return name
        return None


def token_digest(token: str) -> str:
    """What the configuration stores for a bearer token (never the token itself)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
