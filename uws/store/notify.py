"""Phase changes pushed between processes sharing a PostgreSQL database.

Every phase change (and deletion) sends ``NOTIFY uws_job, '<job id>'`` in the
transaction that makes it (:func:`announce`), so PostgreSQL delivers it at
commit and never for a rollback.  :class:`ChangeListener` holds one connection
per process that LISTENs on the channel and passes each job id to a
:class:`uws.usecases.ports.ChangeSink`; while idle it sends nothing (TCP keepalives
notice a dead peer).  While it is disconnected the sink polls instead.
"""
from __future__ import annotations

import logging
import os
import select
import threading
import time
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ..usecases.ports import ChangeSink
from .direct import DirectWrite

if TYPE_CHECKING:       # psycopg is an optional dependency (the postgres extra)
    import psycopg

log = logging.getLogger(__name__)
CHANNEL = "uws_job"
_NOTIFY = sa.select(sa.func.pg_notify(CHANNEL, sa.bindparam("id")))
RETRY_FIRST = 0.05          # seconds before the first reconnection attempt, doubled up to
RETRY_MAX = 2.0
ERROR_LOG_INTERVAL = 60.0   # seconds between two logged losses of the connection
# Without traffic a silently dropped connection is only noticed by TCP keepalives.
_CONNECT = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
            "keepalives_count": 3, "connect_timeout": 5}


def announce(conn: sa.Connection, job_id: str) -> None:
    """Inside a changing transaction: tell listeners, at its commit, that the job changed."""
    _NOTIFY_RUN.run(conn, {"id": job_id})


_NOTIFY_RUN = DirectWrite(_NOTIFY, returns=False)      # run for its effect: no answer read


class ChangeListener:
    """A thread LISTENing on :data:`CHANNEL` for one process."""

    def __init__(self, engine: sa.Engine, sink: ChangeSink):
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        self._connect_args = (args, {**_CONNECT, **kwargs})
        self._sink = sink
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()     # ends select() at stop()
        self._last_error_log = -ERROR_LOG_INTERVAL
        self.backend_pid: int | None = None        # of the listening connection, when up
        self._thread = threading.Thread(target=self._run, name="uws-notify-listener",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=10)
        os.close(self._wake_r)
        os.close(self._wake_w)

    @property
    def listening(self) -> bool:
        return self.backend_pid is not None

    def _run(self) -> None:
        delay = RETRY_FIRST
        while not self._stop.is_set():
            try:
                with self._connect() as conn:
                    delay = RETRY_FIRST
                    self._listen(conn)
            except Exception:       # any failure: reconnect, polling meanwhile
                self._log_loss()
            finally:
                self.backend_pid = None
                self._sink.set_pushed(False)    # the sink polls until LISTEN is back
            self._stop.wait(delay)
            delay = min(delay * 2, RETRY_MAX)

    def _connect(self) -> psycopg.Connection:
        import psycopg
        args, kwargs = self._connect_args
        conn = psycopg.connect(*args, autocommit=True, **kwargs)
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _listen(self, conn: psycopg.Connection) -> None:
        self.backend_pid = conn.info.backend_pid
        self._sink.set_pushed(True)     # also re-reads what waits: news may have been missed
        poller = select.poll()      # not select(): descriptors may exceed FD_SETSIZE
        poller.register(conn.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stop.is_set():
            ready = {fd for fd, _ in poller.poll()}
            if conn.fileno() in ready:
                for note in conn.notifies(timeout=0):
                    self._sink.notify(note.payload)
                if conn.closed:
                    raise ConnectionError("the listening connection closed")

    def _log_loss(self) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_INTERVAL:   # not a line per attempt
            self._last_error_log = now
            log.warning("lost the LISTEN connection for job changes; polling until it is "
                        "back", exc_info=True)
