"""``python -m uws.store.migrations "what changed"``, run in the checkout: autogenerate
the next revision into versions/ from the difference between uws/store/tables.py and
the newest revision (applied to a scratch SQLite database).  Read it before committing:
autogenerate misses renames and some type changes."""
from __future__ import annotations

import sys
import tempfile

import sqlalchemy as sa
from alembic import command

from ..schema import alembic_config, newest_revision, upgrade


def new_revision(message: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        engine = sa.create_engine(f"sqlite:///{scratch}/newest.sqlite3")
        try:
            upgrade(engine)
            with engine.begin() as conn:
                command.revision(alembic_config(conn), message, autogenerate=True,
                                 rev_id=f"{int(newest_revision()) + 1:04d}")
        finally:
            engine.dispose()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python -m uws.store.migrations "what changed"')
    new_revision(sys.argv[1])
