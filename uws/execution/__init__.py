"""Executors: what runs QUEUED jobs.  The web layer only calls submit/abort."""
from .base import Executor, NullExecutor

__all__ = ["Executor", "NullExecutor"]
