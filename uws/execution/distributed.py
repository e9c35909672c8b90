"""Jobs run by Celery workers on any number of machines (``[executor] kind = "celery"``).

Front ends run no jobs: on RUN they publish a message on the broker (RabbitMQ or
Redis).  The message names no job; it asks a worker to take QUEUED jobs.  A
worker takes them the way the local executor does: with the database's
conditional claim (:meth:`uws.store.Store.claim`: fair across owners,
within running caps), and runs each with the same runner contract and isolation
(:class:`~uws.execution.process.ProcessExecutor`).  Hence:

- a message delivered twice, or one too many, runs nothing twice: the second
  claim finds no job;
- a message only wakes a worker: its task returns at once, and the worker's own
  ``slots`` threads claim and run the jobs (each looks again every
  ``timing.QUEUE_POLL`` seconds when idle).  No message waits unacknowledged
  while jobs run: RabbitMQ's ``consumer_timeout`` (30 minutes) closes the channel
  of a message held that long and stops the worker, which a task running a job,
  or a message prefetched behind it, did.  A worker that dies leaves its jobs'
  leases to expire (on the same host, the sweep sees its process gone within
  ``timing.LOST_LEASE_SWEEP``), so they end in ERROR or are queued again
  (``retry = true``), and queued jobs are published for again (below);
- a broker that is down loses nothing: the job stays QUEUED, the front end says
  so in its log, and every ``timing.REDISPATCH`` seconds it publishes again for
  the jobs queued longer than that while the broker's queue holds no message,
  until the broker takes them (a publish fails at once when the broker is down,
  so RUN does not wait for it);
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
import signal
import threading
import time

from ..domain import timeutil, timing
from ..usecases.ports import RunStore, Settings
from .strays import kill_strays

log = logging.getLogger(__name__)
TASK = "uws.run_queued"


def celery_app(cfg, publisher: bool = False):
    """The Celery application of front ends (``publisher``) and workers."""
    from celery import Celery
    app = Celery("uws", broker=cfg.broker_url, set_as_current=False)
    if publisher:   # one try to connect, not kombu's retries: RUN took 6 s with it down
        app.conf.broker_transport_options = {"max_retries": 1, "interval_start": 0,
                                             "interval_step": 0, "interval_max": 0}
    app.conf.update(
        task_acks_late=False,               # see the module's docstring
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
        self.app = celery_app(config, publisher=True)
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
            self._reached(False, exc)
            return False
        self._reached(True)
        return True

    def _reached(self, reached: bool, problem: Exception | None = None) -> None:
        """Note whether the broker answered; log when that changes."""
        if not reached and not self._broker_down:
            log.warning("the broker cannot be reached (%s): queued jobs stay QUEUED "
                        "and are dispatched when it is back", problem)
        elif reached and self._broker_down:
            log.warning("the broker is back: dispatching the queued jobs")
        self._broker_down = not reached

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
                    if not self._messages_waiting() and waiting:
                        self.publish(min(waiting, MAX_REDISPATCH))
            except Exception:
                log.exception("re-dispatching queued jobs failed")
                self._stopping.wait(timing.REDISPATCH)

    def _messages_waiting(self) -> bool:
        """Whether the broker's queue holds messages no worker has taken yet.  Jobs
        queued behind busy workers are not lost: each thread takes the next job
        when it ends one, and a message waiting will wake the first thread idle.
        Publishing for them at every sweep grew the queue by hundreds of messages
        a minute while no worker took them.  False when unknown; asking also tells
        whether the broker is back after it was down, with no job to publish for."""
        try:
            with self.app.connection_for_write() as conn:
                declared = conn.default_channel.queue_declare(queue=self.config.queue,
                                                              passive=True)
        except Exception as exc:    # noqa: BLE001 - kombu's errors vary by transport
            not_declared = str(getattr(exc, "reply_code", "")) == "404"     # Redis: empty
            self._reached(not_declared, exc)
            return False
        self._reached(True)
        return declared.message_count > 0

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


#: messages one re-dispatch publishes at most: each wakes a worker thread, which takes
#: jobs until none is left, so a few wake as many workers as there are
MAX_REDISPATCH = 64


def run_worker(cfg, argv: list[str] | None = None) -> None:
    """A Celery worker running ``cfg.slots`` jobs at once (``uws worker``)."""
    from ..store import Store
    from .files import JobFiles
    from .process import ProcessExecutor
    store = Store(cfg.db_url, pool_size=max(4, cfg.slots + 2))
    files = JobFiles(cfg.data_dir, cfg.max_upload_bytes)
    executor = ProcessExecutor(config=cfg, store=store, files=files, slots=cfg.slots)
    executor.start()
    app = celery_app(cfg)

    @app.task(name=TASK)
    def run_queued() -> None:
        executor.submit("")     # a wake-up: the executor's threads claim the jobs

    # A warm shutdown (SIGTERM) takes no more jobs; the running ones end first (below).
    from celery.signals import worker_shutting_down
    worker_shutting_down.connect(lambda **_: executor.drain(), weak=False)

    log.info("worker %s: %d slots, queue %r on %s", executor.worker_id, cfg.slots,
             cfg.queue, _safe(cfg.broker_url))
    try:
        # A node name of its own: Celery's default (celery@host) is the same for every
        # worker of a machine, and a second one dies on the first one's control queue.
        app.worker_main(["worker", "--pool", "threads", "--concurrency", "1",
                         "--queues", cfg.queue, "--loglevel", "INFO", "--without-gossip",
                         "--without-mingle", "--hostname", f"uws-{os.getpid()}@%h",
                         *(argv or [])])
    finally:
        try:
            _let_running_jobs_end(executor)
        finally:
            executor.stop()     # kills what still runs: a second SIGTERM, or an error
            store.close()


def _let_running_jobs_end(executor) -> None:
    """Claim nothing more and wait for the running jobs; another SIGTERM (or Ctrl-C)
    stops waiting."""
    def interrupt(*_):
        raise KeyboardInterrupt
    executor.drain()
    main = threading.current_thread() is threading.main_thread()    # signals: there only
    previous = signal.signal(signal.SIGTERM, interrupt) if main else None
    try:
        while executor.running_ids:
            time.sleep(0.2)
    except KeyboardInterrupt:
        log.warning("stopping now: the running jobs are killed")
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _safe(url: str) -> str:
    """The broker URL without its password, for the log."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
