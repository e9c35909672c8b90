"""The hottest reads and writes bypass SQLAlchemy's execution (uws.store.direct):
they must read and write exactly what SQLAlchemy would, on both databases."""
import contextlib
import datetime as dt
import os
import tempfile
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from uws.domain.model import ErrorSummary, Job, ListQuery, Parameter, Result
from uws.domain.phases import Phase
from uws.store import Store, connections, direct
from uws.store.tables import job as J

from conftest import database_url, drop_database


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()


def _a_job_with_every_field(store: Store) -> Job:
    created = dt.datetime(2026, 1, 2, 3, 4, 5, 678000)
    job = Job(id="f" * 32, service="svc", owner="alice", phase=Phase.PENDING,
              creation_time=created, execution_duration=60,
              destruction=created + dt.timedelta(days=1), run_id="run <1>",
              quote=created + dt.timedelta(minutes=5),
              parameters=[Parameter("A", "1"), Parameter("B", "http://x/y", True),
                          Parameter("A", "2")])
    store.insert_job(job)
    store.mark_queued(job.id)
    store.mark_executing(job.id)
    store.set_progress(job.id, 42.5, "halfway")
    store.add_result(job.id, Result("out", "out.txt", "text/plain", 12))
    store.mark_failed(job.id, ErrorSummary("fatal", "it broke", "details"))
    return job


def test_a_job_read_directly_equals_the_row_sqlalchemy_reads(store):
    job = _a_job_with_every_field(store)
    read = direct.DirectRead(store.engine, sa.select(J).where(J.c.id == sa.bindparam("id")))
    with store.readers.cursor() as cur:
        (mine,) = read.mappings(cur, {"id": job.id})
    with store.engine.connect() as conn:
        theirs = dict(conn.execute(sa.select(J).where(J.c.id == job.id)).one()._mapping)
    assert mine == theirs
    assert isinstance(mine["creation_time"], dt.datetime) and isinstance(mine["progress"], float)


def test_the_store_reads_back_every_field_of_a_job(store):
    job = _a_job_with_every_field(store)
    got = store.get_job(job.id, "svc", "alice")
    assert got is not None
    assert (got.phase, got.run_id, got.creation_time, got.destruction, got.quote) == (
        Phase.ERROR, "run <1>", job.creation_time, job.destruction, job.quote)
    assert got.parameters == job.parameters
    assert got.results == [Result("out", "out.txt", "text/plain", 12)]
    assert got.error == ErrorSummary("fatal", "it broke", "details")
    assert (got.progress, got.progress_message) == (42.5, "halfway")


def test_a_job_is_read_only_by_its_owner_and_unscoped_callers(store):
    job = _a_job_with_every_field(store)     # parameters, a result and an error stored
    assert store.get_job(job.id, "svc", "mallory") is None
    assert store.get_job("0" * 32, "svc", None) is None
    assert store.get_job(job.id, "svc", "alice").parameters == job.parameters
    assert store.get_job(job.id, "other", None) is None
    assert store.phase_of(job.id, "svc", "mallory") is None
    assert store.phase_of(job.id, "svc", None) is Phase.ERROR


def test_a_job_without_parameters_or_results_reads_back_empty_lists(store):
    created = dt.datetime(2026, 1, 2, 3, 4, 5)
    store.insert_job(Job(id="e" * 32, service="svc", owner="", phase=Phase.PENDING,
                         creation_time=created, execution_duration=0, destruction=None))
    got = store.get_job("e" * 32, "svc", "")
    assert (got.parameters, got.results, got.past_errors) == ([], [], [])


def test_a_transaction_after_direct_reads_still_rolls_back(store):
    """Reads may change how their connection commits (autocommit, on PostgreSQL):
    the pool must get it back as it was, or a later transaction's failure would
    leave half its writes."""
    job = _a_job_with_every_field(store)
    for _ in range(5):
        store.get_job(job.id, "svc", None)
    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        conn.execute(J.update().where(J.c.id == job.id).values(run_id="half done"))
        raise RuntimeError("something later in the transaction failed")
    assert store.get_job(job.id, "svc", None).run_id == "run <1>"


