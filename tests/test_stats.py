"""Statistics (/stats, /{service}/stats) and Prometheus metrics (/metrics): counts
from the job counters, wait and run time percentiles from the histograms kept as
jobs start and end, each caller seeing only what is theirs."""
from __future__ import annotations

import base64
import datetime as dt
import time

import pytest
from lxml import etree, html
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig
from uws.domain import timeutil
from uws.domain.model import Job, new_job_id
from uws.domain.phases import Phase
from uws.resources import schemas_dir
from uws.usecases import stats

from conftest import make_config

USERS = {"alice": "wonderland", "bob": "builder", "root": "toor"}
_schema = etree.XMLSchema(etree.parse(str(schemas_dir() / "uws-stats-v1.xsd")))
NS = {"s": "urn:ivoa-uws-server:stats:v1"}


def basic(user: str) -> dict:
    raw = f"{user}:{USERS[user]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


ALICE, BOB, ROOT = basic("alice"), basic("bob"), basic("root")


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, scheduler=False)
    cfg.auth = AuthConfig(modes=("basic",), admins=frozenset({"root"}),
                          users={u: generate_password_hash(p, method="pbkdf2:sha256:1000")
                                 for u, p in USERS.items()})
    return cfg


def stats_xml(client, path: str, headers: dict) -> etree._Element:
    r = client.get(path, headers=headers)
    assert r.status_code == 200, r.data
    assert r.mimetype == "text/xml"
    doc = etree.fromstring(r.data)
    assert _schema.validate(doc), _schema.error_log
    return doc


def stats_json(client, path: str, headers: dict) -> dict:
    r = client.get(path, headers={**headers, "Accept": "application/json"})
    assert r.status_code == 200, r.data
    return r.get_json()


def run_job(client, headers: dict, fail: bool = False) -> str:
    """A sleep job of no duration, run to its end by the local executor."""
    r = client.post("/sleep", data={"DURATION": "0", "PHASE": "RUN",
                                    "FAIL": "true" if fail else "false"}, headers=headers)
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        phase = client.get(f"{path}/phase", headers=headers).get_data(as_text=True)
        if phase in ("COMPLETED", "ERROR"):
            return path
        client.get(f"{path}?WAIT=5&PHASE={phase}", headers=headers)
    pytest.fail(f"{path} did not finish")


def pending_job(client, headers: dict) -> str:
    r = client.post("/sleep", data={"DURATION": "0"}, headers=headers)
    assert r.status_code == 303
    return r.headers["Location"].replace("http://localhost", "")


def finished_job(api, owner: str, wait: float, run: float, ended_ago: float = 60) -> None:
    """A job stored already COMPLETED with known times: the hook records its durations."""
    end = timeutil.now() - dt.timedelta(seconds=ended_ago)
    start = end - dt.timedelta(seconds=run)
    created = start - dt.timedelta(seconds=wait)
    api.store.insert_job(Job(id=new_job_id(), service="sleep", owner=owner,
                             phase=Phase.COMPLETED, creation_time=created,
                             execution_duration=0, destruction=None, start_time=start,
                             end_time=end))


def phases_of(el) -> dict[str, int]:
    return {p.get("name"): int(p.get("jobs")) for p in el.findall("s:phase", NS)}


def close_to(value, expected: float) -> bool:
    """Within the bins' resolution (about 9 % either side of a bin's middle)."""
    return value is not None and abs(float(value) - expected) <= 0.1 * expected


# -- counts ---------------------------------------------------------------------------

def test_counts_match_the_jobs_after_real_runs(client):
    run_job(client, ALICE)
    run_job(client, ALICE, fail=True)
    pending_job(client, ALICE)
    doc = stats_xml(client, "/sleep/stats", ALICE)
    total = doc.find("s:all", NS)
    assert phases_of(total) == {"PENDING": 1, "COMPLETED": 1, "ERROR": 1}
    assert total.find("s:waitTime", NS).get("samples") == "2"
    assert total.find("s:runTime", NS).get("samples") == "2"


