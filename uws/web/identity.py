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

A browser signed in with a bearer token (:mod:`.signin`) sends it in the session
cookie, read after both headers: for reading requests, and for posts only when
the browser names the page they come from (``Origin``/``Referer``), which the
cross-site check of every post (``app._same_origin_only``) has found to be ours.
A cookie whose token is no longer accepted counts as no credentials (the answer
clears it): it would otherwise shut its browser out of every page, sign-out included.
"""
from __future__ import annotations

from flask import current_app, g, request

from ..auth import AuthConfig
from ..domain.errors import BadRequest, UWSError
from ..domain.model import ANONYMOUS, Caller, fits_xml
from .incoming import current
from .passwords import PasswordGate
from .proxied import peer_address


class Unauthorized(UWSError):
    status = 401


#: The session cookie holding a browser's bearer token (set by :mod:`.signin`).
SESSION_COOKIE = "uws_session"
#: Methods whose requests may carry the cookie without naming where they come from.
READING = frozenset({"GET", "HEAD", "OPTIONS"})


def current_caller() -> Caller:
    """The caller of this request, authenticated once per request."""
    req = current()
    if req.caller is None:
        refused = g.get("uws_refused")
        if refused is not None:     # once: pages ask again, and a hash costs much
            raise refused
        try:
            req.caller = _authenticate(_auth_config())
        except UWSError as exc:
            g.uws_refused = exc
            raise
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
    name = _from_header(cfg) or _from_authorization(cfg) or _from_cookie(cfg)
    if not name:
        return ANONYMOUS
    return Caller(owner=name, admin=name in cfg.admins)


def signed_in_by() -> str | None:
    """How this request's caller was identified: "proxy", "basic", "bearer",
    "cookie", or None (anonymous, or not yet authenticated)."""
    return g.get("uws_signed_in_by")


def stale_session() -> bool:
    """Whether the request brought a session cookie whose token is not accepted."""
    return bool(g.get("uws_stale_session"))


def _from_cookie(cfg: AuthConfig) -> str | None:
    if "bearer" not in cfg.modes:
        return None
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    if request.method not in READING and not (request.headers.get("Origin")
                                              or request.headers.get("Referer")):
        return None     # a post not known to come from our pages: no cookie credentials
    name = cfg.token_owner(token)
    if name is None:
        g.uws_stale_session = True
        return None
    g.uws_signed_in_by = "cookie"
    return name


def _from_header(cfg: AuthConfig) -> str | None:
    # the proxy's own address ([server] trusted_proxies may have put its client's in
    # remote_addr): [auth] trusted_proxies names the proxies whose header names the user
    if "header" not in cfg.modes or peer_address(request.environ) not in cfg.trusted_proxies:
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
    g.uws_signed_in_by = "proxy"
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
            g.uws_signed_in_by = "basic"
            return auth.username
    elif auth.token:
        name = cfg.token_owner(auth.token)
        if name is not None:
            g.uws_signed_in_by = "bearer"
            return name
    raise Unauthorized("the credentials were not accepted")