def test_list_pages_read_directly_walk_every_job_once_in_order(store):
    store.seed_jobs("svc", 250, owner="alice")
    seen, q = [], ListQuery(limit=100)
    while True:
        page = store.list_jobs("svc", "alice", q)
        seen += page
        if len(page) < 100:
            break
        q = ListQuery(limit=100, before=(page[-1].creation_time, page[-1].id))
    assert len(seen) == len({ref.id for ref in seen}) == 250
    assert seen == sorted(seen, key=lambda r: (r.creation_time, r.id), reverse=True)
    after = store.list_jobs("svc", "alice", ListQuery(after=seen[10].creation_time))
    assert [r.id for r in after] == [r.id for r in seen[:10]]


def test_parameters_that_expand_are_refused(store):
    stmt = sa.select(J.c.id).where(J.c.phase.in_(sa.bindparam("p", expanding=True)))
    with pytest.raises(ValueError):
        direct.DirectRead(store.engine, stmt)


def test_a_direct_read_sees_what_was_committed_after_the_previous_one(store):
    job = _a_job_with_every_field(store)
    for _ in range(3):      # the connection kept aside (SQLite) serves each read
        assert store.phase_of(job.id, "svc", "alice") is Phase.ERROR
    with store.engine.begin() as conn:      # another connection's commit
        conn.execute(J.update().where(J.c.id == job.id).values(phase="ARCHIVED"))
    assert store.phase_of(job.id, "svc", "alice") is Phase.ARCHIVED


def _overlapping_reads(readers: connections.Readers, n: int) -> None:
    cursors = [readers.cursor() for _ in range(n)]
    for c in cursors:
        c.__enter__()
    for c in cursors:
        c.__exit__(None, None, None)


