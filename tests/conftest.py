"""Shared fixtures.

Every test that takes ``app`` or ``client`` runs twice, on SQLite and on
PostgreSQL, but in the modules whose ``BACKENDS`` name one (tests/README.rst says
which).  Each gets a database of its own, copied from one migrated per test process.
PostgreSQL comes from ``UWS_TEST_POSTGRES_URL`` (default: the local server,
database ``test``).  Without it a local run skips those cases;
under CI (``CI`` set) an unreachable PostgreSQL fails the run instead.

Every XML body the test client receives is validated against the official
UWS 1.1 schema, so no test can see an invalid document and pass.
"""
from __future__ import annotations

import functools
import itertools
import os
import socket
import ssl
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import trustme
from flask.testing import FlaskClient
from lxml import etree

# The suite tests the installed distribution (``pip install '.[test]'``), never the
# checkout's uws/ folder: ``python -m pytest`` puts the working directory first on
# sys.path, so take the checkout off it before anything imports uws.
CHECKOUT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != CHECKOUT]
try:
    import uws  # noqa: E402, F401  (is it installed?)
except ImportError:
    pytest.exit("the uws package is not installed: run pip install '.[test]' first", 2)

from uws.config import settings as config_mod  # noqa: E402
from uws.resources import uws_schema_path  # noqa: E402
from uws.store.engine import create_schema, make_engine  # noqa: E402
from uws.web.app import create_app, shutdown  # noqa: E402

pytest_plugins = ("durations",)

