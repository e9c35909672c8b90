"""The pages people use, in a real Chromium (set-up as in tests/test_browser.py): the
batch page follows its jobs live, every page fits a 400 px screen without hiding a
column behind a scroll, and deleting asks first, with and without JavaScript.

Screenshots of every page at 1280 and 400 px land in the test session's temporary
folder, under ``artifacts/`` (its path is printed), never in the repository."""
from __future__ import annotations

import pytest
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig
from uws.domain import timeutil
from uws.domain.model import Caller
from uws.domain.phases import ACTIVE
from uws.usecases.batches import BatchControl
from uws.usecases.holds import Holds
from uws.usecases.jobs import Control

from conftest import LiveServer, make_config
from test_browser import _context, browser  # noqa: F401  (fixtures)
from test_holds import FAST_HASH, USERS, basic

#: one database is enough here: the protocol tests cover both
BACKENDS = ("sqlite",)

WIDE, NARROW = 1280, 400
FINAL = ("completed", "failed", "partially failed", "aborted")


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url)
    cfg.auth = AuthConfig(
        modes=("basic",),
        users={u: generate_password_hash(p, method=FAST_HASH) for u, p in USERS.items()},
        admins=frozenset({"root"}))
    return cfg


@pytest.fixture
def server(app):
    with LiveServer(app) as live:
        yield live


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    folder = tmp_path_factory.getbasetemp() / "artifacts"
    folder.mkdir(exist_ok=True)
    print(f"screenshots in {folder}")
    return folder


@pytest.fixture
def open_page(browser, server):  # noqa: F811
    """open_page(width, javascript=True): a page of the administrator's (who may see
    every page), refusing every request that leaves the test server."""
    outside: list[str] = []
    contexts = []

    def opened(width: int = WIDE, javascript: bool = True):
        context = _context(browser, server, outside, viewport={"width": width, "height": 860},
                           extra_http_headers=basic("root"), java_script_enabled=javascript)
        contexts.append(context)
        return context.new_page()
    yield opened
    for context in contexts:
        context.close()
    assert outside == []


ROOT = Caller("root", admin=True)


def batch_of(app, durations: list[str], run_id: str, run: bool = False) -> str:
    rows = [[("DURATION", d)] for d in durations]
    return app.extensions["uws_batches"].create("sleep", rows, BatchControl(run_id=run_id, run=run),
                                                ROOT)


def wait_until_final(api, service: str, job_ids: list[str]) -> None:
    """Each job once it has ended (a WAIT returns at each change of phase)."""
    for job_id in job_ids:
        for _ in range(10):
            if api.wait(service, job_id, 10, None, ROOT).phase not in ACTIVE:
                break
        else:
            pytest.fail(f"job {job_id} did not end")


# -- the batch page follows its jobs ------------------------------------------------------

def test_the_batch_page_shows_its_jobs_end_without_being_reloaded(app, server, open_page):
    batch_id = batch_of(app, ["0.5", "0.5", "0.5"], "live")
    page = open_page()
    page.goto(f"{server.url}/sleep/batches/{batch_id}")
    assert page.get_attribute("article.batch", "data-status") == "pending"
    page.evaluate("window.notReloaded = true")
    app.extensions["uws_batches"].run("sleep", batch_id, ROOT)
    page.wait_for_selector('article.batch[data-status="completed"]')
    assert page.inner_text("[data-role=status]") == "completed"
    assert page.get_attribute("[data-role=bar]", "value") == "100.0"
    assert page.inner_text("[data-role=percent]") == "100.0%"
    assert page.inner_text("[data-role=finished]") == "3 of 3 jobs finished"
    assert page.inner_text("[data-role=phases]").replace("\u00a0", " ").strip() == "COMPLETED 3"
    assert page.locator("table[data-role=report] [data-role=phase]").all_inner_texts() \
        == ["COMPLETED"] * 3
    assert page.evaluate("window.notReloaded") is True


def test_the_batch_page_without_javascript_shows_the_batch_as_loaded(app, server, open_page):
    batch_id = batch_of(app, ["0"], "static", run=True)
    wait_until_final(app.extensions["uws"], "sleep",
                     [j.id for j in app.extensions["uws_batches"].report(
                         app.extensions["uws_batches"].get("sleep", batch_id, ROOT), 0, 10)])
    page = open_page(javascript=False)
    page.goto(f"{server.url}/sleep/batches/{batch_id}")
    assert page.get_attribute("article.batch", "data-status") == "completed"
    assert page.inner_text("[data-role=finished]") == "1 of 1 jobs finished"


# -- every page at 1280 and 400 px ---------------------------------------------------------

OVERFLOWING = """() => {
  const out = [];
  for (const el of document.querySelectorAll('.card, .card *')) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 1) {   // not sr-only
      out.push(`${el.tagName.toLowerCase()}.${el.className} ${el.scrollWidth}>${el.clientWidth}`);
    }
  }
  return out;
}"""

#: Every column header of every table, and whether each of its cells shows it: in the
#: header row where that is seen, else as the label before each cell (its data-label).
UNLABELLED = """() => {
  const out = [];
  const width = document.documentElement.clientWidth;
  for (const table of document.querySelectorAll('.card table')) {
    const heads = Array.from(table.querySelectorAll('thead th'));
    const shownHead = heads.length && heads[0].getBoundingClientRect().height > 2;
    for (const [i, th] of heads.entries()) {
      const label = th.textContent.trim();
      const box = th.getBoundingClientRect();
      if (shownHead) {
        if (box.right > width + 1) out.push(`header ${label} off the screen`);
        continue;
      }
      for (const row of table.querySelectorAll('tbody tr')) {
        const cell = row.children[i];
        if (!cell.childNodes.length) continue;      // nothing to show (no progress yet)
        const before = getComputedStyle(cell, '::before').content;
        if (before !== JSON.stringify(label)) out.push(`${label}: cell labelled ${before}`);
        if (cell.getBoundingClientRect().right > width + 1) out.push(`${label}: cell off the screen`);
      }
    }
  }
  return out;
}"""