def test_reads_running_at_once_keep_at_most_a_few_connections_aside(store):
    readers = connections.Readers(store.engine)
    _overlapping_reads(readers, connections.Readers.KEPT + 4)
    assert len(readers._kept) == min(store.engine.pool.size() // 4, connections.Readers.KEPT)
    readers.close()
    assert readers._kept == [] and store.engine.pool.checkedout() == 0


# the child only looks at a list and exits: none of the locks fork() can leave held
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_process_does_not_read_on_the_connections_its_parent_kept(store):
    """A server that forks workers after loading the app (gunicorn --preload): the
    parent's kept connections are its own; a child sharing them would mix their
    answers."""
    job = _a_job_with_every_field(store)
    store.get_job(job.id, "svc", None)
    assert store.readers._kept
    pool = store.engine.pool
    pid = os.fork()
    if pid == 0:
        os._exit(0 if store.readers._kept == [] and store.engine.pool is not pool else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert store.readers._kept        # the parent's are still its own
    assert store.get_job(job.id, "svc", None).run_id == "run <1>"


def test_reads_on_a_kept_connection_do_not_go_through_the_pool(store):
    """On PostgreSQL the pool pings each connection it hands out (a round trip): reads
    one after the other take none from it once one connection is kept."""
    job = _a_job_with_every_field(store)
    checkouts = []
    sa.event.listen(store.engine.pool, "checkout", lambda *args: checkouts.append(1))
    for _ in range(10):
        assert store.get_job(job.id, "svc", None).run_id == "run <1>"
    assert len(checkouts) <= 1


def _backend_pid(readers: connections.Readers) -> int:
    with readers.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


@pytest.fixture
def pg_store(tmp_path):
    url = database_url("postgresql", tmp_path)
    s = Store(url)
    yield s
    s.close()
    drop_database(url)


def test_a_kept_connection_the_server_closed_is_not_used_for_the_next_read(pg_store):
    """A kept connection skips the pool's ping, which is what found connections a
    restart or a terminated backend had closed: the next read must still answer."""
    job = _a_job_with_every_field(pg_store)
    pid = _backend_pid(pg_store.readers)
    assert _backend_pid(pg_store.readers) == pid      # kept, and used again
    _terminate(pg_store, [pid])
    deadline = time.monotonic() + 5
    while pid in _backends(pg_store) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pg_store.get_job(job.id, "svc", None).run_id == "run <1>"
    assert _backend_pid(pg_store.readers) != pid


def test_pool_connections_the_server_closed_are_replaced_before_a_transaction(pg_store):
    """The pool checks a connection it hands out without a round trip (no ping): one a
    restart or a terminated backend closed must not reach a transaction."""
    held = [pg_store.engine.connect() for _ in range(3)]
    pids = [conn.execute(sa.text("SELECT pg_backend_pid()")).scalar() for conn in held]
    for conn in held:
        conn.close()    # idle in the pool
    _terminate(pg_store, pids)
    deadline = time.monotonic() + 5
    while set(pids) & _backends(pg_store) and time.monotonic() < deadline:
        time.sleep(0.01)
    job = _a_job_with_every_field(pg_store)     # transactions, then reads
    assert pg_store.get_job(job.id, "svc", None).run_id == "run <1>"


def _terminate(store: Store, pids: list[int]) -> None:
    """The backends ``pids`` ended by the server, asked on a connection of another pool."""
    admin = sa.create_engine(store.engine.url, poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        ended = conn.execute(sa.text("SELECT pg_terminate_backend(p) FROM unnest(:ps) AS p"),
                             {"ps": pids}).scalars().all()
    admin.dispose()
    assert all(ended)


def _backends(store: Store) -> set[int]:
    """The server's backends, asked on a connection of another pool: one of the store's
    own may be a backend just terminated that has not closed its socket yet."""
    other = sa.create_engine(store.engine.url, poolclass=sa.pool.NullPool)
    try:
        with other.connect() as conn:
            return set(conn.execute(sa.text("SELECT pid FROM pg_stat_activity")).scalars())
    finally:
        other.dispose()


def test_connections_kept_for_reads_go_back_to_the_pool_out_of_autocommit(pg_store):
    """Kept PostgreSQL connections stay in autocommit between reads: given back, they
    must be transactional again, or a failing transaction would keep half its writes."""
    job = _a_job_with_every_field(pg_store)
    _overlapping_reads(pg_store.readers, connections.Readers.KEPT)
    assert pg_store.readers._kept
    pg_store.readers.close()
    _assert_pool_transactional(pg_store, job)


def _assert_pool_transactional(store: Store, job: Job) -> None:
    """No connection of the pool is left in autocommit, and a transaction that fails
    keeps none of its writes to ``job``."""
    size = store.engine.pool.size()
    held = [store.engine.raw_connection() for _ in range(size)]
    try:
        assert not any(conn.dbapi_connection.autocommit for conn in held)
    finally:
        for conn in held:
            conn.close()
    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        conn.execute(J.update().where(J.c.id == job.id).values(run_id="half done"))
        raise RuntimeError("something later in the transaction failed")
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(J.c.run_id).where(J.c.id == job.id)).scalar() == "run <1>"


def test_reads_keep_no_connection_a_small_pool_needs_for_writes(db_url):
    small = Store(db_url, pool_size=1)      # [server] threads = 1
    try:
        _overlapping_reads(small.readers, 5)
        assert small.engine.pool.checkedout() == 0
        small.insert_job(Job(id="a" * 32, service="svc", owner="", phase=Phase.PENDING,
                             creation_time=dt.datetime(2026, 1, 2), execution_duration=60,
                             destruction=None))
    finally:
        small.close()


def test_a_direct_write_fails_with_the_error_sqlalchemy_would_raise(store):
    job = _a_job_with_every_field(store)
    with store.engine.connect() as conn:
        row = dict(conn.execute(sa.select(J).where(J.c.id == job.id)).one()._mapping)
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        direct.DirectWrite(J.insert()).run(conn, row)     # the same id again


def test_a_job_reads_back_its_earlier_attempts_and_its_callback(store):
    job = Job(id="e" * 32, service="svc", owner="alice", phase=Phase.PENDING,
              creation_time=dt.datetime(2026, 1, 2), execution_duration=60, destruction=None,
              callback_url="https://example.org/hook")
    store.insert_job(job)
    store.mark_queued(job.id)
    store.mark_executing(job.id)
    assert store.retry_later(job.id, ErrorSummary("transient", "first try"), None, lambda n: 0)
    got = store.get_job(job.id, "svc", "alice")
    assert got.past_errors == [ErrorSummary("transient", "first try")]
    assert got.callback_url == "https://example.org/hook"
    plain = store.get_job(_a_job_with_every_field(store).id, "svc", "alice")
    assert plain.past_errors == [] and plain.callback_url is None


def test_a_row_written_directly_equals_the_row_sqlalchemy_writes(store):
    job = _a_job_with_every_field(store)
    with store.engine.connect() as conn:
        row = dict(conn.execute(sa.select(J).where(J.c.id == job.id)).one()._mapping)
    copies = {"d" * 32: direct.DirectWrite(J.insert()).run, "c" * 32: None}
    for new_id, run in copies.items():
        with store.engine.begin() as conn:
            if run is None:
                conn.execute(J.insert(), {**row, "id": new_id})
            else:
                run(conn, {**row, "id": new_id})
    with store.engine.connect() as conn:
        mine, theirs = (dict(conn.execute(sa.select(J).where(J.c.id == i)).one()._mapping)
                        for i in copies)
    assert {**mine, "id": ""} == {**theirs, "id": ""} == {**row, "id": ""}


def test_a_creation_that_fails_raises_sqlalchemys_error_and_stores_nothing_more(store):
    """On PostgreSQL a creation's first writes are pipelined, their errors read only at
    its end: they must still come as SQLAlchemy's errors (which the store's callers
    catch) and roll the whole creation back."""
    job = _a_job_with_every_field(store)
    again = Job(id=job.id, service="svc", owner="bob", phase=Phase.PENDING,
                creation_time=dt.datetime(2026, 1, 3), execution_duration=60,
                destruction=None, parameters=[Parameter("C", "3")])
    with pytest.raises(sa.exc.IntegrityError):
        store.insert_job(again)
    got = store.get_job(job.id, "svc", None)
    assert (got.owner, [p.name for p in got.parameters]) == ("alice", ["A", "B", "A"])


def test_sqlalchemy_reads_in_a_pipelined_transaction_see_the_writes_before_them(store):
    """On PostgreSQL a transaction's writes are pipelined (sent without waiting for
    their answers): a statement SQLAlchemy runs there must still get its own rows and
    row count, and see what was written before it."""
    job = _a_job_with_every_field(store)
    update = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id"))
                                .values(run_id=sa.bindparam("run_id")))
    with connections.writing(store.engine) as conn:
        update.run(conn, {"_id": job.id, "run_id": "changed"})
        read = sa.select(J.c.run_id).where(J.c.id == job.id)
        assert conn.execute(read).scalar_one() == "changed"
        moved = conn.execute(J.update().where(J.c.id == job.id).values(run_id="again"))
        assert moved.rowcount == 1
        update.run(conn, {"_id": job.id, "run_id": "last"})
    assert store.get_job(job.id, "svc", None).run_id == "last"


def test_a_connection_lost_in_a_pipelined_transaction_fails_it_as_sqlalchemy_would(pg_store):
    """The database gone in the middle of a pipelined transaction: the error the store's
    callers catch (OperationalError, answered 503), not another one raised while the
    pipeline is taken down; the next transaction runs on a new connection."""
    job = _a_job_with_every_field(pg_store)
    with pytest.raises(sa.exc.OperationalError), connections.writing(pg_store.engine) as conn:
        _terminate(pg_store, [conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()])
        conn.execute(J.update().where(J.c.id == job.id).values(run_id="lost"))
    assert pg_store.mark_queued(job.id) is False     # ERROR already: a transaction that runs
    assert pg_store.get_job(job.id, "svc", None).run_id == "run <1>"


@contextlib.contextmanager
def _round_trips(engine: sa.Engine) -> Iterator[list[int]]:
    """Counts the times the connection checked out of ``engine``'s pool inside waits for
    the PostgreSQL server (libpq's trace): the answers to its simple queries, its Syncs
    and its Flushes.  Given in the list yielded, when the block ends."""
    from psycopg import pq
    traced, counted = [], []

    def trace(dbapi_conn, _record, _proxy):
        dbapi_conn.pgconn.trace(log.fileno())
        dbapi_conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        traced.append(dbapi_conn)

    with tempfile.TemporaryFile("w+") as log:
        sa.event.listen(engine, "checkout", trace)
        try:
            yield counted
        finally:
            sa.event.remove(engine, "checkout", trace)
            for dbapi_conn in traced:
                dbapi_conn.pgconn.untrace()
        assert len(traced) == 1, "one connection at a time"
        log.seek(0)
        sent = [line.split("\t")[2] for line in log.read().splitlines()
                if line.startswith("F\t")]
    # a Flush right after a Sync is the same wait (psycopg ends a pipeline so)
    waits = sum(kind in ("Query", "Sync") or (kind == "Flush" and before != "Sync")
                for before, kind in zip(["", *sent], sent))
    counted.append(waits)


def test_a_pipelined_transaction_sends_its_commit_with_its_writes(pg_store):
    """Writes whose answers nothing reads go out with the BEGIN and the COMMIT: one
    round trip for the transaction, whatever the number of writes."""
    job = _a_job_with_every_field(pg_store)
    update = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id"))
                                .values(run_id=sa.bindparam("run_id")))
    with _round_trips(pg_store.engine) as counted, connections.writing(pg_store.engine) as conn:
        for n in range(3):
            update.run(conn, {"_id": job.id, "run_id": f"write {n}"})
    assert counted == [1]
    assert pg_store.get_job(job.id, "svc", None).run_id == "write 2"


