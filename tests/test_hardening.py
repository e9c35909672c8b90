"""Cross-site posts and per-owner quotas."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading

import pytest

from conftest import make_config


def test_a_cross_site_form_post_is_refused(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    assert b"jobref" not in client.get("/sleep").data


def test_a_cross_site_delete_by_referer_is_refused(client):
    job = client.post("/sleep", data={"DURATION": "0"}).headers["Location"]
    path = job.replace("http://localhost", "")
    r = client.post(path, data={"ACTION": "DELETE"},
                    headers={"Referer": "https://evil.example/page"})
    assert r.status_code == 403
    assert client.get(path).status_code == 200


def test_a_same_origin_form_post_is_accepted(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"Origin": "http://localhost"})
    assert r.status_code == 303


def test_clients_without_origin_or_referer_are_unaffected(client):
    assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.services["sleep"] = dataclasses.replace(cfg.services["sleep"], max_jobs_per_owner=3)
    return cfg


def test_creation_beyond_the_owners_quota_answers_403(client):
    for _ in range(3):
        assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303
    r = client.post("/sleep", data={"DURATION": "0"})
    assert r.status_code == 403 and b"limit" in r.data
    assert client.head("/sleep").headers["X-Job-Count"] == "3"


def test_deleting_a_job_frees_quota(client):
    paths = [client.post("/sleep", data={"DURATION": "0"}).headers["Location"].replace(
        "http://localhost", "") for _ in range(3)]
    client.delete(paths[0])
    assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303


def test_concurrent_creations_never_exceed_the_owners_quota(live_server):
    import requests
    barrier = threading.Barrier(12)

    def create():
        barrier.wait()
        return requests.post(f"{live_server.url}/sleep", data={"DURATION": "0"},
                             allow_redirects=False, timeout=30).status_code

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(lambda _: create(), range(12)))
    assert sorted(codes) == [303] * 3 + [403] * 9
    assert requests.head(f"{live_server.url}/sleep").headers["X-Job-Count"] == "3"