def test_queue_length_counts_queued_and_held_jobs_separately(config):
    from uws.web.app import create_app, shutdown
    config.executor = "none"        # nothing takes the queued job
    application = create_app(config)
    client, api = application.test_client(), application.extensions["uws"]
    try:
        queued, held = pending_job(client, BOB), pending_job(client, BOB)
        assert client.post(f"{queued}/phase", data={"PHASE": "RUN"},
                           headers=BOB).status_code == 303
        assert api.store.mark_held(held.rsplit("/", 1)[1])
        doc = stats_json(client, "/sleep/stats", BOB)
        assert (doc["all"]["queued"], doc["all"]["held"]) == (1, 1)
        assert doc["all"]["jobs"] == {"QUEUED": 1, "HELD": 1}
    finally:
        shutdown(application)


def test_an_owner_sees_only_their_own_figures(client):
    run_job(client, ALICE)
    pending_job(client, BOB)
    pending_job(client, BOB)
    alice = stats_json(client, "/sleep/stats", ALICE)
    bob = stats_json(client, "/sleep/stats", BOB)
    assert alice["all"]["jobs"] == {"COMPLETED": 1}
    assert bob["all"]["jobs"] == {"PENDING": 2}
    assert bob["all"]["runTime"]["samples"] == 0
    assert "owners" not in alice and "owners" not in bob
    assert stats_xml(client, "/sleep/stats", BOB).find("s:owner", NS) is None


def test_an_administrator_sees_everyone_and_each_owner(client):
    run_job(client, ALICE)
    pending_job(client, BOB)
    doc = stats_json(client, "/sleep/stats", ROOT)
    assert doc["all"]["jobs"] == {"PENDING": 1, "COMPLETED": 1}
    owners = {o["ownerId"]: o for o in doc["owners"]}
    assert owners["alice"]["jobs"] == {"COMPLETED": 1}
    assert owners["alice"]["runTime"]["samples"] == 1
    assert owners["bob"]["jobs"] == {"PENDING": 1}


def test_server_statistics_add_up_every_service(client, api):
    pending_job(client, ALICE)
    finished_job(api, "alice", wait=1, run=1)
    api.store.insert_job(Job(id=new_job_id(), service="checksum", owner="alice",
                             phase=Phase.PENDING, creation_time=timeutil.now(),
                             execution_duration=0, destruction=None))
    doc = stats_xml(client, "/stats", ALICE)
    assert doc.get("service") is None
    assert phases_of(doc.find("s:all", NS)) == {"PENDING": 2, "COMPLETED": 1}
    assert stats_xml(client, "/sleep/stats", ALICE).get("service") == "sleep"


# -- durations ---------------------------------------------------------------------------

def test_percentiles_come_from_the_durations_of_the_window(client, api):
    for seconds in range(1, 11):        # run 1 .. 10 s, waits ten times as long
        finished_job(api, "alice", wait=10 * seconds, run=seconds)
    doc = stats_json(client, "/sleep/stats", ALICE)
    run, wait = doc["all"]["runTime"], doc["all"]["waitTime"]
    assert run["samples"] == wait["samples"] == 10
    assert close_to(run["p50"], 5) and close_to(run["p90"], 9) and close_to(run["p99"], 10)
    assert close_to(wait["p50"], 50) and close_to(wait["p99"], 100)


def test_the_day_window_includes_what_the_hour_window_leaves_out(client, api):
    finished_job(api, "alice", wait=1, run=2, ended_ago=60)
    finished_job(api, "alice", wait=1, run=300, ended_ago=3 * 3600)
    hour = stats_json(client, "/sleep/stats?window=hour", ALICE)["all"]["runTime"]
    day = stats_json(client, "/sleep/stats?window=day", ALICE)["all"]["runTime"]
    assert hour["samples"] == 1 and close_to(hour["p99"], 2)
    assert day["samples"] == 2 and close_to(day["p99"], 300)


def test_the_default_window_is_the_last_hour(client):
    assert stats_xml(client, "/sleep/stats", ALICE).get("window") == "hour"


def test_an_unknown_window_is_refused_with_400(client):
    assert client.get("/sleep/stats?window=week", headers=ALICE).status_code == 400