def test_reads_sent_together_in_a_transaction_are_one_round_trip(pg_store):
    """Reads sent together wait once for their answers, each read's own rows, in
    order; with the COMMIT, the transaction is two round trips (three one by one)."""
    job = _a_job_with_every_field(pg_store)
    phase = direct.ReadIn(sa.select(J.c.phase).where(J.c.id == sa.bindparam("_id")))
    run_id = direct.ReadIn(sa.select(J.c.run_id).where(J.c.id == sa.bindparam("_id")))
    key = {"_id": job.id}
    with _round_trips(pg_store.engine) as counted, connections.writing(pg_store.engine) as conn:
        answers = direct.together(conn, [(phase, key), (run_id, key), (phase, key)])
    assert answers == [[("ERROR",)], [("run <1>",)], [("ERROR",)]]
    assert counted == [2]
    with _round_trips(pg_store.engine) as counted, connections.writing(pg_store.engine) as conn:
        assert phase.rows(conn, key) == [("ERROR",)]
        assert run_id.rows(conn, key) == [("run <1>",)]
    assert counted == [3]


def test_writes_and_reads_sent_together_answer_in_order(pg_store):
    """A write's RETURNING and a read after it, sent together: the read sees the write."""
    job = _a_job_with_every_field(pg_store)
    rename = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id"))
                                .values(run_id=sa.bindparam("run_id")).returning(J.c.id))
    run_id = direct.ReadIn(sa.select(J.c.run_id).where(J.c.id == sa.bindparam("_id")))
    with _round_trips(pg_store.engine) as counted, connections.writing(pg_store.engine) as conn:
        renamed, read = direct.together(conn, [(rename, {"_id": job.id, "run_id": "new"}),
                                               (run_id, {"_id": job.id})])
    assert (renamed, read) == ([(job.id,)], [("new",)])
    assert counted == [2]


