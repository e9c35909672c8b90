"""SQLite's write-ahead log: committed pages reach the database file through the
scheduler's checkpoint, outside the requests' commits (a checkpoint inside a commit
fsyncs with the store's write lock held)."""
from __future__ import annotations

import logging
import sqlite3
import time

import pytest

from uws.web.app import create_app, shutdown

from conftest import make_config
from uwshelp import wait_for


def sqlite_app(tmp_path, scheduler: bool):
    url = f"sqlite:///{tmp_path / 'uws.sqlite3'}"
    return create_app(make_config(tmp_path, url, executor="none", scheduler=scheduler))


def jobs_in_the_file(tmp_path) -> int | None:
    """Jobs in the database file itself, as if the WAL were not there (None: not even
    the table yet, or a page being written)."""
    file = sqlite3.connect(f"file:{tmp_path / 'uws.sqlite3'}?mode=ro&immutable=1", uri=True)
    try:
        return file.execute("SELECT count(*) FROM uws_job").fetchone()[0]
    except sqlite3.DatabaseError:   # read while a checkpoint writes the file
        return None
    finally:
        file.close()


@pytest.fixture
def created(tmp_path):
    """create(app, n): n jobs created over HTTP, each its own commit."""
    def create(app, n: int) -> None:
        client = app.test_client()
        for _ in range(n):
            assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303
    return create


def test_commits_leave_the_checkpoint_to_the_sweep(tmp_path, created):
    app = sqlite_app(tmp_path, scheduler=False)
    try:
        app.extensions["uws"].store.checkpoint()    # the schema, into the file
        assert jobs_in_the_file(tmp_path) == 0
        created(app, 300)   # past SQLite's own checkpoint (1000 pages) several times
        assert jobs_in_the_file(tmp_path) == 0
    finally:
        shutdown(app)


def test_the_scheduler_brings_committed_jobs_into_the_database_file(tmp_path, created):
    app = sqlite_app(tmp_path, scheduler=True)
    try:
        created(app, 50)
        assert wait_for(lambda: jobs_in_the_file(tmp_path) == 50, timeout=5)
    finally:
        shutdown(app)


def test_a_checkpoint_is_harmless_on_either_back_end(api):
    api.store.checkpoint()      # PostgreSQL: nothing to do
    assert api.store.problem() is None


def test_a_checkpoint_slower_than_its_interval_logs_no_skipped_runs(tmp_path, caplog,
                                                                    monkeypatch):
    from uws.store import Store
    monkeypatch.setattr(Store, "checkpoint", lambda self: time.sleep(2.5))
    caplog.set_level(logging.WARNING)
    app = sqlite_app(tmp_path, scheduler=True)
    try:
        time.sleep(4)       # runs due at 1, 2, 3 s, while the first one lasts 2.5 s
    finally:
        shutdown(app)
    assert not [r for r in caplog.records if r.name.startswith("apscheduler")]
