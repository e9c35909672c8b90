"""Configuration: a TOML file, then ``UWS_*`` environment overrides.

The file's shape is declared once, by the dataclasses it is read into
(:class:`Config` for ``[server]`` and ``[executor]``, :class:`~uws.auth.AuthConfig`,
:class:`~uws.domain.services.Service`, :class:`~uws.domain.parameters.ParamSpec`,
:class:`~uws.domain.services.Output`), and read strictly (:mod:`uws.config.shapes`): an
unknown table or key, a value of the wrong type or out of range, or a service
that could not run a job stops the server at start with a :class:`ConfigError`
naming the file, the key and the problem.

With no file (or a file declaring no services) the demo services run.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import tomllib
from pathlib import Path

from ..auth import AuthConfig
from ..domain.parameters import ParamSpec
from ..domain.services import Service
from ..http import hosts, proxies
from . import shapes

EXECUTORS = ("local", "none", "celery")
TABLES = ("server", "executor", "auth", "services")
#: Paths of the server's own that no service may take.
RESERVED_NAMES = frozenset({"stats", "metrics", "signin", "signout"})
#: An environment variable's boolean (the words shells and container files use); a
#: job's boolean parameter takes only true and false (uws.domain.parameters).
ENV_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
ENV_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


class ConfigError(ValueError):
    """A configuration that cannot be used; its text is one line saying where and why."""


def _setting(table: str, default=dataclasses.MISSING, factory=dataclasses.MISSING, **meta):
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"table": table, **meta})


@dataclasses.dataclass
class Config:
    host: str = _setting("server", "127.0.0.1")
    port: int = _setting("server", 8700, min=0, max=65535)
    data_dir: Path = _setting("server", Path("uws-data"))
    database_url: str = _setting("server", "")          # default: SQLite inside data_dir
    wait_max: int = _setting("server", 60, min=0, max=86400)   # cap of a WAIT, seconds
    # HTTP worker threads (a WAIT holds one, except under uws serve: see uws.http.parking)
    threads: int = _setting("server", 400, min=1, max=10000)
    # WAITs held at once; 0 = under uws serve nine in ten connections, else threads - 16
    max_waiters: int = _setting("server", 0, min=0)
    scheduler: bool = _setting("server", True)          # run the sweeps in this process
    metrics_public: bool = _setting("server", False)    # GET /metrics for anyone, not admins only
    max_upload_bytes: int = _setting("server", 100 * 1024 * 1024, min=0)
    redirect_last: int = _setting("server", 100, min=1)   # LAST=n of a DELETE's redirect
    # the base of every absolute URL behind a reverse proxy ("" = as the client addressed us)
    public_url: str = _setting("server", "", read=hosts.public_url)
    # host names answered besides localhost, the bound address and public_url's ("*" = any)
    allowed_hosts: tuple[str, ...] = _setting("server", (), read=hosts.host_names)
    # reverse proxies (addresses, CIDR ranges) whose X-Forwarded-*/Forwarded headers are
    # believed and which the per-address connection cap spares (uws.http.proxies)
    trusted_proxies: tuple[proxies.Network, ...] = _setting("server", (), read=proxies.networks)
    # log lines as text, or one JSON object a line (for log shippers): uws.http.logs
    log_format: str = _setting("server", "text", choices=("text", "json"))
    # Connections (see uws.http.server): 0 = derived from the open-file limit.
    connection_limit: int = _setting("server", 0, min=0, max=1_000_000)
    connections_per_address: int = _setting("server", 0, min=0, max=1_000_000)
    idle_timeout: int = _setting("server", 60, min=1, max=86400)    # no request, no progress
    header_timeout: int = _setting("server", 10, min=1, max=3600)   # a request's headers
    send_timeout: int = _setting("server", 30, min=1, max=3600)     # a client that reads nothing
    # request bodies being received at once (0 = the larger of 1 GiB and 4 bodies)
    max_buffered_bytes: int = _setting("server", 0, min=0)
    # Job events (uws.usecases.events): open streams (0 = a quarter of threads), per owner,
    # how long one lasts (clients then resume), and how long events are kept.
    event_streams: int = _setting("server", 0, min=0, max=100_000)
    event_streams_per_owner: int = _setting("server", 4, min=1, max=100_000)
    event_stream_seconds: int = _setting("server", 300, min=1, max=86400)
    event_retention: int = _setting("server", 7 * 86400, min=60, max=10 * 366 * 86400)
    # Callback deliveries at once per process (one owner or receiver: at most half of them)
    callback_threads: int = _setting("server", 4, min=1, max=256)
    # batch bodies parsed at once (uws.web.batchbodies); more wait 2 s, then 503
    batch_parses: int = _setting("server", 2, min=1, max=1000)
    executor: str = _setting("executor", "local", key="kind", choices=EXECUTORS)
    slots: int = _setting("executor", factory=lambda: os.cpu_count() or 1, min=1, max=4096)
    # kind = "celery": the broker front ends publish to and workers consume from
    broker_url: str = _setting("executor", "")
    queue: str = _setting("executor", "uws")
    # start the fork server with the executor (false: at the first job, so a process
    # that runs no job never starts one)
    fork_server_at_start: bool = _setting("executor", True)
    services: dict[str, Service] = dataclasses.field(default_factory=dict)
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)   # anonymous only

    @property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'uws.sqlite3'}"

    @property
    def max_body_bytes(self) -> int:
        """Largest request body: an upload plus room for multipart framing and fields."""
        return self.max_upload_bytes + (1 << 20)

    @property
    def buffer_limit(self) -> int:
        """Request-body bytes waitress may buffer at once, all connections together."""
        return self.max_buffered_bytes or max(1 << 30, 4 * self.max_body_bytes)

    @property
    def event_stream_limit(self) -> int:
        return self.event_streams or max(self.threads // 4, 1)

    @property
    def waiter_limit(self) -> int:
        """WAITs holding a thread at once (servers that cannot park them)."""
        return self.max_waiters or max(self.threads - 16, 1)


_ENV = {
    "UWS_HOST": "host", "UWS_PORT": "port", "UWS_DATA_DIR": "data_dir",
    "UWS_DATABASE_URL": "database_url", "UWS_WAIT_MAX": "wait_max",
    "UWS_THREADS": "threads", "UWS_EXECUTOR": "executor", "UWS_SLOTS": "slots",
    "UWS_MAX_UPLOAD_BYTES": "max_upload_bytes", "UWS_SCHEDULER": "scheduler",
    "UWS_PUBLIC_URL": "public_url", "UWS_BROKER_URL": "broker_url", "UWS_QUEUE": "queue",
}
_FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def load(path: str | os.PathLike | None = None, env=None, **overrides) -> Config:
    """A Config from an optional TOML file, the environment and keyword overrides."""
    data = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return from_dict(data, env=os.environ if env is None else env, source=str(path or ""),
                     **overrides)


def from_dict(data: dict, env=None, source: str = "", **overrides) -> Config:
    """A Config from a dict shaped like the TOML file (``source`` names it in errors)."""
    try:
        settings, services, auth = _read_file(data)
    except shapes.ShapeError as exc:
        raise ConfigError(f"{source or 'the configuration'}: {exc}") from None
    settings.update(_environment(env or {}))
    settings.update(_overrides(overrides))
    services = {name: _callback_secret(s, env or {}) for name, s in services.items()}
    cfg = Config(services=services or demo_services(), auth=auth, **settings)
    if cfg.executor == "celery":
        _check_celery(cfg, source or "the configuration")
    if cfg.max_buffered_bytes and cfg.max_buffered_bytes < cfg.max_body_bytes:
        raise ConfigError(f"{source or 'the configuration'}: server.max_buffered_bytes: "
                          f"under the largest request body ({cfg.max_body_bytes} bytes, "
                          "max_upload_bytes + 1 MiB), which could then never be received")
    return cfg


def _check_celery(cfg: Config, source: str) -> None:
    if not cfg.broker_url:
        raise ConfigError(f"{source}: executor.broker_url: required with kind = \"celery\" "
                          "(amqp://... for RabbitMQ, redis://... for Redis)")
    try:
        importlib.import_module("celery")
    except ImportError:
        raise ConfigError(f"{source}: executor.kind: \"celery\" needs Celery: "
                          "pip install 'ivoa-uws-server[celery]'") from None


def _read_file(data: dict):
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise shapes.ShapeError(f"[{unknown[0]}]",
                                f"unknown table; expected one of {', '.join(TABLES)}")
    settings = {}
    for table in ("server", "executor"):
        settings.update(_settings_table(table, data.get(table, {})))
    auth = shapes.read(AuthConfig, data.get("auth", {}), "auth")
    return settings, _services(data.get("services", {})), auth


def _settings_table(table: str, raw) -> dict:
    if not isinstance(raw, dict):
        raise shapes.ShapeError(table, "must be a table")
    fields = {f.metadata.get("key", f.name): f for f in shapes.readable_fields(Config, table)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise shapes.ShapeError(f"{table}.{unknown[0]}",
                                f"unknown key; expected one of {', '.join(sorted(fields))}")
    return {fields[key].name: shapes.value_of(fields[key], value, f"{table}.{key}", Config)
            for key, value in raw.items()}


def _environment(env) -> dict:
    settings = {}
    for var, name in _ENV.items():
        text = env.get(var, "")
        if text == "":
            continue
        try:
            settings[name] = shapes.parse_text(_FIELDS[name], text, var, Config,
                                               ENV_TRUE_WORDS, ENV_FALSE_WORDS)
        except shapes.ShapeError as exc:
            raise ConfigError(f"environment variable {exc}") from None
    return settings


def _callback_secret(service: Service, env) -> Service:
    """``UWS_CALLBACK_SECRET_<SERVICE>`` (upper case, "-" as "_"), when set, is the
    service's callback secret: kept out of the file."""
    secret = env.get("UWS_CALLBACK_SECRET_" + service.name.upper().replace("-", "_"), "")
    return dataclasses.replace(service, callback_secret=secret) if secret else service


