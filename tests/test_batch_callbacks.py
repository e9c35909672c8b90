"""CALLBACK for batches: a batch names a URL at creation; when every one of its jobs
has ended the server POSTs the batch's JSON there once, signed as a job's, and shows
the outcome in the batch's documents.

The receiver, the services and the app are those of test_callbacks.py (a real HTTP
server on 127.0.0.1, listed in the services' ``callback_hosts``).
"""
from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa
from lxml import etree

import test_callbacks
from test_callbacks import SECRET, callback_config, until
from uws.domain.batchmodel import Batch
from uws.domain.model import Job, new_job_id
from uws.domain.phases import Phase
from uws.domain.timeutil import now
from uws.resources import schemas_dir
from uws.store import Store
from uws.store.batches import BatchStore
from uws.store.tables import callback as C
from uws.usecases import callbacks

from uwshelp import wait_for

NS = {"b": "urn:ivoa-uws-server:batch"}
# The app (its callback services, fast polling) and the HTTP receiver of test_callbacks.py.
app = test_callbacks.app
receiver = test_callbacks.receiver
_schema = etree.XMLSchema(etree.parse(str(schemas_dir() / "uws-batch.xsd")))


def create(client, jobs: list[dict], callback: str | None, run: bool = True,
           service: str = "sleep") -> str:
    """A batch of ``jobs`` naming ``callback`` (in the JSON object); its path."""
    doc: dict = {"jobs": jobs, "callback": callback}
    if run:
        doc["phase"] = "RUN"
    r = client.post(f"/{service}/batches", data=json.dumps(doc),
                    content_type="application/json")
    assert r.status_code == 303, r.data
    return r.headers["Location"].replace("http://localhost", "")


def batch_xml(client, path: str) -> etree._Element:
    r = client.get(path, headers={"Accept": "application/xml"})
    assert r.status_code == 200
    doc = etree.fromstring(r.data)
    assert _schema.validate(doc), _schema.error_log
    return doc


def callback_state(client, path: str) -> str | None:
    el = batch_xml(client, path).find("b:callback", NS)
    return None if el is None else el.get("state")


def deliveries(store, batch_id: str) -> int:
    """Outbox rows about the batch."""
    with store.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(C).where(
            C.c.subject_kind == "batch", C.c.subject_id == batch_id)).scalar_one()


def batch_id_of(path: str) -> str:
    return path.rsplit("/", 1)[1]


# -- delivery ---------------------------------------------------------------------------------

def test_ended_batch_is_posted_once_as_json_with_a_valid_signature(client, api, receiver):
    path = create(client, [{"DURATION": 0}, {"DURATION": 0, "FAIL": True}], receiver.url)
    assert until(lambda: receiver.requests)
    assert until(lambda: callback_state(client, path) == "delivered")
    headers, body = receiver.requests[0]
    doc = json.loads(body)
    assert doc["batchId"] == batch_id_of(path)
    assert (doc["status"], doc["percentComplete"]) == ("partially failed", 100.0)
    assert doc["phases"]["COMPLETED"] == 1 and doc["phases"]["ERROR"] == 1
    assert [j["phase"] for j in doc["jobs"]["items"]] == ["COMPLETED", "ERROR"]
    assert doc["href"].endswith(path)
    stamp = int(headers["X-UWS-Timestamp"])
    assert headers["X-UWS-Signature"] == callbacks.signature(SECRET, stamp, body)
    assert len(receiver.requests) == 1
    assert deliveries(api.store, batch_id_of(path)) == 1


def test_no_delivery_while_a_job_is_still_active(client, api, receiver):
    path = create(client, [{"DURATION": 0}, {"DURATION": 0}], receiver.url, run=False)
    first = batch_xml(client, path).find("b:jobs/b:job", NS).get("id")
    client.post(f"/sleep/{first}/phase", data={"PHASE": "RUN"})
    wait_for(lambda: api.store.get_job(first, "sleep", None).phase is Phase.COMPLETED)
    assert deliveries(api.store, batch_id_of(path)) == 0
    assert callback_state(client, path) == "waiting"
    assert receiver.requests == []


def test_aborting_the_batch_ends_it_with_one_delivery(client, api, receiver):
    path = create(client, [{"DURATION": 60}] * 5, receiver.url, run=False)
    assert client.post(path, data={"PHASE": "ABORT"}).status_code == 303
    assert deliveries(api.store, batch_id_of(path)) == 1
    assert until(lambda: receiver.requests)
    assert receiver.bodies()[0]["status"] == "aborted"


def test_batch_without_a_callback_adds_no_delivery(client, api):
    path = create(client, [{"DURATION": 60}] * 2, None, run=False)
    client.post(path, data={"PHASE": "ABORT"})
    assert deliveries(api.store, batch_id_of(path)) == 0
    assert batch_xml(client, path).find("b:callback", NS) is None


