"""Configuration: a TOML file, then ``UWS_*`` environment overrides.

With no file (or a file declaring no services) the demo services run.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from .auth import AuthConfig
from .services import Output, ParamSpec, Service


@dataclasses.dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 8700
    data_dir: Path = Path("uws-data")
    database_url: str = ""          # default: SQLite inside data_dir
    wait_max: int = 60              # cap for WAIT=-1 and large WAITs, seconds
    threads: int = 400              # HTTP worker threads (blocking WAITs hold one each)
    max_waiters: int = 0            # concurrent blocking WAITs; 0 = threads - 16
    executor: str = "local"         # "local", or "none" (another process runs jobs)
    slots: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    scheduler: bool = True          # run the deadline/destruction/lease sweeps here
    max_upload_bytes: int = 100 * 1024 * 1024
    redirect_last: int = 100        # LAST=n on the job-list URL we redirect to
    services: dict[str, Service] = dataclasses.field(default_factory=dict)
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)   # anonymous only by default

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
    def waiter_limit(self) -> int:
        return self.max_waiters or max(self.threads - 16, 1)


_INT_KEYS = {"port", "wait_max", "threads", "max_waiters", "slots", "max_upload_bytes", "redirect_last"}
_ENV = {
    "UWS_HOST": "host", "UWS_PORT": "port", "UWS_DATA_DIR": "data_dir",
    "UWS_DATABASE_URL": "database_url", "UWS_WAIT_MAX": "wait_max",
    "UWS_THREADS": "threads", "UWS_EXECUTOR": "executor", "UWS_SLOTS": "slots",
    "UWS_MAX_UPLOAD_BYTES": "max_upload_bytes", "UWS_SCHEDULER": "scheduler",
}


def load(path: str | os.PathLike | None = None, env=None, **overrides) -> Config:
    """Build a Config from an optional TOML file, the environment and keyword overrides."""
    data = tomllib.loads(Path(path).read_text()) if path else {}
    return from_dict(data, env=os.environ if env is None else env, **overrides)


def from_dict(data: dict, env=None, **overrides) -> Config:
    settings = dict(data.get("server", {}))
    settings.update({k: v for k, v in data.get("executor", {}).items() if k in ("slots",)})
    if "kind" in data.get("executor", {}):
        settings["executor"] = data["executor"]["kind"]
    for var, value in (env or {}).items():
        if var in _ENV and value != "":
            settings[_ENV[var]] = value
    settings.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in dataclasses.fields(Config)} - {"services", "auth"}
    unknown = set(settings) - known
    if unknown:
        raise ValueError(f"unknown server settings: {', '.join(sorted(unknown))}")
    for key in _INT_KEYS & set(settings):
        try:
            settings[key] = int(settings[key])
        except (TypeError, ValueError):
            raise ValueError(f"{key}: not a whole number: {settings[key]!r}") from None
    if isinstance(settings.get("scheduler"), str):
        settings["scheduler"] = settings["scheduler"].strip().lower() in ("1", "true", "yes", "on")
    if "data_dir" in settings:
        settings["data_dir"] = Path(settings["data_dir"])
    services = parse_services(data.get("services", {})) or demo_services()
    return Config(services=services, auth=AuthConfig.from_table(data.get("auth", {})),
                  **settings)


def parse_services(table: dict) -> dict[str, Service]:
    services = {}
    for name, spec in table.items():
        spec = dict(spec)
        params = tuple(_param(p) for p in spec.pop("parameters", []))
        spec["command"] = tuple(spec.get("command", ()))
        spec["outputs"] = tuple(Output(**o) for o in spec.get("outputs", ()))
        services[name] = Service(name=name, parameters=params, **spec)
    return services


def _param(table: dict) -> ParamSpec:
    table = dict(table)
    if "default" in table and table["default"] is not None:
        value = table["default"]
        table["default"] = str(value).lower() if isinstance(value, bool) else str(value)
    if "choices" in table:
        table["choices"] = tuple(table["choices"])
    for bound in ("min", "max"):
        if bound in table:
            table[{"min": "minimum", "max": "maximum"}[bound]] = table.pop(bound)
    return ParamSpec(**table)


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
