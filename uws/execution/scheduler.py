"""APScheduler runs the sweeps in the serving process (idempotent; several
processes may run them at once)."""
from __future__ import annotations

import logging
import threading
import weakref

from apscheduler.schedulers.background import BackgroundScheduler

from ..domain import timing


class _NoOverlapNotices(logging.Filter):
    """Drop APScheduler's warning that a run was skipped because the previous one has
    not ended: one run at a time is what ``max_instances=1`` asks for, and a sweep
    slower than its interval (a checkpoint of a large WAL on a slow disk) would
    otherwise log it at every interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in record.getMessage()


def start_scheduler(sweeps) -> BackgroundScheduler:
    logging.getLogger("apscheduler").setLevel(logging.WARNING)   # one line per run otherwise
    quiet = logging.getLogger("apscheduler.scheduler")
    if not any(isinstance(f, _NoOverlapNotices) for f in quiet.filters):
        quiet.addFilter(_NoOverlapNotices())
    scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                  "misfire_grace_time": 10})
    scheduler.add_job(sweeps.enforce_deadlines, "interval", seconds=timing.DEADLINE_SWEEP,
                      id="deadlines")
    scheduler.add_job(sweeps.destroy_expired, "interval", seconds=timing.DESTRUCTION_SWEEP,
                      id="destruction")
    scheduler.add_job(sweeps.recover_lost, "interval", seconds=timing.LOST_LEASE_SWEEP,
                      id="leases")
    scheduler.add_job(sweeps.recover_dead_local_workers, "interval",
                      seconds=timing.LOST_LEASE_SWEEP, id="local-workers")
    scheduler.add_job(sweeps.release_held, "interval", seconds=timing.HELD_RELEASE_SWEEP,
                      id="held")
    scheduler.add_job(sweeps.prune_events, "interval", seconds=timing.EVENT_PRUNE_SWEEP,
                      id="events")
    scheduler.add_job(sweeps.sample_statistics, "interval", seconds=timing.STATS_SWEEP,
                      id="statistics")
    scheduler.add_job(sweeps.checkpoint, "interval", seconds=timing.CHECKPOINT_SWEEP,
                      id="checkpoint")
    scheduler.start()
    _stop_before_interpreter_exit(scheduler)
    return scheduler


def _stop_before_interpreter_exit(scheduler: BackgroundScheduler) -> None:
    """At exit, concurrent.futures refuses new work, then waits for the threads still
    answering requests (a gunicorn worker reloaded while a WAIT blocks): each run the
    scheduler tried meanwhile logged a traceback.  Stop it first.  (Held weakly: a
    process that builds many apps, the tests, keeps none of them alive.)"""
    register = getattr(threading, "_register_atexit", None)     # runs before that refusal
    if register is None:
        return
    ref = weakref.ref(scheduler)

    def stop() -> None:
        live = ref()
        if live is not None and live.running:
            live.shutdown(wait=False)
    register(stop)
