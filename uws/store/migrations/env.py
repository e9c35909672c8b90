"""Alembic's environment: migrate the connection uws.store.schema hands over.

That connection is already inside the transaction (and holds the lock) the
caller commits, so alembic neither begins nor commits one of its own here.
"""
from __future__ import annotations

from alembic import context

from uws.store.tables import metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("uws migrations run through uws.store.schema (uws db upgrade), "
                       "on a connection it passes in")

context.configure(
    connection=connection,
    target_metadata=metadata,       # what autogenerate compares the database with
    # SQLite alters most things by copying the table: let autogenerate say so.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
