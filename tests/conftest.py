"""Shared fixtures.

Every test that takes ``app`` or ``client`` runs twice: on SQLite and on
PostgreSQL.  PostgreSQL comes from ``UWS_TEST_POSTGRES_URL`` (default: the
local server, database ``test``).  Without it a local run skips those cases;
under CI (``CI`` set) an unreachable PostgreSQL fails the run instead.

Every XML body the test client receives is validated against the official
UWS 1.1 schema, so no test can see an invalid document and pass.
"""
from __future__ import annotations

import os
import socket
import ssl
import sys
import threading
import uuid
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

from uws import config as config_mod  # noqa: E402
from uws.resources import uws_schema_path  # noqa: E402
from uws.web.app import create_app, shutdown  # noqa: E402

POSTGRES_URL = os.environ.get("UWS_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
IN_CI = bool(os.environ.get("CI"))

_schema = etree.XMLSchema(etree.parse(str(uws_schema_path())))


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


def _postgres_available() -> bool:
    try:
        engine = sa.create_engine(POSTGRES_URL)
        with engine.connect():
            pass
        engine.dispose()
        return True
    except Exception:
        return False


def database_url(backend: str, tmp_path) -> str:
    """A database of one's own: a SQLite file, or a fresh PostgreSQL schema
    (so concurrent test runs sharing the server never see each other)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'uws.sqlite3'}"
    if not _postgres_available():
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI but {POSTGRES_URL} is unreachable")
        pytest.skip("PostgreSQL not reachable (set UWS_TEST_POSTGRES_URL)")
    schema = f"uws_test_{uuid.uuid4().hex[:12]}"
    _admin(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"


def _admin(sql: str) -> None:
    engine = sa.create_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


def drop_database(url: str) -> None:
    if "search_path%3D" in url:
        _admin(f"DROP SCHEMA IF EXISTS {url.rsplit('%3D', 1)[1]} CASCADE")


@pytest.fixture(autouse=True)
def _away_from_the_checkout(tmp_path, monkeypatch):
    """Every test runs in a directory of its own, so nothing it starts (``python -c``,
    a job, ``uws serve``) can import the checkout's uws/ instead of the installed one."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request):
    return request.param


@pytest.fixture
def db_url(backend, tmp_path):
    url = database_url(backend, tmp_path)
    yield url
    drop_database(url)


def make_config(tmp_path, db_url, services: dict | None = None, **overrides) -> config_mod.Config:
    """A test configuration; ``services`` is shaped like the TOML ``[services]`` table
    (the demo services when omitted)."""
    settings = dict(data_dir=tmp_path / "data", database_url=db_url, slots=2,
                    threads=64, wait_max=10)
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
    """The use-case layer behind the app (uws.jobs.Jobs)."""
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
        self._stop.set()
        self.thread.join(timeout=5)
        self.server.task_dispatcher.shutdown(timeout=5)
        waitress.wasyncore.close_all(self.server._map)


@pytest.fixture
def live_server(app):
    """The app served over real HTTP by waitress on a free loopback port."""
    with LiveServer(app) as server:
        yield server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
