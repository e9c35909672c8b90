"""Holds and Repeat in a real Chromium: an administrator holds the service from its
holds page, a user's run waits HELD saying why, the release lets it complete; the
Repeat button of a finished job makes a new one.  (Set-up as in test_browser.)"""
from __future__ import annotations

import pytest
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig

from conftest import make_config
from test_browser import _context, browser, create_sleep, phase_is, shot  # noqa: F401
from test_holds import FAST_HASH, USERS, basic

#: one database is enough here: tests/test_holds.py covers both
BACKENDS = ("sqlite",)


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, scheduler=False)
    cfg.auth = AuthConfig(
        modes=("basic",),
        users={u: generate_password_hash(p, method=FAST_HASH) for u, p in USERS.items()},
        admins=frozenset({"root"}))
    return cfg


@pytest.fixture
def server(app):
    from conftest import LiveServer
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def pages(browser, server):  # noqa: F811
    """A page per user, each sending its own credentials."""
    outside: list[str] = []
    contexts = {user: _context(browser, server, outside, extra_http_headers=basic(user))
                for user in ("root", "alice")}
    yield {user: c.new_page() for user, c in contexts.items()}
    for c in contexts.values():
        c.close()
    assert outside == []


def test_an_administrator_holds_and_releases_and_the_held_job_completes(pages, server):
    admin, user = pages["root"], pages["alice"]
    admin.goto(f"{server.url}/sleep")
    admin.click("a.admin-link")
    admin.fill("#hold-reason", "maintenance")
    admin.click("button:text-is('Hold')")
    admin.wait_for_selector("table.holds")
    shot(admin, "holds-01-placed")

    create_sleep(user, server, "0", "patient")
    phase_is(user, "HELD")
    assert "maintenance" in user.inner_text("[data-role=held]")
    shot(user, "holds-02-held-job")
    assert not user.is_visible("a.admin-link")      # only administrators see the link

    admin.click("button:text-is('Release')")
    admin.wait_for_selector("p.empty")
    user.reload()
    phase_is(user, "COMPLETED")


def test_the_repeat_button_makes_a_new_job(pages, server):
    user = pages["alice"]
    create_sleep(user, server, "0", "again")
    phase_is(user, "COMPLETED")
    first = user.url
    user.click("button:text-is('Repeat')")
    user.wait_for_url(lambda url: url != first)
    user.wait_for_selector("article.job")
    assert user.inner_text("span.title") == "again"
    phase_is(user, "PENDING")
