"""The administrator's statistics page in Chromium: the counts, and a chart of jobs
per phase drawn server-side as SVG (no script, nothing fetched from elsewhere)."""
from __future__ import annotations

import base64

import pytest
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig
from uws.domain import timeutil
from uws.domain.model import Caller
from uws.usecases.jobs import Control

from conftest import make_config
from test_browser import _context, browser, server, shot  # noqa: F401  (fixtures)

USERS = {"alice": "wonderland", "root": "toor"}


#: one database is enough here: tests/test_stats.py covers both
BACKENDS = ("sqlite",)


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.auth = AuthConfig(modes=("basic",), admins=frozenset({"root"}),
                          users={u: generate_password_hash(p, method="pbkdf2:sha256:1000")
                                 for u, p in USERS.items()})
    return cfg


@pytest.fixture
def outside():
    return []


def as_user(browser, server, outside, user: str):  # noqa: F811
    return _context(browser, server, outside, viewport={"width": 1280, "height": 900},
                    extra_http_headers={"Authorization": "Basic " + base64.b64encode(
                        f"{user}:{USERS[user]}".encode()).decode()})


def test_the_administrators_page_shows_counts_and_a_series_per_phase(
        browser, server, outside, api, app):  # noqa: F811
    alice = Caller("alice")
    for run in (True, True, False):
        api.create("sleep", [("DURATION", "1")], {}, Control(run=run), alice)
    app.extensions["uws_stats"].store.sample_phases(timeutil.now())
    context = as_user(browser, server, outside, "root")
    page = context.new_page()
    page.goto(f"{server.url}/stats")
    assert page.inner_text("h1") == "Statistics of the server"
    row = page.locator('table.stats-counts tr[data-owner="alice"]')
    assert row.locator('[data-phase="QUEUED"]').inner_text() == "2"
    assert row.locator('[data-phase="PENDING"]').inner_text() == "1"
    assert row.locator('[data-role="queued"]').inner_text() == "2"
    series = page.locator("svg.phase-chart polyline.series")
    assert sorted(series.nth(i).get_attribute("data-phase") for i in range(series.count())) \
        == ["PENDING", "QUEUED"]
    assert page.locator("svg.phase-chart").is_visible()
    page.click("a:text-is('Last day')")
    page.wait_for_url("**/stats?window=day")
    shot(page, "20-statistics")
    context.close()
    assert outside == []


def test_the_header_links_administrators_to_the_statistics(browser, server, outside):  # noqa: F811
    for user, links in (("root", 1), ("alice", 0)):
        context = as_user(browser, server, outside, user)
        page = context.new_page()
        page.goto(f"{server.url}/")
        assert page.locator("a.admin-link").count() == links
        context.close()
