"""A Python client for any UWS 1.1 job server (UWS 1.0 where cheap), with ``requests``.
An entry point of its own (``uws jobs``); it imports nothing else of uws.

    from uws.client import Client
    jobs = Client("http://127.0.0.1:8700/sleep", token="...")
    job = jobs.create({"DURATION": 2}, run=True)
    job = jobs.wait(job, timeout=60)
"""
from .api import Client
from .batches import Batch, BatchJob, BatchRef
from .documents import FINAL_PHASES, ErrorSummary, Job, JobRef, Parameter, Result
from .errors import (
    AuthError,
    ConnectionFailed,
    Forbidden,
    HTTPError,
    NotFound,
    ProtocolError,
    Timeout,
    UWSError,
)
from .events import Event, EventPage

__all__ = ["Client", "Job", "JobRef", "Result", "Parameter", "ErrorSummary", "FINAL_PHASES",
           "UWSError", "HTTPError", "AuthError", "Forbidden", "NotFound", "ConnectionFailed",
           "ProtocolError", "Timeout", "Batch", "BatchJob", "BatchRef", "Event", "EventPage"]