def test_a_window_without_jobs_has_no_percentiles(client):
    pending_job(client, ALICE)
    durations = stats_xml(client, "/sleep/stats", ALICE).find("s:all/s:runTime", NS)
    assert durations.get("samples") == "0" and durations.get("p50") is None
    assert stats_json(client, "/sleep/stats", ALICE)["all"]["runTime"]["p50"] is None


def test_a_job_aborted_before_it_started_has_no_durations(client, api):
    path = pending_job(client, ALICE)
    assert client.post(f"{path}/phase", data={"PHASE": "ABORT"}, headers=ALICE).status_code == 303
    doc = stats_json(client, "/sleep/stats", ALICE)
    assert doc["all"]["jobs"] == {"ABORTED": 1}
    assert doc["all"]["waitTime"]["samples"] == doc["all"]["runTime"]["samples"] == 0


def test_bins_reproduce_durations_within_their_resolution():
    for seconds in (0.004, 0.5, 1, 7.3, 60, 3600, 86400):
        assert close_to(stats.bin_middle(stats.bin_of(seconds)), seconds)
    assert stats.bin_of(-3) == 0 and stats.bin_of(10 ** 9) == stats.TOP_BIN


# -- history and pruning ------------------------------------------------------------------

def test_the_counts_are_sampled_once_per_bucket_whichever_process_comes(client, app):
    pending_job(client, ALICE)
    store = app.extensions["uws_stats"].store
    now = timeutil.now()
    assert store.sample_phases(now) is True
    assert store.sample_phases(now) is False       # another process, same bucket
    assert store.phase_history("sleep", stats.bucket_of(now)) == [
        (stats.bucket_of(now), Phase.PENDING, 1)]


def test_the_statistics_sweep_samples_the_counts(client, app, api):
    from uws.usecases.sweeps import Sweeps
    pending_job(client, ALICE)
    store = app.extensions["uws_stats"].store
    Sweeps(config=api.config, store=api.store, files=api.files, executor=api.executor,
           stats=store).sample_statistics()
    since = stats.bucket_of(timeutil.now() - dt.timedelta(hours=1))
    assert [(phase, n) for _, phase, n in store.phase_history(None, since)] == [
        (Phase.PENDING, 1)]


def test_old_statistics_are_pruned(client, app, api):
    finished_job(api, "alice", wait=1, run=1)
    store = app.extensions["uws_stats"].store
    store.sample_phases(timeutil.now())
    store.prune(timeutil.now() + dt.timedelta(seconds=stats.BUCKET_SECONDS))
    assert store.phase_history(None, timeutil.now() - dt.timedelta(days=1)) == []
    for width in stats.WIDTHS.values():
        assert store.duration_bins(None, None, width,
                                   timeutil.now() - dt.timedelta(days=1)) == {}


# -- representations and access --------------------------------------------------------

def test_json_is_served_for_format_json(client):
    r = client.get("/sleep/stats?FORMAT=json", headers=ALICE)
    assert r.mimetype == "application/json" and r.get_json()["window"] == "hour"


def test_the_html_page_shows_the_counts(client):
    pending_job(client, ALICE)
    r = client.get("/sleep/stats", headers={**ALICE, "Accept": "text/html"})
    assert r.status_code == 200 and r.mimetype == "text/html"
    assert b'data-phase="PENDING">1<' in r.data
    assert b"<svg" not in r.data        # the history is everyone's: administrators only


def test_an_owners_page_labels_the_figures_as_theirs_not_everyones(client):
    pending_job(client, ALICE)
    page = html.fromstring(client.get("/sleep/stats",
                                      headers={**ALICE, "Accept": "text/html"}).data)
    labels = {th.text for th in page.xpath("//tbody/tr/th[@scope='row']")}
    assert labels == {"Yours"}


