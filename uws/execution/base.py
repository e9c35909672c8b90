"""The executor interface."""
from __future__ import annotations

from .strays import kill_strays


class Executor:
    """Runs QUEUED jobs.  Phase changes always go through the store's
    conditional transitions, so an executor never overrides a client's ABORT."""

    def start(self) -> None:
        """Begin taking QUEUED jobs."""

    def submit(self, job_id: str) -> None:
        """A job has just become QUEUED."""

    def abort(self, job_id: str) -> None:
        """The job was aborted or deleted: stop its work if it runs here."""

    def stop(self) -> None:
        """Stop taking jobs and end running work."""

    def end_lost(self, job_id: str) -> None:
        """End what a job whose worker was lost left running on this machine."""
        kill_strays(job_id)

    def problem(self) -> str | None:
        """Why this executor cannot run jobs now, or None."""
        return None


class NullExecutor(Executor):
    """For front ends that leave execution to other processes (workers)."""
