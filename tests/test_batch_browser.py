"""The batch page driven in a real Chromium (see tests/test_browser.py for the set-up)."""
from __future__ import annotations

import time

import pytest

from uws.usecases.batches import BatchControl

from test_browser import _context, browser  # noqa: F401  (fixtures)

FINAL = ("completed", "failed", "partially failed", "aborted")


#: one database is enough here: tests/test_batches.py covers both
BACKENDS = ("sqlite",)


@pytest.fixture
def page(browser, live_server):  # noqa: F811
    outside: list[str] = []
    context = _context(browser, live_server, outside, viewport={"width": 1280, "height": 860})
    yield context.new_page()
    context.close()
    assert outside == []


def status_of(page) -> str:
    return page.get_attribute("article.batch", "data-status")


def reload_until_finished(page, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while (status := status_of(page)) not in FINAL and time.monotonic() < deadline:
        page.wait_for_timeout(200)      # the page does not refresh itself: ask again
        page.reload()
    return status


def test_a_batch_runs_from_its_page_and_its_failed_job_is_repeated(app, live_server, page):
    rows = [[("DURATION", "0")], [("DURATION", "0"), ("FAIL", "true"), ("MESSAGE", "bad row")]]
    batch_id = app.extensions["uws_batches"].create("sleep", rows, BatchControl(run_id="pair"))
    page.goto(f"{live_server.url}/sleep/batches/{batch_id}")
    assert status_of(page) == "pending"
    assert page.inner_text("h1 .title") == "pair"
    page.click("button:text-is('Run')")
    assert reload_until_finished(page) == "partially failed"
    assert page.get_attribute("[data-role=bar]", "value") == "100.0"
    assert page.locator("table[data-role=report] tr", has_text="bad row").count() == 1
    page.click("button:text-is('Repeat failed')")
    page.wait_for_url(lambda url: batch_id not in url and "/sleep/batches/" in url)
    assert status_of(page) == "pending"
    assert page.locator("table[data-role=report] tbody tr").count() == 1
    page.click("button:text-is('Delete')")
    page.click("[data-role=confirm] button:text-is('Delete')")
    page.wait_for_url(f"{live_server.url}/sleep/batches?deleted=*")
    assert page.inner_text("[data-role=total]") == "1"
