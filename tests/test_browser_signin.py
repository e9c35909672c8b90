"""Signing in from a real Chromium (set-up as in test_browser): with a name and
password (the browser answers the Basic challenge of /signin?via=password) and with a
bearer token (the form, then the session cookie); an administrator then reaches the
holds and the server's statistics, and signing out ends a token session."""
from __future__ import annotations

import pytest
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig, token_digest

from conftest import LiveServer, make_config
from test_browser import _context, browser, shot  # noqa: F401

#: one database is enough here: tests/test_signin.py covers the routes
BACKENDS = ("sqlite",)
FAST_HASH = "pbkdf2:sha256:1000"
USERS = {"alice": "wonderland", "root": "toor"}
TOKENS = {"root-token": "root", "carol-token": "carol"}


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, scheduler=False, executor="none")
    cfg.auth = AuthConfig(
        modes=("basic", "bearer"),
        users={u: generate_password_hash(p, method=FAST_HASH) for u, p in USERS.items()},
        tokens={token_digest(t): name for t, name in TOKENS.items()},
        admins=frozenset({"root"}))
    return cfg


@pytest.fixture
def server(app):
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def new_page(browser, server):  # noqa: F811
    """Pages of new browser contexts (``http_credentials`` for Basic), at 1280 px."""
    outside: list[str] = []
    contexts = []

    def make(**options):
        context = _context(browser, server, outside, viewport={"width": 1280, "height": 860},
                           **options)
        contexts.append(context)
        return context.new_page()
    yield make
    for context in contexts:
        context.close()
    assert outside == []


def signed_in_as(page) -> str:
    return page.inner_text("header [data-role=signed-in] strong")


def test_a_user_signs_in_with_a_password_and_returns_to_the_page(new_page, server):
    page = new_page(http_credentials={"username": "alice", "password": "wonderland"})
    page.goto(f"{server.url}/sleep")
    assert page.is_visible("header a.signin-link")
    page.click("header a.signin-link")
    shot(page, "signin-01-form")
    page.click("[data-role=password-signin]")     # the 401 challenge, answered by the browser
    page.wait_for_url(f"{server.url}/sleep")
    assert signed_in_as(page) == "alice"
    page.goto(f"{server.url}/")                     # the browser goes on sending them
    assert signed_in_as(page) == "alice"
    shot(page, "signin-06-services-signed-in")
    assert "your jobs" in page.inner_text("li[data-service=sleep] [data-role=counts]")


def test_an_administrator_signed_in_with_a_password_reaches_holds_and_stats(new_page, server):
    page = new_page(http_credentials={"username": "root", "password": "toor"})
    page.goto(f"{server.url}/sleep/holds")
    assert page.inner_text("h1") == "Forbidden (403)"
    shot(page, "signin-00-holds-forbidden")
    page.click("[data-role=signin] a")
    page.click("[data-role=password-signin]")
    page.wait_for_url(f"{server.url}/sleep/holds")
    assert page.inner_text("h1") == "Holds of sleep"
    shot(page, "signin-02-holds-as-admin")
    page.click("header a.admin-link:text-is('Statistics')")
    page.wait_for_url(f"{server.url}/stats")
    assert page.inner_text("h1") == "Statistics of the server"
    assert signed_in_as(page) == "root"


def test_an_administrator_signs_in_with_a_token_and_out_again(new_page, server):
    page = new_page()
    page.goto(f"{server.url}/sleep/holds")
    page.click("[data-role=signin] a")
    page.fill("#signin-token", "root-token")
    page.click("button:text-is('Sign in')")
    page.wait_for_url(f"{server.url}/sleep/holds")
    assert page.inner_text("h1") == "Holds of sleep"
    assert signed_in_as(page) == "root"
    page.goto(f"{server.url}/stats")
    assert page.inner_text("h1") == "Statistics of the server"
    shot(page, "signin-03-stats-as-admin")
    page.click("header button:text-is('Sign out')")
    page.wait_for_selector("h1:text-is('Signed out')")
    page.goto(f"{server.url}/sleep")
    assert page.is_visible("header a.signin-link")
    assert page.context.cookies() == []


def test_a_wrong_token_shows_the_form_again(new_page, server):
    page = new_page()
    page.goto(f"{server.url}/signin?next=/sleep")
    page.fill("#signin-token", "a guess")
    page.click("button:text-is('Sign in')")
    page.wait_for_selector("p.form-error")
    assert page.inner_text("p.form-error") == "That token is not accepted."
    shot(page, "signin-04-wrong-token")
    page.fill("#signin-token", "carol-token")
    page.click("button:text-is('Sign in')")
    page.wait_for_url(f"{server.url}/sleep")
    assert signed_in_as(page) == "carol"
    shot(page, "signin-05-service-page", full_page=False)