@pytest.mark.parametrize("failing", [0, 1], ids=["first", "second"])
def test_a_statement_sent_together_that_fails_raises_its_error_and_keeps_nothing(
        pg_store, failing):
    """Its own error (a duplicate key), not the pipeline's abort; nothing the other
    statement did is kept; the connection serves the next transaction."""
    job = _a_job_with_every_field(pg_store)
    with pg_store.engine.connect() as conn:
        row = dict(conn.execute(sa.select(J).where(J.c.id == job.id)).one()._mapping)
    rename = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id"))
                                .values(run_id=sa.bindparam("run_id")).returning(J.c.id))
    statements = [(rename, {"_id": job.id, "run_id": "renamed"})]
    statements.insert(failing, (direct.DirectWrite(J.insert().returning(J.c.id)), row))
    with pytest.raises(sa.exc.IntegrityError), connections.writing(pg_store.engine) as conn:
        direct.together(conn, statements)
    assert pg_store.get_job(job.id, "svc", None).run_id == "run <1>"
    assert pg_store.delete_job(job.id)      # the next transaction runs


def test_a_deletion_is_two_round_trips_on_postgresql(pg_store):
    """The job's bytes locked and the job deleted, sent together; then the commit."""
    job = _a_job_with_every_field(pg_store)
    with _round_trips(pg_store.engine) as counted:
        assert pg_store.delete_job(job.id, "svc", "alice")
    assert counted == [2]
    assert pg_store.get_job(job.id, "svc", None) is None


