"""APScheduler runs the sweeps in the serving process (idempotent; several
processes may run them at once)."""
from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler

DEADLINE_SECONDS = 0.25
DESTRUCTION_SECONDS = 0.5
LEASE_SECONDS = 5.0


def start_scheduler(sweeps) -> BackgroundScheduler:
    logging.getLogger("apscheduler").setLevel(logging.WARNING)   # one line per run otherwise
    scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                  "misfire_grace_time": 10})
    scheduler.add_job(sweeps.enforce_deadlines, "interval", seconds=DEADLINE_SECONDS,
                      id="deadlines")
    scheduler.add_job(sweeps.destroy_expired, "interval", seconds=DESTRUCTION_SECONDS,
                      id="destruction")
    scheduler.add_job(sweeps.recover_lost, "interval", seconds=LEASE_SECONDS, id="leases")
    scheduler.start()
    return scheduler
