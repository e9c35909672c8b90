"""Signing in and out from a browser, on a server with an ``[auth]`` table.

- ``GET /signin?next=/path``: the sign-in page.  With bearer tokens it holds a form for
  one; with HTTP Basic alone it is the Basic challenge (as ``via=password``).
  A caller already identified is sent on to ``next`` (303).
- ``GET /signin?via=password&next=/path``: 401 with the Basic challenge until the
  browser sends a name and password, then 303 to ``next``.  The browser keeps sending
  them until it is closed: unasked to every path below the challenged one's folder
  (RFC 7617), which is why this is ``/signin`` itself and not a path below it.
- ``POST /signin`` (``token``, ``next``): a right token is kept in the session cookie
  (``HttpOnly``, ``SameSite=Strict``, ``Secure`` under https), then 303 to ``next``; a
  wrong one shows the form again (401), and counts as a failed password does.
- ``POST /signout``: clears the cookie and says what remains (Basic credentials stay
  with the browser until it is closed: no page can make it forget them reliably).

``next`` is a path on this server ("/sleep?PHASE=QUEUED"), never a URL of another
site: anything else answers 400, so that no link can make this server redirect a
browser elsewhere (an open redirect).  Both posts pass the cross-site check of every
post (``app._same_origin_only``).
"""
from __future__ import annotations

from urllib.parse import quote, urlsplit

from flask import Blueprint, Flask, current_app, request

from ..auth import AuthConfig
from ..domain.errors import BadRequest, NotFound, UWSError
from ..domain.model import ANONYMOUS
from . import identity, pages
from .http import base_url, form_pairs, jobs_api, see_other, single, split_control
from .incoming import current
from .passwords import PasswordGate

bp = Blueprint("signin", __name__)
FIELDS = frozenset({"TOKEN", "NEXT"})
MAX_NEXT = 2000


def _auth() -> AuthConfig:
    cfg = jobs_api().config.auth
    if not cfg.modes:
        raise NotFound("this server has no sign-in: every caller is anonymous")
    return cfg


@bp.route("/signin", methods=["GET"])
def signin_page():
    cfg = _auth()
    target = _next(request.args.get("next"))
    if identity.current_caller().owner:
        return see_other(_location(target))
    password = request.args.get("via") == "password" or "bearer" not in cfg.modes
    if password and "basic" in cfg.modes:
        return _challenge(cfg, target)
    return _page(cfg, target)


@bp.route("/signin", methods=["POST"])
def token_form():
    cfg = _auth()
    if "bearer" not in cfg.modes:
        raise NotFound("this server takes no tokens")
    control, rest = split_control(form_pairs(include_query=False), FIELDS)
    if rest:
        raise BadRequest(f"unexpected field {rest[0][0]!r}; only token and next are accepted")
    target = _next(single(control, "NEXT"))
    token = (single(control, "TOKEN") or "").strip()
    gate: PasswordGate = current_app.extensions["uws_passwords"]
    name = gate.check_token(request.remote_addr or "", token, cfg) if token else None
    if name is None:
        response = _page(cfg, target, status=401,
                         error="That token is not accepted." if token else "Enter a token.")
        response.headers["WWW-Authenticate"] = f'Bearer realm="{cfg.realm}"'   # no dialog
        return response
    response = see_other(_location(target))
    response.set_cookie(identity.SESSION_COOKIE, token, path=_cookie_path(), secure=_https(),
                        httponly=True, samesite="Strict")
    return response


@bp.route("/signout", methods=["POST"])
def signout():
    cfg = _auth()
    form_pairs(include_query=False)     # 415/400 for a body that is not a form
    shown_account = {"name": "", "signin_url": signin_url("/")}    # no longer this caller
    response = pages.render("signin.html", cfg=cfg, signed_out=True, target="/", error=None,
                            by=identity.signed_in_by(), account=shown_account)
    _clear(response)
    return response


def _challenge(cfg: AuthConfig, target: str):
    """401 with the Basic challenge; its page is what the browser shows if the person
    cancels the dialog."""
    response = _page(cfg, target, status=401, challenged=True)
    response.headers["WWW-Authenticate"] = f'Basic realm="{cfg.realm}"'
    return response


def _page(cfg: AuthConfig, target: str, status: int = 200, error: str | None = None,
          challenged: bool = False):
    return pages.render("signin.html", status=status, cfg=cfg, target=target, error=error,
                        challenged=challenged, signed_out=False,
                        password_url=f"{base_url()}signin?via=password&next={quote(target)}")


def _next(raw: str | None) -> str:
    """The local path to go to after signing in ("/" when none is given); 400 for
    anything else: another site's URL, "//host/" (a URL without its scheme) or a
    backslash (which browsers read as "/")."""
    if not raw:
        return "/"
    parts = urlsplit(raw)
    if (len(raw) > MAX_NEXT or not raw.startswith("/") or raw.startswith("//")
            or "\\" in raw or parts.scheme or parts.netloc
            or any(ord(c) < 0x20 or c == "\x7f" for c in raw)):
        raise BadRequest("next: must be a path on this server, such as /sleep")
    return raw


#: What stays as it is in a Location built from ``next`` (its query is already encoded).
_KEPT = "/?&=%:@!$'()*+,;~"


def _location(target: str) -> str:
    return base_url() + quote(target[1:], safe=_KEPT)


def _cookie_path() -> str:
    return urlsplit(base_url()).path or "/"


def _https() -> bool:
    return request.is_secure or base_url().startswith("https:")


def _clear(response) -> None:
    response.delete_cookie(identity.SESSION_COOKIE, path=_cookie_path(), secure=_https(),
                           httponly=True, samesite="Strict")


def here() -> str:
    """This request's path and query, as ``next`` takes them."""
    req = current()
    query = req.query_string.decode("latin-1")
    return req.path + (f"?{query}" if query else "")


def signin_url(target: str | None = None) -> str:
    return f"{base_url()}signin?next={quote(target or here())}"


def _account() -> dict:
    """The header's sign-in link, or who is signed in (pages of servers with [auth])."""
    cfg = jobs_api().config.auth
    if not cfg.modes:
        return {"account": None}
    try:
        caller = identity.current_caller()
    except UWSError:    # an error page for bad credentials
        caller = ANONYMOUS
    on_signin = (request.url_rule is not None and request.url_rule.rule.startswith("/sign"))
    return {"account": {
        "name": caller.owner, "admin": caller.admin, "by": identity.signed_in_by(),
        "signin_url": None if on_signin else signin_url(),
        "signout_url": f"{base_url()}signout"}}


def _forget_stale(response):
    """Clear a session cookie whose token is no longer accepted."""
    if identity.stale_session() and not response.headers.get("Set-Cookie"):
        _clear(response)
    return response


def install(app: Flask) -> None:
    app.register_blueprint(bp)
    app.context_processor(_account)
    app.after_request(_forget_stale)
