"""A batch's callback in the store: the delivery added when its last job ends (a
change hook run in every process that changes jobs), and what became of it."""
from __future__ import annotations

import sqlalchemy as sa

from ..domain import phases
from ..domain.model import Delivery
from . import callbacks
from .changes import Change
from .tables import batch as T
from .tables import callback as C
from .tables import job as J

BATCH = "batch"
_FINISHED = frozenset(p.value for p in phases.FINISHED)
_DONE = "uws_batch_ended"     # conn.info: (transaction, batch) with nothing left to do
_LOCK_BATCH = (sa.select(T.c.service, T.c.owner, T.c.callback_url)
               .where(T.c.id == sa.bindparam("batch")).with_for_update())
# The batch's jobs left, those not finished, and whether a delivery was added already.
_ENDED = sa.select(
    sa.func.count(),
    sa.func.count(sa.case((J.c.phase.not_in(sorted(_FINISHED)), 1))),
    sa.exists().where(C.c.subject_kind == BATCH,
                      C.c.subject_id == sa.bindparam("batch")).correlate(None),
).select_from(J).where(J.c.batch_id == sa.bindparam("batch"))
# The batch's callback and its latest delivery, if any.
_OUTCOME = (sa.select(T.c.callback_url.label("named"), C)
            .select_from(T.outerjoin(C, sa.and_(C.c.subject_kind == BATCH,
                                                C.c.subject_id == T.c.id)))
            .where(T.c.id == sa.bindparam("batch")).order_by(C.c.id.desc()).limit(1))


def batch_ended(conn: sa.Connection, change: Change) -> None:
    """Change hook: when a batch's last unfinished job reaches COMPLETED, ERROR or
    ABORTED (or is deleted), a batch that named a callback gets its one delivery.

    The batch row is locked before its jobs are counted, so of two transactions
    ending its last two jobs the second counts after the first committed
    (PostgreSQL, READ COMMITTED; SQLite has one writer): exactly one sees none left.
    A finished job never runs again, so a batch ends once; the delivery already
    there makes the later changes of a bulk end (ABORT of the batch) add none, and
    the transaction remembers it so that they do not even look."""
    if change.batch_id is None or change.old is None or change.old in _FINISHED:
        return
    if change.new is not None and change.new not in _FINISHED:
        return
    done = (conn.get_transaction(), change.batch_id)
    if conn.info.get(_DONE) == done:
        return
    batch = conn.execute(_LOCK_BATCH, {"batch": change.batch_id}).first()
    if batch is None or batch.callback_url is None:
        conn.info[_DONE] = done
        return
    left, unfinished, sent = conn.execute(_ENDED, {"batch": change.batch_id}).one()
    if left and not unfinished and not sent:
        callbacks.add_delivery(conn, BATCH, change.batch_id, batch.service, batch.owner,
                               batch.callback_url)
    if sent or not unfinished:
        conn.info[_DONE] = done


def outcome(conn: sa.Connection, batch_id: str) -> Delivery | None:
    """What became of the batch's callback (None: it named none; waiting: it has
    not ended yet), from its latest delivery."""
    row = conn.execute(_OUTCOME, {"batch": batch_id}).mappings().first()
    return None if row is None or row["named"] is None else callbacks.outcome(row)


def drop(conn: sa.Connection, batch_id: str) -> None:
    """Forget the batch's deliveries (it is being deleted: nothing left to send)."""
    conn.execute(C.delete().where(C.c.subject_kind == BATCH, C.c.subject_id == batch_id))