def test_the_administrators_page_draws_one_series_per_phase(client, app):
    run_job(client, ALICE)
    pending_job(client, BOB)
    app.extensions["uws_stats"].store.sample_phases(timeutil.now())
    r = client.get("/stats", headers={**ROOT, "Accept": "text/html"})
    page = r.get_data(as_text=True)
    assert page.count('<polyline class="series"') == 2
    assert 'data-phase="COMPLETED"' in page and 'data-phase="PENDING"' in page


def test_an_unknown_service_has_no_statistics(client):
    assert client.get("/nosuch/stats", headers=ALICE).status_code == 404


def test_a_service_needing_an_identity_refuses_anonymous_statistics(tmp_path, db_url):
    from uws.web.app import create_app, shutdown
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False,
                      services={"private": {"runner": "uws.demo:sleep", "anonymous": False}})
    cfg.auth = AuthConfig(modes=("basic",), users={"alice": generate_password_hash(
        "wonderland", method="pbkdf2:sha256:1000")})
    application = create_app(cfg)
    try:
        assert application.test_client().get("/private/stats").status_code == 401
    finally:
        shutdown(application)


# -- /metrics -------------------------------------------------------------------------

def metric_samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_carry_job_gauges_and_request_counters(client):
    run_job(client, ALICE)
    pending_job(client, BOB)
    client.get("/sleep/stats", headers=ALICE)
    r = client.get("/metrics", headers=ROOT)
    assert r.status_code == 200 and r.mimetype == "text/plain"
    samples = metric_samples(r.get_data(as_text=True))
    assert samples[("uws_jobs", (("phase", "COMPLETED"), ("service", "sleep")))] == 1
    assert samples[("uws_jobs", (("phase", "PENDING"), ("service", "sleep")))] == 1
    assert samples[("uws_queued_jobs", (("service", "sleep"),))] == 0
    stats_get = (("method", "GET"), ("route", "/<service>/stats"), ("status", "200"))
    assert samples[("uws_http_requests_total", stats_get)] == 1
    assert samples[("uws_http_request_duration_seconds_count",
                    (("method", "GET"), ("route", "/<service>/stats")))] == 1
    assert not any(dict(labels).get("owner") for _, labels in samples)


def test_metrics_label_routes_not_raw_paths(client):
    for n in range(3):
        client.get(f"/sleep/{n:032x}", headers=ALICE)
    samples = metric_samples(client.get("/metrics", headers=ROOT).get_data(as_text=True))
    routes = {dict(labels).get("route") for name, labels in samples
              if name == "uws_http_requests_total"}
    assert "/<service>/<job_id>" in routes
    assert not any(r and r.startswith("/sleep/") for r in routes)


def test_metrics_count_invented_methods_as_other(client):
    for n in range(3):
        client.open("/sleep", method=f"BREW{n}", headers=ALICE)
    samples = metric_samples(client.get("/metrics", headers=ROOT).get_data(as_text=True))
    methods = {dict(labels).get("method") for name, labels in samples
               if name == "uws_http_requests_total"}
    assert "other" in methods and not any(m and m.startswith("BREW") for m in methods)


def test_metrics_are_for_administrators(client):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=ALICE).status_code == 403
    assert client.get("/metrics", headers=ROOT).status_code == 200


def test_public_metrics_need_no_identity(tmp_path, db_url):
    from uws.web.app import create_app, shutdown
    application = create_app(make_config(tmp_path, db_url, executor="none", scheduler=False,
                                         metrics_public=True))
    try:
        assert application.test_client().get("/metrics").status_code == 200
    finally:
        shutdown(application)


def test_a_service_cannot_take_the_name_of_the_statistics(tmp_path, db_url):
    from uws.config.settings import ConfigError
    with pytest.raises(ConfigError, match="reserved"):
        make_config(tmp_path, db_url, services={"stats": {"runner": "uws.demo:sleep"}})


def test_metrics_refused_without_auth_name_the_metrics_public_setting(tmp_path, db_url):
    from uws.web.app import create_app, shutdown
    application = create_app(make_config(tmp_path, db_url, executor="none", scheduler=False))
    try:
        r = application.test_client().get("/metrics")
        assert r.status_code == 403
        assert "metrics_public = true" in r.get_data(as_text=True)
    finally:
        shutdown(application)
