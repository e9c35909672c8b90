"""The schema under Alembic, on SQLite and PostgreSQL: what start-up and
``uws db upgrade`` make of an empty database, of one made before migrations
(``metadata.create_all``), and of one at a revision this server does not know.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import uws.store.counts
import uws.store.jobs
import uws.store.usage
from uws.domain.model import Job, Parameter, Result
from uws.domain.phases import Phase
from uws.store import Store
from uws.store import schema as schema_mod
from uws.store.engine import make_engine
from uws.store.tables import job as J
from uws.store.tables import job_bytes, job_count, metadata

from conftest import free_port
from uwshelp import UWS_COMMAND

UNKNOWN = "ffffffffffff"
NOW = dt.datetime(2024, 5, 1, 12, 0, 0)


@pytest.fixture
def db_url(empty_db_url):
    """Every test here starts from an empty database: what migrations make of one is
    the point (conftest's own is migrated already)."""
    return empty_db_url


def head() -> str:
    return schema_mod.newest_revision()


def revision_of(url: str) -> str | None:
    engine = make_engine(url, pool_size=1)
    try:
        return schema_mod.read_status(engine).revision
    finally:
        engine.dispose()


def initial_schema() -> sa.MetaData:
    initial = schema_mod._scripts().get_revision(schema_mod.INITIAL)
    assert initial is not None and initial.module is not None
    return initial.module.schema()


@contextlib.contextmanager
def old_store(url: str):
    """A Store as servers before migrations made it: create_all of the initial
    revision's tables at start, no alembic_version, no job counters."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(uws.store.jobs, "create_schema",
                  lambda engine: initial_schema().create_all(engine))
        m.setattr(uws.store.counts, "bump", lambda conn, deltas: None)
        m.setattr(uws.store.usage, "add", lambda *args: None)
        store = Store(url)
        store.change_hooks.clear()      # nor the hooks writing to later revisions' tables
        try:
            yield store
        finally:
            store.close()


def a_job(number: int) -> Job:
    return Job(id=f"{number:032x}", service="sleep", owner="alice", phase=Phase.PENDING,
               creation_time=NOW + dt.timedelta(seconds=number), execution_duration=60,
               destruction=NOW + dt.timedelta(days=1), run_id=f"run {number}",
               parameters=[Parameter("t", str(number)),
                           Parameter("in", "http://example.org/x", by_reference=True)])


def differences(url: str) -> list:
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(context, metadata)
    finally:
        engine.dispose()


def uws_db(tmp_path, url: str, *args: str) -> subprocess.CompletedProcess:
    config = tmp_path / "uws.toml"
    config.write_text(f'[server]\ndatabase_url = "{url}"\ndata_dir = "{tmp_path / "data"}"\n')
    clean = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
    return subprocess.run([UWS_COMMAND, *args, "--config", str(config)], capture_output=True,
                          text=True, timeout=120, env=clean)


# -- start-up (Store, as create_app builds it) ----------------------------------------


def test_an_empty_database_is_created_at_the_newest_revision(db_url):
    Store(db_url).close()
    assert revision_of(db_url) == head()


def test_the_migrations_make_exactly_the_tables_module(db_url):
    Store(db_url).close()
    assert differences(db_url) == []


def test_a_database_made_before_migrations_is_adopted_and_loses_nothing(db_url):
    with old_store(db_url) as old:
        for number in range(1, 4):
            job = a_job(number)
            if number == 1:     # a job with a result has run
                job = dataclasses.replace(job, phase=Phase.COMPLETED)
            old.insert_job(job, stored_bytes=100 * number)
        assert old.add_result("1".zfill(32), Result("out", "out.txt", "text/plain", 12))
        with old.engine.begin() as conn:    # today's phase changes read later columns
            old_job = initial_schema().tables["uws_job"]
            conn.execute(old_job.update().where(old_job.c.id == "2".zfill(32))
                         .values(phase=Phase.QUEUED.value))
    assert revision_of(db_url) is None

    store = Store(db_url)
    try:
        assert revision_of(db_url) == head()
        first = store.get_job("1".zfill(32), "sleep", "alice")
        assert first is not None and first.run_id == "run 1"
        assert first.parameters == a_job(1).parameters
        assert first.results == [Result("out", "out.txt", "text/plain", 12)]
        assert store.phase_of("2".zfill(32), "sleep", "alice") is Phase.QUEUED
        assert store.stored_bytes("sleep", "alice") == 600
    finally:
        store.close()
    assert differences(db_url) == []


def test_a_database_older_than_uws_job_bytes_gains_it(db_url):
    """Servers before the byte quotas made three tables; the initial revision has four."""
    engine = make_engine(db_url, pool_size=1)
    initial = initial_schema()
    old_job = initial.tables["uws_job"]
    initial.create_all(engine, tables=[old_job, initial.tables["uws_parameter"],
                                       initial.tables["uws_result"]])
    with engine.begin() as conn:
        conn.execute(old_job.insert().values(id="a" * 32, service="sleep", owner="", phase="PENDING",
                                       creation_time=NOW, execution_duration=0, priority=0))
    engine.dispose()
    store = Store(db_url)
    try:
        assert store.get_job("a" * 32, "sleep", None) is not None
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(job_bytes.c.job_id, job_bytes.c.bytes)).all() == [
                ("a" * 32, 0)]      # revision 0012: every job has its row
    finally:
        store.close()
    assert revision_of(db_url) == head()
    assert differences(db_url) == []


def various_jobs() -> list[Job]:
    """Jobs of two services and three owners in several phases."""
    owners, services = ("alice", "bob", ""), ("sleep", "echo")
    kept = [Phase.PENDING, Phase.QUEUED, Phase.EXECUTING, Phase.COMPLETED, Phase.ARCHIVED]
    return [dataclasses.replace(a_job(number), owner=owners[number % 3],
                                service=services[number % 2], phase=kept[number % 5])
            for number in range(1, 61)]


def counters_and_rows(url: str) -> tuple[dict, dict]:
    """The counters summed by (service, owner, phase), and COUNT(*) grouped the same way."""
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            keys = (job_count.c.service, job_count.c.owner, job_count.c.phase)
            counters = {tuple(k): n for *k, n in conn.execute(
                sa.select(*keys, sa.func.sum(job_count.c.n)).group_by(*keys)) if n}
            rows = {tuple(k): n for *k, n in conn.execute(
                sa.select(J.c.service, J.c.owner, J.c.phase, sa.func.count())
                .group_by(J.c.service, J.c.owner, J.c.phase))}
        return counters, rows
    finally:
        engine.dispose()


def test_jobs_stored_before_the_counters_are_counted_by_the_upgrade(db_url):
    with old_store(db_url) as old:
        for job in various_jobs():
            old.insert_job(job)
    Store(db_url).close()
    counters, rows = counters_and_rows(db_url)
    assert len(rows) == 30
    assert counters == rows


def test_a_downgrade_below_the_counters_drops_them_and_an_upgrade_counts_again(db_url):
    store = Store(db_url)
    for job in various_jobs():
        store.insert_job(job)
    with store.engine.begin() as conn:
        command.downgrade(schema_mod.alembic_config(conn), "0001")
        assert not sa.inspect(conn).has_table("uws_job_count")
        conn.execute(J.delete().where(J.c.owner == "bob"))      # changed while uncounted
    store.close()
    assert revision_of(db_url) == "0001"
    Store(db_url).close()
    counters, rows = counters_and_rows(db_url)
    assert len(rows) == 20
    assert counters == rows


def test_bytes_kept_before_the_owner_totals_are_added_up_by_the_upgrade(db_url):
    store = Store(db_url)
    for number, job in enumerate(various_jobs()):
        store.insert_job(job, stored_bytes=1000 + number)
    with store.engine.begin() as conn:
        command.downgrade(schema_mod.alembic_config(conn), "0002")
        assert not sa.inspect(conn).has_table("uws_owner_bytes")
        conn.execute(job_bytes.update().values(bytes=job_bytes.c.bytes * 2))  # while unsummed
    store.close()
    store = Store(db_url)
    try:
        with store.engine.connect() as conn:
            sums = dict(conn.execute(
                sa.select(J.c.owner, sa.func.sum(job_bytes.c.bytes))
                .select_from(J.join(job_bytes, job_bytes.c.job_id == J.c.id))
                .where(J.c.service == "sleep", J.c.phase != Phase.ARCHIVED.value)
                .group_by(J.c.owner)).all())
        assert sums and all(store.stored_bytes("sleep", owner) == int(n)
                            for owner, n in sums.items())
    finally:
        store.close()


def jobs_without_bytes_rows(url: str, count: int) -> Store:
    """A store at the revision before every job had its bytes row (0011), holding
    ``count`` jobs without one, as servers before uws_job_bytes left them."""
    store = Store(url)
    for number in range(1, count + 1):
        store.insert_job(a_job(number))
    with store.engine.begin() as conn:
        command.downgrade(schema_mod.alembic_config(conn), "0011")
        conn.execute(job_bytes.delete())
    store.close()
    return Store(url)


def test_every_job_without_a_bytes_row_gains_one_of_zero_at_the_upgrade(db_url):
    store = jobs_without_bytes_rows(db_url, 3)
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(job_bytes.c.job_id, job_bytes.c.bytes)
                                .order_by(job_bytes.c.job_id)).all()
        assert rows == [(a_job(number).id, 0) for number in (1, 2, 3)]
        assert store.stored_bytes("sleep", "alice") == 0
    finally:
        store.close()


def test_a_deletion_racing_the_first_record_of_an_upgraded_jobs_bytes_leaves_no_bytes(
        db_url):
    """Before 0012 such a job had no bytes row to lock: a deletion read no bytes while
    a change of its bytes inserted the row, then its cascade removed that row and the
    owner's total kept the bytes of a job gone."""
    store = jobs_without_bytes_rows(db_url, 1)
    job_id = a_job(1).id
    try:
        with store.engine.connect() as conn:
            with conn.begin():      # what set_stored_bytes does, held before its commit
                before = uws.store.usage.lock(conn, job_id)
                uws.store.usage.put(conn, job_id, before, 500, service="sleep",
                                    owner="alice", counted=True)
                deleting = threading.Thread(target=store.delete_job, args=(job_id,))
                deleting.start()
                deleting.join(0.5)      # on PostgreSQL it waits for this transaction
        deleting.join(10)
        assert not deleting.is_alive()
        assert store.get_job(job_id, "sleep", None) is None
        assert store.stored_bytes("sleep", "alice") == 0
    finally:
        store.close()


_NEXT = """
import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{previous}"
branch_labels = None
depends_on = None


def upgrade():
    op.add_column("uws_job", sa.Column("note", sa.Text))


def downgrade():
    op.drop_column("uws_job", "note")
"""


@pytest.fixture
def later_version(tmp_path, monkeypatch):
    """Call it to become a later uws: the shipped migrations plus one revision more."""
    later = tmp_path / "migrations"
    caches = (schema_mod._scripts, schema_mod.newest_revision)

    def become() -> str:
        shutil.copytree(schema_mod.MIGRATIONS, later,
                        ignore=shutil.ignore_patterns("__pycache__"))
        previous = head()
        revision = f"{int(previous) + 1:04d}"
        (later / "versions" / f"v{revision}_note.py").write_text(
            _NEXT.format(revision=revision, previous=previous))
        monkeypatch.setattr(schema_mod, "MIGRATIONS", later)
        for cached in caches:
            cached.cache_clear()
        return revision

    yield become
    monkeypatch.undo()
    for cached in caches:
        cached.cache_clear()


def test_a_database_at_an_older_revision_is_upgraded_at_start(db_url, later_version):
    store = Store(db_url)
    store.insert_job(a_job(1))
    store.close()
    assert revision_of(db_url) == head()

    newer = later_version()
    store = Store(db_url)
    try:
        assert revision_of(db_url) == newer
        assert "note" in {c["name"] for c in sa.inspect(store.engine).get_columns("uws_job")}
        assert store.get_job(a_job(1).id, "sleep", "alice").parameters == a_job(1).parameters
    finally:
        store.close()


def test_an_unknown_revision_is_refused_and_left_alone(db_url):
    Store(db_url).close()
    stamp(db_url, UNKNOWN)
    with pytest.raises(schema_mod.SchemaError, match=UNKNOWN):
        Store(db_url)
    assert revision_of(db_url) == UNKNOWN


def stamp(url: str, revision: str) -> None:
    engine = make_engine(url, pool_size=1)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()


_START = """
import sys, time
from uws.store import Store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
Store(sys.argv[1]).close()
"""


def test_servers_started_at_once_on_an_empty_database_all_succeed(db_url):
    """Each process sees no table; the lock lets one migrate and the others find it done."""
    at = time.time() + 3    # past every interpreter's start-up, so they race in earnest
    processes = [subprocess.Popen([sys.executable, "-c", _START, db_url, str(at)],
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    assert revision_of(db_url) == head()
    engine = make_engine(db_url, pool_size=1)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM alembic_version")).scalar() == 1
    engine.dispose()
    assert differences(db_url) == []


# -- the installed uws command ----------------------------------------------------------


def test_uws_db_current_and_upgrade_of_an_empty_database(tmp_path, db_url):
    done = uws_db(tmp_path, db_url, "db", "current")
    assert done.returncode == 0, done.stderr
    assert "no revision (empty" in done.stdout

    done = uws_db(tmp_path, db_url, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert f"upgraded from no revision to {head()}" in done.stdout
    assert revision_of(db_url) == head()


# Each of these tests runs a few uws commands (an interpreter each): one test with all
# of them took 20 s on a loaded run, a third of the 60 s limit.
def test_uws_db_current_and_upgrade_of_a_database_at_the_newest_revision(tmp_path, db_url):
    Store(db_url).close()       # migrated to the newest revision, as a server leaves it
    done = uws_db(tmp_path, db_url, "db", "upgrade")
    assert done.returncode == 0 and "nothing to do" in done.stdout

    done = uws_db(tmp_path, db_url, "db", "current")
    assert done.returncode == 0
    (line,) = done.stdout.strip().splitlines()
    assert line.endswith(f"revision {head()}, the newest"), line


def test_uws_db_recount_repairs_counters_that_missed_changes(tmp_path, db_url):
    store = Store(db_url)
    for job in various_jobs():
        store.insert_job(job)
    with store.engine.begin() as conn:      # as a server of revision 0001 would
        conn.execute(J.delete().where(J.c.owner == "bob"))
    store.close()
    done = uws_db(tmp_path, db_url, "db", "recount")
    assert done.returncode == 0, done.stderr
    assert "rebuilt" in done.stdout
    counters, rows = counters_and_rows(db_url)
    assert len(rows) == 20 and counters == rows


def test_uws_db_on_a_database_made_before_migrations(tmp_path, db_url):
    with old_store(db_url):
        pass
    done = uws_db(tmp_path, db_url, "db", "current")
    assert done.returncode == 0 and "no revision (made before migrations" in done.stdout
    done = uws_db(tmp_path, db_url, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert revision_of(db_url) == head()


def test_an_unknown_revision_stops_uws_serve_with_one_line_and_status_2(tmp_path, db_url):
    Store(db_url).close()
    stamp(db_url, UNKNOWN)
    done = uws_db(tmp_path, db_url, "serve", "--port", str(free_port()))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("uws: cannot start:") and UNKNOWN in line, line
    assert revision_of(db_url) == UNKNOWN


def test_uws_db_tells_of_an_unknown_revision_and_changes_nothing(tmp_path, db_url):
    Store(db_url).close()
    stamp(db_url, UNKNOWN)
    done = uws_db(tmp_path, db_url, "db", "upgrade")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert UNKNOWN in line and "does not know" in line, line
    done = uws_db(tmp_path, db_url, "db", "current")
    assert done.returncode == 0 and f"revision {UNKNOWN}, unknown to this uws" in done.stdout
    done = uws_db(tmp_path, db_url, "db", "recount")
    assert done.returncode == 2 and "newer uws" in done.stderr and "upgrade" not in done.stderr
    assert revision_of(db_url) == UNKNOWN


def test_an_unknown_revision_stops_uws_worker_with_one_line_and_status_2(tmp_path, db_url):
    Store(db_url).close()
    stamp(db_url, UNKNOWN)
    config = tmp_path / "worker.toml"
    config.write_text(f'[server]\ndatabase_url = "{db_url}"\ndata_dir = "{tmp_path / "data"}"\n'
                      '[executor]\nkind = "celery"\nbroker_url = "redis://127.0.0.1:6379/15"\n')
    clean = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
    done = subprocess.run([UWS_COMMAND, "worker", "--config", str(config)], capture_output=True,
                          text=True, timeout=120, env=clean)
    assert done.returncode == 2
    (line,) = [x for x in done.stderr.strip().splitlines() if not x[:4].isdigit()]  # no log
    assert line.startswith("uws: cannot start:") and UNKNOWN in line, line
    assert revision_of(db_url) == UNKNOWN


def test_a_database_that_cannot_be_reached_is_one_line_and_status_2(tmp_path):
    done = uws_db(tmp_path, "postgresql+psycopg://nobody@127.0.0.1:1/x", "db", "current")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("uws: current:") and "127.0.0.1" in line, line
