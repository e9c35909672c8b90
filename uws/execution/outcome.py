"""How a job whose process has ended is recorded: COMPLETED, ERROR, QUEUED again for
another attempt, or given back to the queue when the server or the fork server went
away under it.  Also the limits on what a job may write (:func:`excess`), which the
executor's monitor applies while jobs run as well."""
from __future__ import annotations

import os
import threading

from ..domain.model import ErrorSummary
from ..usecases import lost
from ..usecases.ports import Files, RunStore
from .forkclient import ForkedJob
from .jobprocess import Running


def excess(service, usage) -> str | None:
    """Why a job's files (their ``usage``) are over its service's limits; None when
    they are not."""
    if usage.written > service.max_result_bytes:
        return (f"the job wrote more than {service.max_result_bytes} bytes of files "
                "(max_result_bytes)")
    if usage.entries > service.max_result_files:
        return (f"the job made more than {service.max_result_files} files and folders "
                "(max_result_files)")
    if usage.logs > service.max_log_bytes:
        return (f"the job wrote more than {service.max_log_bytes} bytes to its standard "
                "output and error (max_log_bytes)")
    return None


class Outcomes:
    def __init__(self, store: RunStore, files: Files):
        self.store = store
        self.files = files

    def record(self, running: Running, reader, service, stopping: threading.Event) -> bool:
        """Record how the job ended (``stopping``: set once the server stops).  True
        when it recorded it COMPLETED: the job was there at that commit and nothing
        writes into its directory any more, so a delete since has removed the
        directory for good (no read to check for one)."""
        job_id, code = running.job_id, running.process.returncode
        lost_it = isinstance(running.process, ForkedJob) and running.process.lost
        usage, recorded = None, False
        try:
            if code != 0 or lost_it:
                # Results reported are recorded before any other outcome, which may
                # drop them (another attempt) as it would have if recorded at once.
                reader.flush_results()
            if code != 0 and running.killed:
                # read after killed: stop() sets it before it kills
                if stopping.is_set():   # the server is stopping, not the job
                    lost.release(self.store, service, job_id,
                                 "the server stopped while the job was running",
                                 claim=running.claim)
                return False    # aborted, out of time, destroyed or oversize: phase already set
            if lost_it:
                lost.release(self.store, service, job_id,
                             "the fork server that started the job died while it ran",
                             claim=running.claim)
                return False
            usage = self.files.usage(job_id)     # final: the job has ended
            failure = _failure(code or 0, reader)   # a command's outputs become results
            over = excess(service, usage) or reader.too_many
            message = over or failure
            if message is None:     # its bytes and results with its phase: one commit
                recorded = self.store.mark_completed(job_id, stored_bytes=usage.total,
                                                     results=reader.held_results(),
                                                     claim=running.claim)
                if recorded:
                    reader.results_recorded()
                else:       # aborted or deleted meanwhile: recorded as reported
                    reader.flush_results()
                return recorded
            reader.flush_results()
            detail = _tail(self.files.job_dir(job_id) / "stderr.log") or None
            transient = not over and (reader.transient or code in service.retry_exit_codes)
            if self._fail(running, service, ErrorSummary(
                    "transient" if transient else "fatal", message, detail)):
                usage = None    # its results went
            return False
        finally:
            if not recorded:
                self.store.set_stored_bytes(job_id, (usage or self.files.usage(job_id)).total)

    def _fail(self, running: Running, service, error: ErrorSummary) -> bool:
        """ERROR; or, for a transient error with attempts left, QUEUED again after its
        backoff (True).  The attempt's results are set aside in the transaction that
        queues the job again, and only if it does: the next attempt never loses its
        own, and a worker whose attempt was taken over removes none of the new one's."""
        if error.type == "transient" and running.attempt < service.max_attempts:
            moved = []
            requeued = False
            try:
                requeued = lost.retry_or_fail(
                    self.store, service, running.job_id, error, claim=running.claim,
                    then=lambda: moved.append(self.files.set_aside_results(running.job_id)))
            finally:
                for aside in moved:     # gone with the change that queued the job again
                    if requeued:
                        aside.remove()
                    else:
                        aside.restore()
            return requeued
        self.store.mark_failed(running.job_id, error, claim=running.claim)
        return False


def _failure(code: int, reader) -> str | None:
    """Why a job whose process ended by itself failed; None when it succeeded."""
    if code == 0:
        missing = reader.collect_outputs()
        if not missing:
            return None
        return f"the command did not write its declared output {', '.join(missing)}"
    return reader.error or (f"the job exited with status {code}" if code > 0
                            else f"the job was killed by signal {-code}")


def _tail(path, limit: int = 8192) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
