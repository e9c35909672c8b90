"""Executors: what runs QUEUED jobs (the web layer only calls submit/abort), with the jobs'
directories, callback delivery and the sweeps' scheduler.  An adapter: it may import
uws.domain, uws.usecases, uws.runner and other adapters; a job's own process imports
little of it (child, fetch)."""
from .base import Executor, NullExecutor

__all__ = ["Executor", "NullExecutor"]