POSTGRES_URL = os.environ.get("UWS_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
IN_CI = bool(os.environ.get("CI"))

_schema = etree.XMLSchema(etree.parse(str(uws_schema_path())))


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (setup.cfg): two test processes per core, since a test spends about
    half its time waiting (on jobs, servers, subprocesses); PYTEST_XDIST_AUTO_NUM_WORKERS
    decides instead when set."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(chosen) if chosen else 2 * (os.cpu_count() or 1)


def assert_valid_uws(body: bytes) -> etree._Element:
    """Parse ``body`` and fail unless it is valid against UWS-v1.1.xsd."""
    doc = etree.fromstring(body)
    if not _schema.validate(doc):
        pytest.fail(f"invalid UWS XML: {_schema.error_log}\n{body[:2000]!r}")
    return doc


class ValidatingClient(FlaskClient):
    """A test client that schema-checks every UWS XML document it receives."""

    def open(self, *args, **kwargs):
        response = super().open(*args, **kwargs)
        ctype = response.headers.get("Content-Type", "")
        if "xml" in ctype and response.status_code == 200 and response.data:
            root = etree.fromstring(response.data)
            if root.tag.startswith("{http://www.ivoa.net/xml/UWS/v1.0}"):
                assert_valid_uws(response.data)
        return response


@functools.cache
def _postgres_available() -> bool:
    try:
        engine = sa.create_engine(POSTGRES_URL, poolclass=sa.pool.NullPool)
        with engine.connect():
            pass
        engine.dispose()
        return True
    except Exception:
        return False


def _need_postgres() -> None:
    if not _postgres_available():
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI but {POSTGRES_URL} is unreachable")
        pytest.skip("PostgreSQL not reachable (set UWS_TEST_POSTGRES_URL)")


def database_url(backend: str, tmp_path) -> str:
    """An empty database of one's own: a SQLite file, or a fresh PostgreSQL schema
    (so concurrent test runs sharing the server never see each other)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'uws.sqlite3'}"
    _need_postgres()
    schema = f"uws_test_{uuid.uuid4().hex[:12]}"
    _admin(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"


@functools.cache
def _admin_engine() -> sa.Engine:
    # one per test process: CREATE and DROP DATABASE run outside a transaction
    return sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", pool_size=1)


def _admin(sql: str) -> None:
    with _admin_engine().connect() as conn:
        conn.execute(sa.text(sql))


def _postgres_database(name: str) -> str:
    return sa.engine.make_url(POSTGRES_URL).set(database=name).render_as_string(
        hide_password=False)


def drop_database(url: str) -> None:
    if "search_path%3D" in url:
        _admin(f"DROP SCHEMA IF EXISTS {url.rsplit('%3D', 1)[1]} CASCADE")
    elif url.startswith("postgresql") and sa.engine.make_url(url).database.startswith(COPY):
        _admin(f'DROP DATABASE IF EXISTS "{sa.engine.make_url(url).database}" WITH (FORCE)')


#: the prefix of the PostgreSQL databases copied, one per test, from the migrated template
COPY = "uws_copy_"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A SQLite database migrated to the newest revision, once per test process."""
    path = tmp_path_factory.mktemp("template") / "uws.sqlite3"
    engine = make_engine(f"sqlite:///{path}", pool_size=1)
    create_schema(engine)
    engine.dispose()        # the last connection's close folds the WAL into the file
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A PostgreSQL database migrated to the newest revision, once per test process."""
    _need_postgres()
    name = f"uws_template_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    engine = make_engine(_postgres_database(name), pool_size=1)
    create_schema(engine)
    engine.dispose()        # CREATE DATABASE ... TEMPLATE needs it unused
    yield name
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrated_database(backend: str, tmp_path: Path, request) -> str:
    """A database of one's own already at the newest revision: a copy of the test
    process's template (a file copy, or CREATE DATABASE ... TEMPLATE), milliseconds
    where migrating each one took 0.1-0.3 s."""
    if backend == "sqlite":
        target = tmp_path / "uws.sqlite3"
        data = request.getfixturevalue("sqlite_template").read_bytes()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)   # as the server makes it
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return f"sqlite:///{target}"
    template = request.getfixturevalue("postgres_template")
    name = f"{COPY}{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return _postgres_database(name)


@pytest.fixture(autouse=True)
def _away_from_the_checkout(tmp_path, monkeypatch):
    """Every test runs in a directory of its own, so nothing it starts (``python -c``,
    a job, ``uws serve``) can import the checkout's uws/ instead of the installed one."""
    monkeypatch.chdir(tmp_path)


def pytest_generate_tests(metafunc):
    """``backend``: both databases, or those of the module's ``BACKENDS`` (see
    tests/README.rst for which modules keep one); a test's own parametrize wins."""
    if "backend" not in metafunc.fixturenames:
        return
    if any("backend" in m.args[0] for m in metafunc.definition.iter_markers("parametrize")):
        return
    metafunc.parametrize("backend", getattr(metafunc.module, "BACKENDS", BACKENDS))


def pytest_collection_modifyitems(config, items):
    """``UWS_TEST_BACKENDS=sqlite``: a test that runs on that database runs only there;
    one that runs on another alone (LISTEN/NOTIFY) still runs.  The cases left out are
    deselected, not skipped: .ci/run's second Python runs each test once this way (see
    tests/README.rst)."""
    chosen = os.environ.get("UWS_TEST_BACKENDS")
    if not chosen:
        return
    keep = set(chosen.split(","))
    if not keep <= set(BACKENDS):
        raise pytest.UsageError(f"UWS_TEST_BACKENDS={chosen}: not among {', '.join(BACKENDS)}")
    has_chosen = {_case(item) for item in items if _backend_of(item) in keep}
    dropped = [item for item in items if _backend_of(item) not in keep | {None}
               and _case(item) in has_chosen]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        left = set(dropped)
        items[:] = [item for item in items if item not in left]


def _backend_of(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("backend") if callspec is not None else None


def _case(item) -> tuple:
    """A test with its parameters but the database."""
    callspec = getattr(item, "callspec", None)
    params = {k: v for k, v in callspec.params.items() if k != "backend"} if callspec else {}
    return item.nodeid.split("[", 1)[0], repr(sorted(params.items(), key=str))


#: the databases every test of the store's behaviour runs on
BACKENDS = ("sqlite", "postgresql")


@pytest.fixture
def db_url(backend, tmp_path, request):
    """The test's database, at the newest revision (an empty one: ``empty_db_url``)."""
    url = migrated_database(backend, tmp_path, request)
    yield url
    drop_database(url)


@pytest.fixture
def empty_db_url(backend, tmp_path):
    """An empty database of the test's own, for what migrations make of one."""
    url = database_url(backend, tmp_path)
    yield url
    drop_database(url)


def make_config(tmp_path, db_url, services: dict | None = None, **overrides) -> config_mod.Config:
    """A test configuration; ``services`` is shaped like the TOML ``[services]`` table
    (the demo services when omitted)."""
    # the fork server starts at the first job: most tests run none
    settings = dict(data_dir=tmp_path / "data", database_url=db_url, slots=2,
                    threads=64, wait_max=10, fork_server_at_start=False)
    settings.update(overrides)
    return config_mod.from_dict({"services": services or {}}, env={}, **settings)


@pytest.fixture
def config(tmp_path, db_url):
    return make_config(tmp_path, db_url)


@pytest.fixture
def app(config):
    application = create_app(config)
    application.test_client_class = ValidatingClient
    yield application
    shutdown(application)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def api(app):
    """The use-case layer behind the app (uws.usecases.jobs.Jobs)."""
    return app.extensions["uws"]


@pytest.fixture
def idle(tmp_path, db_url):
    """(client, api) of an app whose jobs are never picked up: QUEUED jobs stay QUEUED."""
    application = create_app(make_config(tmp_path, db_url, executor="none"))
    application.test_client_class = ValidatingClient
    yield application.test_client(), application.extensions["uws"]
    shutdown(application)


class LiveServer:
    """The app served by waitress on a free loopback port, in a thread that
    stops promptly (waitress's own run() loop cannot be stopped from outside)."""

    def __init__(self, app, threads: int = 64):
        import waitress
        self.app = app
        self.server = waitress.create_server(app, host="127.0.0.1", port=0, threads=threads,
                                             connection_limit=threads + 100)
        self.url = f"http://127.0.0.1:{self.server.effective_port}"
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while not self._stop.is_set():
            self.server.asyncore.loop(timeout=0.05, map=self.server._map, count=1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        import waitress.wasyncore
        # blocked WAITs (a browser page's long poll) answer now, freeing their threads
        self.app.extensions["uws"].watch.stop()
        self._stop.set()
        self.thread.join(timeout=5)
        self.server.task_dispatcher.shutdown(timeout=5)
        waitress.wasyncore.close_all(self.server._map)


@pytest.fixture
def live_server(app):
    """The app served over real HTTP by waitress on a free loopback port."""
    with LiveServer(app) as server:
        yield server


#: Ports for servers the tests start (uws serve, gunicorn, test servers): below the
#: kernel's ephemeral range (32768 and up here), in a block of each test process's own.
#: A port the kernel handed out (bind to port 0) could be handed to another process's
#: connection or server before ours bound it: CI saw "Address already in use".
PORT_BLOCK = 500
_next_ports = itertools.count()


def free_port() -> int:
    """A port on 127.0.0.1 no socket holds now, from this test process's own block."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    first = 11000 + (int(worker.removeprefix("gw") or 0) % 16) * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = first + next(_next_ports) % PORT_BLOCK
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # as servers bind
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORT_BLOCK - 1}")


@pytest.fixture
def tls(tmp_path, monkeypatch):
    """A CA this process trusts (as it would the system's), and every ``*.example``
    name resolving to 127.0.0.1: call it with the name a server's certificate is for,
    to get that server's TLS context."""
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **kw: real(
        "127.0.0.1" if str(host).endswith(".example") else host, *a, **kw))

    def context_for(name: str) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(name).configure_cert(context)
        return context
    return context_for