def test_a_run_is_two_round_trips_on_postgresql(pg_store):
    """PHASE=RUN in the store: the holds and the job read together, then the move
    committed."""
    job = Job(id="e" * 32, service="svc", owner="alice", phase=Phase.PENDING,
              creation_time=dt.datetime(2026, 1, 2), execution_duration=60,
              destruction=dt.datetime(2026, 2, 2))
    pg_store.insert_job(job)
    with _round_trips(pg_store.engine) as counted:
        assert pg_store.run_job(job.id, "svc", "alice") is Phase.QUEUED
    assert counted == [2]
    assert pg_store.phase_of(job.id, "svc", "alice") is Phase.QUEUED


def test_a_failed_block_of_a_pipelined_transaction_raises_its_own_error(pg_store):
    """A block that fails while the answer to one of its writes is still due, an error
    (a duplicate key, here): the block's own error is raised, and nothing is kept."""
    job = _a_job_with_every_field(pg_store)
    with pg_store.engine.connect() as conn:
        row = dict(conn.execute(sa.select(J).where(J.c.id == job.id)).one()._mapping)
    rename = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id"))
                                .values(run_id=sa.bindparam("run_id")))
    with pytest.raises(RuntimeError, match="later"), connections.writing(pg_store.engine) as conn:
        rename.run(conn, {"_id": job.id, "run_id": "renamed"})
        direct.DirectWrite(J.insert()).run(conn, row)     # the same id again
        raise RuntimeError("something later in the transaction failed")
    assert pg_store.get_job(job.id, "svc", None).run_id == "run <1>"
    later = dt.datetime(2030, 1, 1)
    assert pg_store.set_destruction(job.id, later, job.creation_time)     # the next one runs
    assert pg_store.get_job(job.id, "svc", None).destruction == later


def test_a_read_outside_transactions_is_one_round_trip_on_postgresql(pg_store):
    """No BEGIN before it, no ROLLBACK after it, and so no DEALLOCATE ALL after that
    (psycopg's, dropping what it had prepared): one round trip."""
    job = _a_job_with_every_field(pg_store)
    read = sa.select(J.c.run_id).where(J.c.id == job.id)
    with _round_trips(pg_store.engine) as counted, connections.reading(pg_store.engine) as conn:
        assert conn.execute(read).scalar_one() == "run <1>"
    assert counted == [1]


def test_connections_read_on_go_back_to_the_pool_transactional(pg_store):
    """A connection used for reads is in autocommit: given back, it must be
    transactional again, or a failing transaction would keep half its writes."""
    job = _a_job_with_every_field(pg_store)
    for _ in range(pg_store.engine.pool.size()):
        with connections.reading(pg_store.engine) as conn:
            conn.execute(sa.select(J.c.id))
    _assert_pool_transactional(pg_store, job)