#: Each badge that counts something, and whether its number sits on the same line.
SPLIT_COUNTS = """() => Array.from(document.querySelectorAll('.counted, [data-role=phases] .chip'))
  .filter((el) => el.getClientRects().length > 1).map((el) => el.textContent.trim())"""


def every_page(app, api, server) -> dict[str, str]:
    """The pages, with something on each: jobs in several phases, a finished batch,
    sampled statistics and a hold."""
    alice = Caller("alice")
    done = api.create("sleep", [("DURATION", "0")], {}, Control(run=True, run_id="done"), alice)
    failed = api.create("sleep", [("DURATION", "0"), ("FAIL", "true"), ("MESSAGE", "a bad row")],
                        {}, Control(run=True, run_id="a-long-run-id-that-might-not-fit-narrowly"),
                        alice)
    api.create("sleep", [("DURATION", "30")], {}, Control(run_id="pending"), alice)
    batch_id = batch_of(app, ["0", "0"], "pair", run=True)
    batches = app.extensions["uws_batches"]
    job_ids = [j.id for j in batches.report(batches.get("sleep", batch_id, ROOT), 0, 10)]
    wait_until_final(api, "sleep", [done, failed] + job_ids)
    app.extensions["uws_stats"].store.sample_phases(timeutil.now())
    Holds(api).hold("sleep", "alice", "maintenance of a long name", ROOT)
    return {"joblist": "/sleep", "job": f"/sleep/{done}", "batches": "/sleep/batches",
            "batch": f"/sleep/batches/{batch_id}", "stats": "/stats", "holds": "/sleep/holds"}


def test_every_page_at_400_px_hides_no_column_and_splits_no_count(
        app, api, server, open_page, artifacts):
    pages = every_page(app, api, server)
    problems = {}
    for width in (WIDE, NARROW):
        page = open_page(width)
        for name, path in pages.items():
            r = page.goto(f"{server.url}{path}")
            assert r is not None and r.status == 200, (name, r and r.status)
            page.screenshot(path=str(artifacts / f"{name}-{width}.png"), full_page=True)
            found = page.evaluate(OVERFLOWING) + page.evaluate(UNLABELLED) + \
                [f"split {t}" for t in page.evaluate(SPLIT_COUNTS)]
            if found:
                problems[f"{name} at {width}"] = found
    assert problems == {}


# -- deleting asks first ---------------------------------------------------------------------

@pytest.mark.parametrize("javascript", [True, False], ids=["script", "no-script"])
def test_a_job_is_deleted_only_once_confirmed(api, server, open_page, javascript):
    job_id = api.create("sleep", [("DURATION", "30")], {}, Control(run_id="doomed"), ROOT)
    page = open_page(javascript=javascript)
    page.goto(f"{server.url}/sleep/{job_id}")
    page.click("div.actions button:text-is('Delete')")
    page.wait_for_selector("[data-role=confirm]")
    assert page.inner_text("h1") == "Delete job doomed?"
    assert api.get("sleep", job_id, ROOT).run_id == "doomed"       # not yet
    page.click("[data-role=confirm] a:text-is('Cancel')")
    page.wait_for_selector("article.job")
    page.click("div.actions button:text-is('Delete')")
    page.click("[data-role=confirm] button:text-is('Delete')")
    page.wait_for_selector("[data-role=deleted]")
    assert page.inner_text("[data-role=deleted]") == f"Job {job_id} was deleted."
    assert page.request.get(f"{server.url}/sleep/{job_id}",
                            headers=basic("root")).status == 404


@pytest.mark.parametrize("javascript", [True, False], ids=["script", "no-script"])
def test_a_batch_is_deleted_only_once_confirmed(app, server, open_page, javascript):
    batch_id = batch_of(app, ["0", "0"], "doomed-batch")
    page = open_page(javascript=javascript)
    page.goto(f"{server.url}/sleep/batches/{batch_id}")
    page.click("div.actions button:text-is('Delete')")
    page.wait_for_selector("[data-role=confirm]")
    assert page.inner_text("h1") == "Delete batch doomed-batch?"
    page.click("[data-role=confirm] button:text-is('Delete')")
    page.wait_for_selector("[data-role=deleted]")
    assert page.inner_text("[data-role=deleted]") == f"Batch {batch_id} was deleted."
    assert page.request.get(f"{server.url}/sleep/batches/{batch_id}",
                            headers=basic("root")).status == 404


# -- the statistics chart --------------------------------------------------------------------

def test_the_chart_is_in_local_time_and_ends_at_the_tables_counts(app, api, server, open_page):
    api.create("sleep", [("DURATION", "30")], {}, Control(), Caller("alice"))
    app.extensions["uws_stats"].store.sample_phases(timeutil.now())
    for _ in range(2):      # created after the sample: the table counts them, the chart too
        api.create("sleep", [("DURATION", "30")], {}, Control(), Caller("alice"))
    page = open_page()
    page.goto(f"{server.url}/stats")
    table = page.inner_text('table.stats-counts tr[data-owner="All"] [data-phase="PENDING"]')
    assert table == "3"
    assert page.get_attribute('polyline.series[data-phase="PENDING"]', "data-last") == "3"
    for axis in page.locator("svg.phase-chart text[data-datetime]").all():
        assert "local" in (axis.get_attribute("class") or "")
        assert not axis.inner_html().endswith("UTC")
