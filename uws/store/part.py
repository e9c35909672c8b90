"""What the Store provides to the query mixins it is made of (uws.store.jobs.Store)."""
from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from ..domain.model import Result
from .changes import Change


class StorePart:
    engine: sa.Engine

    def _announce(self, conn: sa.Connection, job_id: str) -> None:
        """Tell other processes, at commit, that the job changed."""
        raise NotImplementedError

    def _changed(self, job_id: str) -> None:
        """After the commit: release a running slot it freed, tell this process's listeners."""
        raise NotImplementedError

    def _serialise_owner(self, conn: sa.Connection, service: str, owner: str) -> None:
        """Serialise the owner's quota-checked changes in a service (this transaction)."""
        raise NotImplementedError

    def _record(self, conn: sa.Connection, change: Change) -> None:
        """Counters and change hooks, inside the changing transaction."""
        raise NotImplementedError

    def _record_many(self, conn: sa.Connection, changes: Iterable[Change]) -> None:
        """:meth:`_record` for many changes, their counters bumped once, in key order."""
        raise NotImplementedError

    def _put_result(self, conn: sa.Connection, job_id: str, res: Result) -> None:
        """Record a result of the job whose row ``conn`` has locked."""
        raise NotImplementedError