def _overrides(overrides: dict) -> dict:
    settings = {}
    for name, value in overrides.items():
        if value is None:
            continue
        field = _FIELDS.get(name)
        if field is None or "table" not in field.metadata:
            raise ConfigError(f"setting {name!r}: unknown")
        try:
            settings[name] = shapes.value_of(field, value, name, Config)
        except shapes.ShapeError as exc:
            raise ConfigError(f"setting {exc}") from None
    return settings


def _services(table) -> dict[str, Service]:
    if not isinstance(table, dict):
        raise shapes.ShapeError("services", "must be a table of [services.NAME] tables")
    services = {}
    for name, raw in table.items():
        where = f"services.{name}"
        if name in RESERVED_NAMES:     # the server's own resources have these paths
            raise shapes.ShapeError(where, f"{name!r} is a reserved name")
        service = shapes.read(Service, raw, where, name=name)
        service = _default_durations(service, raw, where)
        _check_runnable(service, where)
        services[name] = service
    return services


def _default_durations(service: Service, raw: dict, where: str) -> Service:
    """Defaults within their maxima: a default left out is lowered to its maximum,
    one written out beyond it is a mistake."""
    changes = {}
    for key, limit_key in (("execution_duration", "max_execution_duration"),
                           ("lifetime", "max_lifetime")):
        value, limit = getattr(service, key), getattr(service, limit_key)
        if limit and (value == 0 or value > limit):
            if key in raw:
                shown = "0 (unlimited)" if value == 0 else value
                raise shapes.ShapeError(f"{where}.{key}", f"{shown} is beyond "
                                        f"{limit_key} ({limit})")
            changes[key] = limit
    return dataclasses.replace(service, **changes) if changes else service


