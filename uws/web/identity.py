"""Who is calling: anonymous, HTTP Basic, bearer tokens, or a trusted proxy header.

Only the schemes the ``[auth]`` table turns on are read.  An ``Authorization``
header of another scheme is no credentials at all (a server without
authentication ignores it: validators send empty Basic credentials, gateways
pass bearer tokens on).  Credentials of a configured scheme that are wrong
always answer 401 (never a silent fall back to anonymous).  A trusted proxy's
header wins over an ``Authorization`` header: the proxy authenticated the
caller, and may pass its credentials on.  A service declaring
``anonymous = false`` answers 401 with a challenge to callers without
credentials.  Passwords are checked by :mod:`.passwords`, which bounds what
guessing can cost the server.
"""
from __future__ import annotations

import hmac

from flask import current_app, request

from ..auth import AuthConfig, token_digest
from ..domain.errors import BadRequest, UWSError
from ..domain.model import ANONYMOUS, Caller, fits_xml
from .incoming import current
from .passwords import PasswordGate


class Unauthorized(UWSError):
    status = 401


def current_caller() -> Caller:
    """The caller of this request, authenticated once per request."""
    req = current()
    if req.caller is None:
        req.caller = _authenticate(_auth_config())
    return req.caller


def require_identity(service) -> None:
    """401 for an anonymous caller of a service that does not admit anonymous use."""
    if not service.anonymous and not current_caller().owner:
        raise Unauthorized(f"service {service.name!r} needs you to authenticate")


def _auth_config() -> AuthConfig:
    from .http import jobs_api
    return jobs_api().config.auth


def install(app) -> None:
    """Give the app its password checker (its limits hold across requests)."""
    app.extensions["uws_passwords"] = PasswordGate(app.extensions["uws"].config.auth)


def _authenticate(cfg: AuthConfig) -> Caller:
    if not cfg.modes:
        return ANONYMOUS    # no scheme to read
    name = _from_header(cfg) or _from_authorization(cfg)
    if not name:
        return ANONYMOUS
    return Caller(owner=name, admin=name in cfg.admins)


def _from_header(cfg: AuthConfig) -> str | None:
    if "header" not in cfg.modes or request.remote_addr not in cfg.trusted_proxies:
        return None
    raw = request.headers.get(cfg.header)
    if not raw:
        return None
    try:    # WSGI hands headers over as latin-1 text; names are UTF-8
        name = raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise BadRequest(f"the {cfg.header} header is not UTF-8") from None
    if not fits_xml(name):      # shown as ownerId; PostgreSQL cannot store NUL
        raise BadRequest(f"the {cfg.header} header holds a control character")
    return name


#: The modes that are schemes of the Authorization header.
SCHEMES = frozenset({"basic", "bearer"})


def _from_authorization(cfg: AuthConfig) -> str | None:
    scheme, _, credentials = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() not in SCHEMES & set(cfg.modes) or not credentials.strip():
        return None     # no credentials of a scheme this server checks
    auth = request.authorization
    if auth is None:
        raise Unauthorized("malformed Authorization header")
    if auth.type == "basic":
        if not auth.username and not auth.password:
            return None     # empty Basic credentials (validators send them): none at all
        gate: PasswordGate = current_app.extensions["uws_passwords"]
        if gate.check(request.remote_addr or "", auth.username or "", auth.password or ""):
            return auth.username
    elif auth.token:
        digest = token_digest(auth.token)
        for known, name in cfg.tokens.items():
            if hmac.compare_digest(known, digest):
                return name
    raise Unauthorized("the credentials were not accepted")
