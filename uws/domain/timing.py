"""Every timing constant of the server, in seconds, with what it bounds.

Kept in one place so that their relations stay visible: a lease outlives
several renewals, and the sweeps run well within the delays UWS clients see.
"""

# -- the sweeps (uws.execution.scheduler) ------------------------------------------------
#: how often EXECUTING jobs past their execution duration are looked for: an
#: exceeded duration ends the job at most this late
DEADLINE_SWEEP = 0.25
#: how often jobs past their destruction time are looked for
DESTRUCTION_SWEEP = 0.5
#: how often events older than event_retention are deleted
EVENT_PRUNE_SWEEP = 60.0
#: how often expired leases (jobs whose worker died) are looked for
LOST_LEASE_SWEEP = 5.0
#: how often quota-held jobs of owners under their running cap are looked for (a
#: raised cap, a slot whose release was lost with its process): they wait this long
HELD_RELEASE_SWEEP = 2.0
#: how often the statistics sample the job counts (a sample per 5-minute bucket)
STATS_SWEEP = 60.0
#: how often SQLite's WAL is copied into the database file, outside the commits
#: (uws.store.engine.checkpoint): the WAL grows by at most this much writing
CHECKPOINT_SWEEP = 1.0

# -- the local executor (uws.execution.process) -------------------------------------
#: how long a worker's claim on a running job lasts without renewal; renewed every
#: third of it, so a worker alive but slow for that long is not taken for dead
LEASE = 30.0
#: how often running jobs are checked for ABORT, deletion or destruction by another
#: process: ABORT ends a job within this (plus the kill grace)
MONITOR = 0.2
#: how often running jobs' files are measured against their size limits
USAGE_CHECK = 1.0
#: how long an idle executor waits before looking for jobs queued by other processes
QUEUE_POLL = 1.0
#: after TERM, how long a job's process group has before KILL (with a cgroup)
KILL_GRACE = 0.3
#: the same without a cgroup: the job's supervisor sweeps its descendants first
SUPERVISOR_GRACE = 5.0
#: least time between two progress writes of one job to the store
PROGRESS_WRITE = 0.2

# -- Celery workers (uws.execution.distributed) -----------------------------------------
#: how often a front end publishes again for jobs QUEUED longer than this (their
#: message was lost, or the broker was down when they were queued)
REDISPATCH = 5.0

# -- blocking GETs (uws.usecases.waiting) ------------------------------------------------
#: how often the phases of waited-for jobs are read, for changes made by other processes
WAIT_POLL = 0.05


# -- test suites only --------------------------------------------------------------------
#: ``UWS_TEST_TIMINGS="LEASE=6 REDISPATCH=1"`` shortens these constants in the ``uws``
#: processes that inherit it (read by uws.cli, which calls :func:`shorten_for_tests`), so
#: that a test suite need not wait out a 30 s lease.  Not a setting for a deployment:
#: the relations above are what keep a server correct.
TEST_TIMINGS_VARIABLE = "UWS_TEST_TIMINGS"


def shorten_for_tests(text: str) -> None:
    """Set the constants ``text`` names (``NAME=seconds``, separated by spaces or
    commas); ValueError, changing none, for a name or a value that is not one."""
    chosen = {}
    for item in text.replace(",", " ").split():
        name, _, value = item.partition("=")
        if not name.isupper() or not isinstance(globals().get(name), float):
            raise ValueError(f"{TEST_TIMINGS_VARIABLE}: {name!r} is no timing constant")
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds < 86400:
            raise ValueError(f"{TEST_TIMINGS_VARIABLE}: {item!r} is not a number of seconds")
        chosen[name] = seconds
    globals().update(chosen)
