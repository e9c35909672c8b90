"""Job events as JSON objects and as Server-Sent Events (text/event-stream)."""
from __future__ import annotations

import json
from typing import Any

from ..domain.model import JobEvent
from ..domain.timeutil import format_time


def event(e: JobEvent) -> dict[str, Any]:
    """One event; names as in the job documents (jobId, ownerId, ...); a phase is
    null before a creation and after a deletion."""
    return {"id": e.seq, "jobId": e.job_id, "batchId": e.batch_id, "service": e.service,
            "ownerId": e.owner or None, "oldPhase": e.old_phase, "newPhase": e.new_phase,
            "time": format_time(e.time), "progress": e.progress}


def sse(e: JobEvent) -> bytes:
    """One event of a stream: its id (what Last-Event-ID resumes after), its type
    (``phase``, or ``progress`` for a progress report), its data (JSON on one line)."""
    data = json.dumps(event(e), ensure_ascii=False, separators=(",", ":"))
    kind = "progress" if e.old_phase == e.new_phase else "phase"
    return f"id: {e.seq}\nevent: {kind}\ndata: {data}\n\n".encode()


def retry(milliseconds: int) -> bytes:
    """How long a client waits before reconnecting; sent first, so headers leave at once."""
    return f"retry: {milliseconds}\n\n".encode()


#: a comment line: keeps idle connections (and proxies) open
HEARTBEAT = b": heartbeat\n\n"
