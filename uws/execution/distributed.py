"""Jobs run by Celery workers on any number of machines (``[executor] kind = "celery"``).

Front ends run no jobs: on RUN they publish a message on the broker (RabbitMQ or
Redis).  The message names no job; it asks a worker to take QUEUED jobs.  A
worker takes them the way the local executor does: with the database's
conditional claim (:meth:`uws.store.Store.claim_next`: fair across owners,
within running caps), and runs each with the same runner contract and isolation
(:class:`~uws.execution.process.ProcessExecutor`).  Hence:

- a message delivered twice, or one too many, runs nothing twice: the second
  claim finds no job;
- messages are acknowledged late: a worker that dies returns its messages to
  the broker, and its jobs' leases expire (or, on the same host, its death is
  seen at once), so they end in ERROR or are queued again (``retry = true``);
- a broker that is down loses nothing: the job stays QUEUED, the front end says
  so in its log, and every ``timing.REDISPATCH`` seconds it publishes again for
  the jobs queued longer than that, until the broker takes the messages;
- a job that may start only later (STARTAFTER, a retry's backoff) gets its
  message at that time from the front end that queued it (the others see it
  within ``timing.REDISPATCH``), and a worker claims no job before its time;
- ABORT, an exceeded duration or destruction, whichever front end received it,
  changes the job's phase in the database; the worker running the job sees that
  within ``timing.MONITOR`` and kills it.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from .. import timeutil, timing
from ..ports import RunStore, Settings
from .strays import kill_strays

log = logging.getLogger(__name__)
TASK = "uws.run_queued"


def celery_app(cfg):
    """The Celery application of front ends and workers alike."""
    from celery import Celery
    app = Celery("uws", broker=cfg.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,                # a worker lost mid-job returns its message
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,       # no worker hoards messages others could take
        task_ignore_result=True,
        task_default_queue=cfg.queue,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        worker_hijack_root_logger=False,
        worker_enable_remote_control=False,     # nothing of ours uses it
    )
    return app


class CeleryExecutor:
    """The front end's executor: publishes, runs nothing."""

    def __init__(self, *, config: Settings, store: RunStore):
        self.config = config
        self.store = store
        self.app = celery_app(config)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._broker_down = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._redispatch_loop, daemon=True,
                                        name="uws-redispatch")
        self._thread.start()

    def submit(self, job_id: str) -> None:
        self.publish(1)
        self._wake.set()    # it may start later (STARTAFTER): time its message

    def abort(self, job_id: str) -> None:
        """Nothing to do here: the worker running the job sees its phase change."""

    def end_lost(self, job_id: str) -> None:
        kill_strays(job_id)     # a worker of this machine may be the one lost

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)

    def problem(self) -> str | None:
        if self._thread is None or not self._thread.is_alive():
            return "the dispatcher to the workers is not running"
        if self._broker_down:
            return "the broker cannot be reached: queued jobs wait until it is back"
        return None

    def publish(self, count: int) -> bool:
        """Ask the workers to take ``count`` jobs; False (logged) if the broker refused."""
        try:
            for _ in range(count):
                self.app.send_task(TASK, queue=self.config.queue, retry=False)
        except Exception as exc:    # kombu's errors vary by transport
            if not self._broker_down:
                log.warning("the broker cannot be reached (%s): queued jobs stay QUEUED "
                            "and are dispatched when it is back", exc)
            self._broker_down = True
            return False
        if self._broker_down:
            log.warning("the broker is back: dispatching the queued jobs")
        self._broker_down = False
        return True

    def _redispatch_loop(self) -> None:
        services = list(self.config.services)
        checked = timeutil.now()    # jobs due up to here have had their message
        next_sweep = time.monotonic() + timing.REDISPATCH
        while not self._stopping.is_set():
            try:
                self._wait_until_due(services, next_sweep)
                now = timeutil.now()
                due = self.store.count_due(services, since=checked, until=now)
                checked = now
                if due:
                    self.publish(min(due, MAX_REDISPATCH))
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + timing.REDISPATCH
                    waiting = self.store.count_queued(services, older_than=timing.REDISPATCH)
                    if waiting:
                        self.publish(min(waiting, MAX_REDISPATCH))
            except Exception:
                log.exception("re-dispatching queued jobs failed")
                self._stopping.wait(timing.REDISPATCH)

    def _wait_until_due(self, services: list[str], next_sweep: float) -> None:
        """Sleep until the next re-dispatch, or until the next QUEUED job's start
        time (STARTAFTER, a retry's backoff) comes, whichever is first; a submit
        here wakes it to read that time again."""
        self._wake.clear()      # before the read: a submit after it wakes the wait
        timeout = next_sweep - time.monotonic()
        start = self.store.next_start(services)
        if start is not None:
            timeout = min(timeout, (start - timeutil.now()).total_seconds())
        self._wake.wait(max(0.0, timeout))


#: messages one re-dispatch publishes at most: each keeps a worker thread taking
#: jobs until none is left, so a few wake as many workers as there are
MAX_REDISPATCH = 64


def run_worker(cfg, argv: list[str] | None = None) -> None:
    """A Celery worker running ``cfg.slots`` jobs at once (``uws worker``)."""
    from ..files import JobFiles
    from ..store import Store
    from .process import ProcessExecutor
    store = Store(cfg.db_url, pool_size=max(4, cfg.slots + 2))
    files = JobFiles(cfg.data_dir, cfg.max_upload_bytes)
    executor = ProcessExecutor(config=cfg, store=store, files=files, slots=cfg.slots)
    executor.start_monitor()
    app = celery_app(cfg)

    @app.task(name=TASK)
    def run_queued() -> None:
        while executor.run_next():
            pass

    # A warm shutdown (SIGTERM) waits for the running tasks: let each end with the
    # job it runs instead of taking queued jobs for as long as any are left.
    from celery.signals import worker_shutting_down
    worker_shutting_down.connect(lambda **_: executor.drain(), weak=False)

    log.info("worker %s: %d slots, queue %r on %s", executor.worker_id, cfg.slots,
             cfg.queue, _safe(cfg.broker_url))
    try:
        # A node name of its own: Celery's default (celery@host) is the same for every
        # worker of a machine, and a second one dies on the first one's control queue.
        app.worker_main(["worker", "--pool", "threads", "--concurrency", str(cfg.slots),
                         "--queues", cfg.queue, "--loglevel", "INFO", "--without-gossip",
                         "--without-mingle", "--hostname", f"uws-{os.getpid()}@%h",
                         *(argv or [])])
    finally:
        executor.stop()
        store.close()


def _safe(url: str) -> str:
    """The broker URL without its password, for the log."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