def _check_runnable(service: Service, where: str) -> None:
    """The runner's function imports (here, as it will in each job), or the
    command's program exists: otherwise every job of the service would fail."""
    if service.runner:
        module_name, _, function = service.runner.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:    # whatever the module raises while importing
            raise shapes.ShapeError(f"{where}.runner", f"cannot import {module_name!r} "
                                    f"({type(exc).__name__}: {exc}); is it installed or "
                                    "on PYTHONPATH?") from None
        if not callable(getattr(module, function, None)):
            raise shapes.ShapeError(f"{where}.runner",
                                    f"module {module_name!r} has no function {function!r}")
        return
    program = service.command[0]
    if "/" in program and not os.path.isabs(program):
        raise shapes.ShapeError(f"{where}.command", f"{program!r}: give the program as an "
                                "absolute path or a name on PATH (jobs run in their own "
                                "directory)")
    if shutil.which(program) is None:
        raise shapes.ShapeError(f"{where}.command", f"{program!r}: no such executable "
                                "program" + ("" if "/" in program else " on PATH"))


def demo_services() -> dict[str, Service]:
    sleep = Service(
        name="sleep",
        description="Sleeps for DURATION seconds, then writes result.txt; FAIL=true ends in ERROR.",
        runner="uws.demo:sleep",
        parameters=(
            ParamSpec("DURATION", "float", default="1", minimum=0, maximum=86400,
                      description="How long to sleep, in seconds."),
            ParamSpec("FAIL", "boolean", default="false",
                      description="End in ERROR instead of COMPLETED."),
            ParamSpec("MESSAGE", "string", default="", max_length=4096,
                      description="Error text when FAIL is true; echoed into the result."),
        ),
    )
    checksum = Service(
        name="checksum",
        description="Computes the digest of an uploaded (or referenced) file into checksum.txt.",
        runner="uws.demo:checksum",
        parameters=(
            ParamSpec("FILE", "file", required=True,
                      description="The file to digest: an upload or an http(s) URL."),
            ParamSpec("ALGORITHM", "enum", default="sha256", choices=("md5", "sha1", "sha256"),
                      description="Digest algorithm."),
        ),
    )
    return {s.name: s for s in (sleep, checksum)}
