"""The first things anyone does: create a job, start the server."""
from __future__ import annotations

#: one database is enough here (first steps; the protocol tests cover both databases;
#: tests/README.rst)
BACKENDS = ("sqlite",)


def test_create_answers_303_to_absolute_job_url(client):
    r = client.post("/sleep", data={"DURATION": "0"})
    assert r.status_code == 303
    assert r.headers["Location"].startswith("http://localhost/sleep/")
