"""The browser interface driven in a real Chromium (Debian's, through Playwright).

Chromium must be at ``/usr/bin/chromium`` (or ``UWS_TEST_CHROMIUM``); without it, or
without the ``playwright`` package, these tests skip locally and fail under CI.
Every request the browser makes to anything but the test server is refused.
Screenshots of the main pages land in ``screenshots/`` (git-ignored).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from uws.usecases.jobs import Control

from conftest import IN_CI, LiveServer

CHROMIUM = os.environ.get("UWS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SHOTS = Path(__file__).resolve().parent.parent / "screenshots"
TIMEOUT_MS = 20000
ZONE = "Europe/Berlin"      # not UTC, so local times visibly differ


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _unavailable()
    if reason:
        if IN_CI:
            pytest.fail(f"browser tests need Chromium under CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


#: one database is enough here: the protocol tests cover both
BACKENDS = ("sqlite",)


@pytest.fixture
def server(app):
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def outside():
    """Requests the browser tried to send anywhere but the test server."""
    return []


def _context(browser, server, outside, **options):
    context = browser.new_context(accept_downloads=True, timezone_id=ZONE, **options)
    host = urlsplit(server.url).netloc

    def only_local(route):
        if urlsplit(route.request.url).netloc == host:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()
    context.route("**/*", only_local)
    context.set_default_timeout(TIMEOUT_MS)
    return context


@pytest.fixture
def page(browser, server, outside):
    context = _context(browser, server, outside, viewport={"width": 1280, "height": 860})
    yield context.new_page()
    context.close()
    assert outside == []


def shot(page, name: str, full_page: bool = True) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def phase_is(page, phase: str) -> None:
    page.wait_for_selector(f'article.job[data-phase="{phase}"]')


def create_sleep(page, server, duration: str, run_id: str, run: bool = True) -> None:
    page.goto(f"{server.url}/sleep")
    page.fill("#new-DURATION", duration)
    page.click("summary")
    page.fill("#new-RUNID", run_id)
    page.click("button:text-is('Create and run')" if run else "button:text-is('Create')")
    page.wait_for_selector("article.job")


# -- tests -------------------------------------------------------------------------

def test_services_page_lists_services_in_local_time_layout(page, server):
    page.goto(server.url + "/")
    assert page.inner_text("h1") == "Services"
    assert page.locator("ul.services li").count() == 2
    shot(page, "01-services")


def test_checksum_job_from_the_form_with_an_upload_completes_and_its_result_downloads(
        page, server, tmp_path):
    data = tmp_path / "stars.csv"
    data.write_bytes(b"ra,dec\n10.5,-3.25\n" * 200)
    page.goto(f"{server.url}/checksum")
    page.set_input_files("#new-FILE", str(data))
    page.select_option("#new-ALGORITHM", "sha1")
    shot(page, "10-checksum-form", full_page=False)
    page.click("text=Create and run")
    phase_is(page, "COMPLETED")
    assert page.locator("table.params tr", has_text="FILE").locator("a").inner_text() == "uploaded file"
    shot(page, "05-job-completed-checksum")
    with page.expect_download() as download:
        page.click("ul.results a")
    content = Path(download.value.path()).read_text()
    assert content.split()[0] == hashlib.sha1(data.read_bytes()).hexdigest()


SAMPLE = """() => ({phase: document.querySelector('article.job').dataset.phase,
                     value: document.querySelector('[data-role=bar]').value,
                     sameDocument: window.notReloaded === true})"""


def sample(page):
    """Phase and bar of the job page, or None once the page is reloading."""
    from playwright.sync_api import Error
    try:
        return page.evaluate(SAMPLE)
    except Error:       # the reload at the end destroyed the context
        return None


def test_progress_bar_moves_live_while_the_job_runs(page, server):
    create_sleep(page, server, "4", "watched")
    page.evaluate("window.notReloaded = true")
    phase_is(page, "EXECUTING")
    seen = []
    while (state := sample(page)) and state["phase"] == "EXECUTING":
        assert state["sameDocument"], "the page reloaded while the job ran"
        seen.append(state["value"])
        page.wait_for_timeout(400)
        if len(seen) == 5:
            assert "remaining" in page.inner_text("[data-role=remaining]")
            shot(page, "04-job-running")
    assert len(set(seen)) >= 3, seen
    assert seen == sorted(seen), seen
    phase_is(page, "COMPLETED")
    assert page.get_attribute("[data-role=bar]", "value") == "100.0"
    assert page.locator("ul.results a").inner_text() == "result"


LOCAL = """iso => new Intl.DateTimeFormat(undefined, {timeZone: "%s", year: "numeric",
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit"}
    ).format(new Date(iso))""" % ZONE


def test_times_are_shown_in_local_time_with_utc_in_the_title(page, server):
    # A PENDING job: its page is never reloaded (as a finishing job's is) while read.
    create_sleep(page, server, "0", "timed", run=False)
    phase_is(page, "PENDING")
    page.wait_for_selector("dl.fields time.local")
    created = page.locator("dl.fields time").first
    local = page.evaluate(LOCAL, created.get_attribute("datetime"))
    assert created.inner_text().split() == local.split()    # no-break spaces aside
    # A narrow column breaks it between the date and the time of day only.
    assert created.evaluate("el => el.textContent").count(" ") == 1
    assert created.get_attribute("title").endswith(" UTC")
    assert created.get_attribute("title") != created.inner_text()
    assert ZONE in page.inner_text("footer")


def test_a_slow_job_is_aborted_with_the_abort_button(page, server):
    create_sleep(page, server, "600", "slow")
    phase_is(page, "EXECUTING")
    page.click("button:text('Abort')")
    phase_is(page, "ABORTED")
    assert not page.is_visible("button:text('Abort')")
    shot(page, "06-job-aborted")


def test_a_job_page_opened_while_queued_follows_the_job_as_it_starts(page, server, app):
    api = app.extensions["uws"]
    blockers = [api.create("sleep", [("DURATION", "60")], {}, Control(run=True))
                for _ in range(2)]      # both slots busy: the next job stays QUEUED
    create_sleep(page, server, "30", "waiting")
    phase_is(page, "QUEUED")
    assert page.is_visible("form[action$='/executionduration']")
    api.abort("sleep", blockers[0])
    phase_is(page, "EXECUTING")
    page.wait_for_selector("dd[data-role=started] time")
    assert not page.is_visible("form[action$='/executionduration']")
    for job_id in blockers[1:] + [page.url.rsplit("/", 1)[1]]:
        api.abort("sleep", job_id)


def test_a_job_is_deleted_with_the_delete_button_once_confirmed(page, server):
    create_sleep(page, server, "0", "doomed")
    job_url = page.url
    page.click("button:text('Delete')")
    page.wait_for_selector("[data-role=confirm]")
    page.click("[data-role=confirm] button:text-is('Delete')")
    page.wait_for_selector("table.joblist, p.empty")
    job_id = job_url.rsplit("/", 1)[1]
    assert page.url == f"{server.url}/sleep?deleted={job_id}"      # the whole paged list
    assert page.inner_text("[data-role=deleted]") == f"Job {job_id} was deleted."
    assert page.locator("td.job-name", has_text="doomed").count() == 0
    assert page.request.get(job_url).status == 404


def test_bad_values_come_back_next_to_their_fields(page, server):
    page.goto(f"{server.url}/sleep")
    page.fill("#new-DURATION", "2.5")
    page.fill("#new-MESSAGE", "keep me")
    page.click("summary")
    page.fill("#new-DESTRUCTION", "2000-01-01T00:00:00")
    page.click("text=Create and run")
    page.wait_for_selector(".field-error")
    assert page.inner_text("#new-DESTRUCTION-error") == "must be in the future"
    assert page.input_value("#new-DURATION") == "2.5"
    assert page.input_value("#new-MESSAGE") == "keep me"
    shot(page, "03-form-errors")


def test_paging_through_250_jobs(page, server, api):
    api.store.seed_jobs("sleep", 250)
    page.goto(f"{server.url}/sleep")
    shot(page, "02-service-form-and-list", full_page=False)
    ids, ranges = [], []
    while True:
        ranges.append(page.inner_text("[data-role=range]"))
        ids += page.eval_on_selector_all("tr[data-job-url]", "rows => rows.map(r => r.dataset.jobUrl)")
        if page.locator("a[rel=next]").count() == 0:
            break
        page.click("a[rel=next]")
    assert len(ids) == len(set(ids)) == 250
    assert ranges == ["1–50 of 250", "51–100 of 250", "101–150 of 250", "151–200 of 250",
                      "201–250 of 250"]
    page.click("a[rel=prev]")
    assert page.inner_text("[data-role=range]") == "151–200 of 250"
    page.locator("nav.pager").scroll_into_view_if_needed()
    shot(page, "07-list-page-4", full_page=False)


def test_list_rows_of_running_jobs_show_live_progress(page, server, api):
    api.store.seed_jobs("sleep", 5)
    create_sleep(page, server, "6", "running")
    phase_is(page, "EXECUTING")
    page.goto(f"{server.url}/sleep")
    row = page.locator("tr", has_text="running")
    first = float(row.locator("progress").get_attribute("value"))
    page.wait_for_function(   # a function, not a string: the page's CSP forbids eval
        "(least) => document.querySelector('tr[data-phase=EXECUTING] progress').value > least",
        arg=first + 10)
    shot(page, "09-list-running-job", full_page=False)
    page.wait_for_selector('tr[data-phase="COMPLETED"] >> text=running', timeout=15000)
    assert row.locator("progress").count() == 0
    assert row.locator(".badge").inner_text() == "COMPLETED"


def test_pending_job_parameters_change_from_the_job_page(page, server):
    page.goto(f"{server.url}/sleep")
    page.fill("#new-DURATION", "3")
    page.click("button:text-is('Create')")
    phase_is(page, "PENDING")
    page.click("summary:text('Change parameters')")
    page.fill("#edit-DURATION", "0.5")
    page.check("#edit-FAIL")
    shot(page, "11-job-pending-edit")
    page.click("text=Save parameters")
    phase_is(page, "PENDING")
    assert page.inner_text("table.params tr:has-text('DURATION') td") == "0.5"
    assert page.inner_text("table.params tr:has-text('FAIL') td") == "true"
    page.click("button:text('Run')")
    phase_is(page, "ERROR")
    assert "failed on request" in page.inner_text("section.job-error")


def test_job_list_filters_by_phase(page, server, api):
    api.store.seed_jobs("sleep", 3)
    create_sleep(page, server, "0", "fresh")
    phase_is(page, "COMPLETED")
    page.goto(f"{server.url}/sleep")
    page.click("nav.filters a:text('PENDING')")
    assert page.inner_text("[data-role=range]") == "0–0 of 0"
    page.click("nav.filters a:text('All')")
    assert page.inner_text("[data-role=range]") == "1–4 of 4"


def test_narrow_screen_layout(browser, server, outside, api):
    context = _context(browser, server, outside, viewport={"width": 390, "height": 844},
                       device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    try:
        create_sleep(page, server, "600", "phone")
        phase_is(page, "EXECUTING")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        shot(page, "08-job-narrow")
        page.click("button:text('Abort')")
        phase_is(page, "ABORTED")
    finally:
        context.close()
    assert outside == []