def test_a_direct_write_rolls_back_with_its_transaction(store):
    job = _a_job_with_every_field(store)
    with store.engine.connect() as conn:
        row = dict(conn.execute(sa.select(J).where(J.c.id == job.id)).one()._mapping)
    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        direct.DirectWrite(J.insert()).run(conn, {**row, "id": "b" * 32})
        raise RuntimeError("something later in the transaction failed")
    assert store.get_job("b" * 32, "svc", None) is None


def test_a_direct_write_refuses_to_leave_out_a_column_with_a_default(store):
    with store.engine.begin() as conn, pytest.raises(ValueError, match="priority"):
        direct.DirectWrite(J.insert()).run(conn, {"id": "a" * 32, "service": "svc"})


def test_times_written_directly_are_stored_as_sqlalchemy_stores_them(store):
    """Times compare as stored (deadlines, pages): a direct write must not store
    another text for the same instant."""
    job = _a_job_with_every_field(store)        # started and ended by direct UPDATEs
    with store.engine.connect() as conn:
        stored = conn.execute(sa.select(J.c.start_time, J.c.end_time)
                              .where(J.c.id == job.id)).one()
        as_text = conn.execute(sa.text("SELECT CAST(start_time AS TEXT), CAST(end_time AS TEXT)"
                                       " FROM uws_job WHERE id = :id"), {"id": job.id}).one()
        ours = conn.execute(sa.select(sa.cast(sa.literal(stored.start_time, J.c.start_time.type),
                                              sa.Text))).scalar_one()
    assert stored.start_time is not None and stored.end_time >= stored.start_time
    if store.engine.dialect.name == "sqlite":
        assert as_text[0] == ours


def test_a_direct_write_takes_the_values_its_statement_carries_none_included(store):
    """``.values(held_for=None)`` and a literal IN list need no parameter: only the
    parameters made by name without a value must be given."""
    job = _a_job_with_every_field(store)        # ERROR, held_for unset
    with store.engine.begin() as conn:
        conn.execute(J.update().where(J.c.id == job.id).values(held_for="quota"))
    clear = direct.DirectWrite(
        J.update().where(J.c.id == sa.bindparam("_id"),
                         J.c.phase.in_([sa.literal(p.value) for p in (Phase.ERROR, Phase.HELD)]))
        .values(held_for=None).returning(J.c.id))
    with store.engine.begin() as conn:
        assert [list(r) for r in clear.run(conn, {"_id": job.id})] == [[job.id]]
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(J.c.held_for).where(J.c.id == job.id)).scalar() is None


def test_a_read_in_a_transaction_sees_what_it_wrote_before_its_commit(store):
    job = _a_job_with_every_field(store)
    read = direct.ReadIn(sa.select(J.c.run_id).where(J.c.id == sa.bindparam("id")))
    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        conn.execute(J.update().where(J.c.id == job.id).values(run_id="renamed"))
        assert [list(r) for r in read.rows(conn, {"id": job.id})] == [["renamed"]]
        raise RuntimeError("rolled back")
    with store.engine.connect() as conn:
        assert [list(r) for r in read.rows(conn, {"id": job.id})] == [["run <1>"]]


def test_statements_run_directly_in_a_transaction_are_seen_by_sqlalchemy_listeners(store):
    """Logging and tracing hooked on the engine see them as SQLAlchemy's own."""
    job = _a_job_with_every_field(store)
    seen = []

    def listener(conn, cursor, statement, params, context, executemany):
        seen.append((" ".join(statement.split())[:18], executemany))

    read = direct.ReadIn(sa.select(J.c.run_id).where(J.c.id == sa.bindparam("id")))
    write = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id"))
                               .values(run_id=sa.bindparam("run_id")))
    sa.event.listen(store.engine, "before_cursor_execute", listener)
    try:
        with store.engine.begin() as conn:
            write.run(conn, {"_id": job.id, "run_id": "seen"})
            write.run(conn, [{"_id": job.id, "run_id": "a"}, {"_id": job.id, "run_id": "b"}])
            read.rows(conn, {"id": job.id})
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", listener)
    assert seen == [("UPDATE uws_job SET", False), ("UPDATE uws_job SET", True),
                    ("SELECT uws_job.run", False)]
