"""Who is calling: anonymous, HTTP Basic, bearer tokens, or a trusted proxy header.

Credentials that are present but wrong always answer 401 (never a silent fall
back to anonymous).  A trusted proxy's header wins over an ``Authorization``
header: the proxy authenticated the caller, and may pass its credentials on.
A service declaring ``anonymous = false`` answers 401 with
a challenge to callers without credentials.
"""
from __future__ import annotations

import hmac

from flask import g, request
from werkzeug.security import check_password_hash

from ..errors import UWSError
from ..auth import AuthConfig, token_digest
from ..jobs import ANONYMOUS, Caller


class Unauthorized(UWSError):
    status = 401


def current_caller() -> Caller:
    """The caller of this request, authenticated once per request."""
    if "uws_caller" not in g:
        g.uws_caller = _authenticate(_auth_config())
    return g.uws_caller


def require_identity(service) -> None:
    """401 for an anonymous caller of a service that does not admit anonymous use."""
    if not service.anonymous and not current_caller().owner:
        raise Unauthorized(f"service {service.name!r} needs you to authenticate")


def _auth_config() -> AuthConfig:
    from .http import jobs_api
    return jobs_api().config.auth


def _authenticate(cfg: AuthConfig) -> Caller:
    name = _from_header(cfg) or _from_authorization(cfg)
    if not name:
        return ANONYMOUS
    return Caller(owner=name, admin=name in cfg.admins)


def _from_header(cfg: AuthConfig) -> str | None:
    if "header" not in cfg.modes or request.remote_addr not in cfg.trusted_proxies:
        return None
    return request.headers.get(cfg.header) or None


def _from_authorization(cfg: AuthConfig) -> str | None:
    auth = request.authorization
    if auth is None:
        if request.headers.get("Authorization"):
            raise Unauthorized("malformed Authorization header")
        return None
    if auth.type == "basic" and "basic" in cfg.modes:
        stored = cfg.users.get(auth.username or "")
        if stored and check_password_hash(stored, auth.password or ""):
            return auth.username
    elif auth.type == "bearer" and "bearer" in cfg.modes and auth.token:
        digest = token_digest(auth.token)
        for known, name in cfg.tokens.items():
            if hmac.compare_digest(known, digest):
                return name
    raise Unauthorized("the credentials were not accepted")
