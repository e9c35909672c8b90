"""The schema's revision: Alembic migrations shipped in uws/store/migrations.

At start (``create_schema``) and with ``uws db upgrade`` a database is brought
to the newest revision this server knows:

* empty: created at the newest revision;
* made before migrations (uws tables, no alembic_version): stamped as the
  initial revision, which is that schema, then upgraded;
* at an older revision: upgraded;
* at a revision this server does not know (a newer uws made it): SchemaError,
  nothing changed.

The work runs in one transaction holding a lock (a PostgreSQL advisory lock,
SQLite's write lock), so servers started together migrate once: the others
wait, then find the database current.
"""
from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import NamedTuple

import sqlalchemy as sa


def _quiet_alembic() -> None:
    # Alembic logs its plugins and every connection's dialect at INFO (from its
    # import on); uws logs what changed itself.
    logger = logging.getLogger("alembic")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


_quiet_alembic()

from alembic import command  # noqa: E402
from alembic.config import Config as AlembicConfig  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402
from alembic.script.revision import ResolutionError  # noqa: E402
from alembic.util import CommandError  # noqa: E402

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: The revision whose schema the servers made before migrations created.
INITIAL = "0001"
#: Advisory lock key taken while PostgreSQL's schema changes ("UWSSCH").
_SCHEMA_LOCK = 0x555753534348

log = logging.getLogger("uws.store")


class SchemaError(Exception):
    """The database's schema is not one this server can use or upgrade."""


class Status(NamedTuple):
    revision: str | None     # None: no alembic_version (empty, or made before migrations)
    head: str                # the newest revision this server knows
    known: bool              # revision is one of this server's (or None)
    tables: bool             # the uws tables are there

    @property
    def current(self) -> bool:
        return self.revision == self.head


def create_schema(engine: sa.Engine) -> None:
    """Bring the database to the newest revision (see the module's doc)."""
    for attempt in range(5):
        try:
            before, after = upgrade(engine)
            break
        except sa.exc.OperationalError:
            # SQLite: "database is locked" from a connection opened while another
            # process turns the new file to WAL, where no busy handler waits.
            if engine.dialect.name != "sqlite" or attempt == 4:
                raise
            time.sleep(0.1 * (attempt + 1))
    if before != after:
        log.info("database schema upgraded from %s to %s", before or "none", after)


def upgrade(engine: sa.Engine) -> tuple[str | None, str]:
    """(revision before, revision now); SchemaError for an unknown revision."""
    with engine.connect() as conn:
        status = _checked(status_of(conn))
        if status.current:      # the usual start: no lock, no writes
            return status.revision, status.head
    with engine.connect() as conn:
        _lock(conn)
        status = _checked(status_of(conn))     # another process may have done it meanwhile
        if not status.current:
            _migrate(conn, status)
        conn.commit()
    return status.revision, status.head


def read_status(engine: sa.Engine) -> Status:
    with engine.connect() as conn:
        return status_of(conn)


def status_of(conn: sa.Connection) -> Status:
    scripts = _scripts()
    revision = MigrationContext.configure(conn).get_current_revision()
    return Status(revision, newest_revision(), revision is None or _known(scripts, revision),
                  sa.inspect(conn).has_table("uws_job"))


def _checked(status: Status) -> Status:
    if not status.known:
        raise SchemaError(
            f"the database's schema is at revision {status.revision}, which this version of "
            f"uws does not know (its newest is {status.head}): a newer uws made it; run that "
            "version, or a database of this version's")
    return status


def _lock(conn: sa.Connection) -> None:
    """Begin the transaction holding the lock that serialises migrations."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK)))
    elif conn.dialect.name == "sqlite":
        # Take the write lock now (busy_timeout waits for it), not at the first write.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.begin()


def _migrate(conn: sa.Connection, status: Status) -> None:
    config = alembic_config(conn)
    if status.revision is None and status.tables:
        _adopt(conn, config)
    command.upgrade(config, "head")


def _adopt(conn: sa.Connection, config: AlembicConfig) -> None:
    """Stamp a database made before migrations as the initial revision, first adding
    any initial table its (older) server had not made yet."""
    initial = _scripts().get_revision(INITIAL)
    assert initial is not None and initial.module is not None
    initial.module.schema().create_all(conn, checkfirst=True)
    command.stamp(config, INITIAL)
    log.info("database made before schema migrations: stamped as revision %s", INITIAL)


def alembic_config(conn: sa.Connection) -> AlembicConfig:
    """Alembic's configuration, built here: the installed package needs no alembic.ini."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    # versions/vNNNN_*.py: names mypy and ruff accept as modules
    config.set_main_option("file_template", "v%%(rev)s_%%(slug)s")
    config.attributes["connection"] = conn     # env.py migrates this connection
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config)


@functools.cache
def newest_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None, f"no migration in {MIGRATIONS}"
    return head


def _known(scripts: ScriptDirectory, revision: str) -> bool:
    try:
        return scripts.get_revision(revision) is not None
    except (ResolutionError, CommandError):
        return False