def test_repeat_names_the_same_callback(client, receiver):
    path = create(client, [{"DURATION": 60}], receiver.url, run=False)
    client.post(path, data={"PHASE": "ABORT"})
    again = client.post(path, data={"ACTION": "REPEAT"}).headers["Location"]
    el = batch_xml(client, again.replace("http://localhost", "")).find("b:callback", NS)
    assert (el.get("url"), el.get("state")) == (receiver.url, "waiting")


# -- documents ------------------------------------------------------------------------------

def test_batch_documents_show_the_callback(client, receiver):
    path = create(client, [{"DURATION": 60}], receiver.url, run=False)
    el = batch_xml(client, path).find("b:callback", NS)
    assert (el.get("url"), el.get("state"), el.get("attempts")) == (receiver.url, "waiting", "0")
    shown = client.get(path, headers={"Accept": "application/json"}).get_json()["callback"]
    assert (shown["url"], shown["state"]) == (receiver.url, "waiting")
    page = client.get(path, headers={"Accept": "text/html"}).get_data(as_text=True)
    assert 'data-role="callback"' in page and receiver.url in page


def test_callback_may_be_named_in_the_query_string(client, receiver):
    r = client.post(f"/sleep/batches?CALLBACK={receiver.url}", data="DURATION\n60\n",
                    content_type="text/csv")
    assert r.status_code == 303, r.data
    path = r.headers["Location"].replace("http://localhost", "")
    assert callback_state(client, path) == "waiting"


# -- refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("service, url", [
    ("sleep", "http://unlisted.example.org/hook"),
    ("sleep", "ftp://127.0.0.1/hook"),
    ("closed", "http://127.0.0.1/hook"),
])
def test_refused_callback_creates_no_batch(client, service, url):
    r = client.post(f"/{service}/batches", data=json.dumps({"jobs": [{}], "callback": url}),
                    content_type="application/json")
    assert r.status_code == 400
    assert b"CALLBACK" in r.data
    listed = client.get(f"/{service}/batches", headers={"Accept": "application/json"})
    assert listed.get_json()["total"] == 0
    assert client.get(f"/{service}", headers={"Accept": "application/json"}) \
        .get_json()["jobs"] == []


def test_callback_that_is_not_a_string_is_refused(client):
    r = client.post("/sleep/batches", data=json.dumps({"jobs": [{}], "callback": 7}),
                    content_type="application/json")
    assert r.status_code == 400


# -- the store: concurrency and deletion --------------------------------------------------

def _stored_batch(batches: BatchStore, url: str, size: int) -> list[str]:
    """A batch of ``size`` PENDING jobs naming ``url``; its jobs' ids."""
    at = now()
    batch = Batch(new_job_id(), "sleep", "", at, size, callback_url=url)
    jobs = [Job(id=new_job_id(), service="sleep", owner="", phase=Phase.PENDING,
                creation_time=at, execution_duration=0, destruction=None) for _ in range(size)]
    batches.insert_batch(batch, jobs)
    return [batch.id] + [job.id for job in jobs]


def _end(start: threading.Barrier, store: Store, job: str) -> None:
    start.wait()
    assert store.mark_aborted(job)


def test_concurrent_ends_of_the_last_jobs_add_exactly_one_delivery(tmp_path, db_url):
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    stores = [Store(cfg.db_url), Store(cfg.db_url)]
    try:
        made = [_stored_batch(BatchStore(stores[0]), "http://127.0.0.1/hook", 2)
                for _ in range(20)]
        for _, *jobs in made:
            start = threading.Barrier(2)
            threads = [threading.Thread(target=_end, args=(start, s, j))
                       for s, j in zip(stores, jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert [deliveries(stores[0], batch_id) for batch_id, *_ in made] == [1] * len(made)
    finally:
        for s in stores:
            s.close()


def test_deleting_a_batch_drops_its_deliveries(tmp_path, db_url):
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    store = Store(cfg.db_url)
    try:
        batches = BatchStore(store)
        batch_id, *_ = _stored_batch(batches, "http://127.0.0.1/hook", 3)
        batches.mark_aborted(batch_id)
        assert batches.batch_callback(batch_id).state == "pending"
        batches.delete_batch(batch_id)
        assert deliveries(store, batch_id) == 0
        assert store.claim_callback("me", 60) is None
    finally:
        store.close()


def test_job_deleted_last_ends_the_batch(tmp_path, db_url):
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    store = Store(cfg.db_url)
    try:
        batch_id, first, second = _stored_batch(BatchStore(store), "http://127.0.0.1/hook", 2)
        store.mark_aborted(first)
        assert deliveries(store, batch_id) == 0
        store.delete_job(second)
        assert deliveries(store, batch_id) == 1
    finally:
        store.close()
