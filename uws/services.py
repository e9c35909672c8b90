"""Services (job lists) and their typed parameter declarations.

Validation lives here so that the XML API and the HTML forms reject the same
things with the same messages.  Names are case-insensitive (DALI 1.1 §3.1);
values are kept exactly as sent.
"""
from __future__ import annotations

import dataclasses
import math
import re

from . import timeutil
from .model import UPLOAD_MARKER, fits_xml, is_upload_value, valid_mime_type, valid_result_id

TYPES = ("string", "integer", "float", "boolean", "datetime", "enum", "file")
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})
SERVICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
# A parameter name is also a file name (uploads) and a placeholder in commands.
PARAM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
URL_VALUE = re.compile(r"^https?://[^\s]+$", re.IGNORECASE)

#: UWS job-control names: never service parameters (UWS 1.1 §2.1.11).
CONTROL_NAMES = frozenset({"PHASE", "RUNID", "EXECUTIONDURATION", "DESTRUCTION", "ACTION", "METHOD",
                           "PRIORITY", "STARTAFTER", "CALLBACK"})


class ParameterError(ValueError):
    """A request parameter is unknown, missing or malformed (HTTP 400)."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def _value_text(raw) -> str:
    """A default as the text a client would send (TOML may give a number or a boolean)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (str, int, float)):
        return str(raw)
    raise TypeError(f"must be a string, a number or a boolean, not {type(raw).__name__}")


def _field(default, **metadata):
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One declared parameter (a ``[[services.NAME.parameters]]`` table)."""
    name: str
    type: str = _field("string", choices=TYPES)
    required: bool = False
    default: str | None = _field(None, read=_value_text)
    description: str = ""
    minimum: float | None = _field(None, key="min")
    maximum: float | None = _field(None, key="max")
    max_length: int = _field(65536, min=1)
    choices: tuple[str, ...] = ()
    multiple: bool = False
    allow_options: bool = False    # a command may receive a value starting with "-"

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"parameter {self.name}: unknown type {self.type!r}")
        if not PARAM_NAME.fullmatch(self.name):
            raise ValueError(f"parameter name {self.name!r}: a letter, then letters, digits, "
                             "_, . or - (at most 64)")
        if (self.type == "enum") != bool(self.choices):
            raise ValueError(f"parameter {self.name}: choices are for enum parameters, "
                             "and an enum needs them")
        numeric = self.type in ("integer", "float")
        if not numeric and (self.minimum is not None or self.maximum is not None):
            raise ValueError(f"parameter {self.name}: min and max are for integer and float "
                             "parameters")
        if (numeric and self.minimum is not None and self.maximum is not None
                and self.minimum > self.maximum):
            raise ValueError(f"parameter {self.name}: min is above max")
        self._check_default()

    def _check_default(self):
        if self.default is None:
            return
        if self.required:
            raise ValueError(f"parameter {self.name}: a required parameter takes no default")
        try:
            self.check(self.default)
        except ParameterError as exc:
            raise ValueError(f"parameter {self.name}: default {self.default!r}: "
                             f"{exc.message}") from None

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    def check(self, text: str) -> str:
        """Validate one submitted value and return it unchanged."""
        if len(text) > self.max_length:
            raise ParameterError(self.name, f"longer than {self.max_length} characters")
        if not fits_xml(text):
            raise ParameterError(self.name, "contains a control character")
        self.convert(text)
        return text

    def convert(self, text: str):
        """The typed value of ``text``; ParameterError if it is not one."""
        kind = self.type
        if kind == "string":
            return text
        if kind == "integer":
            return self._in_range(_parse_int(self.name, text))
        if kind == "float":
            return self._in_range(_parse_float(self.name, text))
        if kind == "boolean":
            return _parse_bool(self.name, text)
        if kind == "datetime":
            try:
                return timeutil.parse_time(text)
            except ValueError as exc:
                raise ParameterError(self.name, str(exc)) from None
        if kind == "enum":
            if text not in self.choices:
                raise ParameterError(self.name, f"must be one of {', '.join(self.choices)}")
            return text
        # file: a URL kept by reference (uploads never come through here)
        if not URL_VALUE.match(text):
            raise ParameterError(self.name, "must be an uploaded file or an http(s) URL")
        return text

    def _in_range(self, number):
        if self.minimum is not None and number < self.minimum:
            raise ParameterError(self.name, f"must be at least {_num(self.minimum)}")
        if self.maximum is not None and number > self.maximum:
            raise ParameterError(self.name, f"must be at most {_num(self.maximum)}")
        return number


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ParameterError(name, f"not an integer: {text!r}") from None


def _parse_float(name: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ParameterError(name, f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ParameterError(name, f"not a finite number: {text!r}")
    return value


def _parse_bool(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ParameterError(name, f"not a boolean (true/false): {text!r}")


RUNNER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
PLACEHOLDER = re.compile(r"\{([A-Za-z][A-Za-z0-9_.-]*)\}")


@dataclasses.dataclass(frozen=True)
class Output:
    """A file a command runner writes (relative to its working directory)."""
    name: str
    file: str
    mime_type: str = ""
    optional: bool = False      # else a command that exits 0 without it ends in ERROR

    def __post_init__(self):
        if not valid_result_id(self.name):
            raise ValueError(f"output name {self.name!r}: no spaces, slashes or control characters")
        if not OUTPUT_FILE.fullmatch(self.file) or ".." in self.file.split("/"):
            raise ValueError(f"output file {self.file!r}: a relative path inside the job's "
                             "working directory, without spaces")
        if self.mime_type and not valid_mime_type(self.mime_type):
            raise ValueError(f"output {self.name}: MIME type {self.mime_type!r} is not "
                             "type/subtype[; parameters]")


MIB = 1 << 20
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Quota:
    """What one owner may hold in a service at once; 0 = no limit."""
    jobs: int = 0
    running: int = 0
    bytes: int = 0


OUTPUT_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
_SECONDS = {"min": 0, "max": 2**31 - 1}
_PRIORITY = {"min": -1000, "max": 1000}


@dataclasses.dataclass(frozen=True)
class Service:
    """One job list, mounted at ``/{name}`` (a ``[services.NAME]`` table)."""
    name: str = dataclasses.field(metadata={"skip": True})    # the table's key
    description: str = ""
    parameters: tuple[ParamSpec, ...] = ()
    runner: str | None = None          # "package.module:function", called in a child process
    command: tuple[str, ...] = ()      # or a command line; "{NAME}" is replaced by the value
    outputs: tuple[Output, ...] = ()   # files a command writes that become results
    retry: bool = False                # a lost worker's job queued again at once, unbounded
    anonymous: bool = True             # may unauthenticated callers create and list jobs
    # What one owner may hold in this service at once (0 = no limit); the anonymous
    # callers share one owner, with limits of their own.
    max_jobs_per_owner: int = _field(0, min=0)       # jobs kept (any phase but ARCHIVED)
    max_running_per_owner: int = _field(0, min=0)    # jobs EXECUTING; more wait QUEUED
    max_bytes_per_owner: int = _field(0, min=0)      # uploads, results and logs on disk
    anonymous_max_jobs: int = _field(10_000, min=0)
    # 0: a server whose callers are all anonymous uses all its slots; fair dispatch
    # still gives any identified owner the next free slot ahead of them.
    anonymous_max_running: int = _field(0, min=0)
    anonymous_max_bytes: int = _field(10 * GIB, min=0)
    # What one job may write: its working directory (results, tmp, fetched URLs),
    # and its stdout and stderr; past either it is stopped and ends in ERROR.
    max_result_bytes: int = _field(10 * GIB, min=1)
    max_log_bytes: int = _field(100 * MIB, min=1)
    execution_duration: int = _field(600, **_SECONDS)          # default (0 = unlimited)
    max_execution_duration: int = _field(3600, **_SECONDS)
    lifetime: int = _field(7 * 86400, **_SECONDS)    # default destruction = creation + lifetime
    max_lifetime: int = _field(30 * 86400, **_SECONDS)
    archive: bool = False              # at destruction: ARCHIVED instead of forgotten
    fetch_hosts: tuple[str, ...] = ()  # hosts a URL parameter may name though not public
    max_batch_jobs: int = _field(10_000, min=1, max=1_000_000)   # jobs one batch may create
    # PRIORITY an owner may give (higher runs first); administrators may give any.
    priority_min: int = _field(0, **_PRIORITY)
    priority_max: int = _field(0, **_PRIORITY)
    priority_default: int = _field(0, **_PRIORITY)
    # Transient failures (lost worker, uws.runner.Retryable, retry_exit_codes) run
    # again after retry_backoff seconds, doubled per attempt up to retry_backoff_max.
    max_attempts: int = _field(1, min=1, max=100)
    retry_backoff: float = _field(10.0, min=0, max=86400)
    retry_backoff_max: float = _field(600.0, min=0, max=86400)
    retry_exit_codes: tuple[int, ...] = ()   # command services: exit statuses 1..255
    # CALLBACK URLs (uws.callbacks): their hosts ("*.example.org", "*": public ones only);
    # none = no callbacks.  Deliveries are signed with the secret when there is one
    # (or UWS_CALLBACK_SECRET_<SERVICE>), and retried for a bounded time.
    callback_hosts: tuple[str, ...] = ()
    callback_secret: str = dataclasses.field(default="", repr=False)
    callback_retry_seconds: int = _field(3600, min=0, max=30 * 86400)
    callback_max_attempts: int = _field(10, min=1, max=1000)
    callback_backoff: float = _field(5.0, min=0.01, max=3600)   # first delay, then doubled
    callback_timeout: float = _field(10.0, min=0.1, max=300)   # connect, then read

    def __post_init__(self):
        if not SERVICE_NAME.match(self.name):
            raise ValueError(f"bad service name {self.name!r}")
        seen = set()
        for spec in self.parameters:
            key = spec.name.upper()
            if key in seen or key in CONTROL_NAMES:
                raise ValueError(f"parameter name {spec.name!r} is taken")
            seen.add(key)
            if spec.is_file and spec.multiple:
                raise ValueError(f"file parameter {spec.name} cannot be multiple")
        self._check_runner()
        self._check_queueing()

    def _check_queueing(self):
        if not self.priority_min <= self.priority_default <= self.priority_max:
            raise ValueError("priority_default must lie between priority_min and priority_max")
        if self.retry_exit_codes and not self.command:
            raise ValueError("retry_exit_codes are for command runners (a Python runner "
                             "raises uws.runner.Retryable)")
        if any(not 0 < code < 256 for code in self.retry_exit_codes):
            raise ValueError("retry_exit_codes: each between 1 and 255")

    def _check_runner(self):
        if bool(self.runner) == bool(self.command):
            raise ValueError("give either a runner or a command")
        if self.runner and not RUNNER.fullmatch(self.runner):
            raise ValueError(f"runner {self.runner!r} is not "
                             "'package.module:function'")
        if self.outputs and not self.command:
            raise ValueError("outputs are for command runners "
                             "(a Python runner declares results with ctx.add_result)")
        if self.command and (not self.command[0] or PLACEHOLDER.search(self.command[0])):
            raise ValueError("command: the program (its first word) must be fixed, "
                             "without placeholders")
        for arg in self.command:
            for name in PLACEHOLDER.findall(arg):
                self.spec(name)     # an unknown placeholder is a configuration error
        for spec in self.parameters:
            if spec.default is not None:
                try:
                    self.check_option(spec, spec.default)
                except ParameterError as exc:
                    raise ValueError(f"parameter {spec.name}: default "
                                     f"{spec.default!r}: {exc.message}") from None

    def quota(self, owner: str) -> Quota:
        """The limits of ``owner`` ("" = the anonymous callers, together)."""
        if owner:
            return Quota(self.max_jobs_per_owner, self.max_running_per_owner,
                          self.max_bytes_per_owner)
        return Quota(self.anonymous_max_jobs, self.anonymous_max_running,
                     self.anonymous_max_bytes)

    @property
    def placeholders(self) -> frozenset[str]:
        """The declared names of the parameters a command line receives."""
        return frozenset(self.spec(name).name for arg in self.command
                         for name in PLACEHOLDER.findall(arg))

    def check_option(self, spec: ParamSpec, text: str) -> None:
        """A value a command receives never starts with "-", where the program would
        read it as an option (``--to-command=...``), unless the parameter allows it."""
        if text.startswith("-") and not spec.allow_options and spec.name in self.placeholders:
            raise ParameterError(spec.name, "must not start with '-' (the command would "
                                 "read it as an option)")

    def command_line(self, values: dict[str, str]) -> list[str]:
        """The command with each {NAME} replaced by its value; no shell is involved."""
        def fill(match):
            return values.get(self.spec(match.group(1)).name, "")
        return [PLACEHOLDER.sub(fill, arg) for arg in self.command]

    def spec(self, name: str) -> ParamSpec:
        for spec in self.parameters:
            if spec.name.upper() == name.upper():
                return spec
        raise ParameterError(name, f"unknown parameter for service {self.name!r}")

    def clamp_duration(self, seconds: int) -> int:
        """What the service grants for a requested execution duration."""
        limit = self.max_execution_duration
        if limit and (seconds <= 0 or seconds > limit):
            return limit
        return max(seconds, 0)


@dataclasses.dataclass
class Value:
    """One validated parameter value of a request."""
    name: str                  # the declared (canonical) name
    value: str                 # the text, or the URL of a by-reference value
    upload: object = None      # an uploaded file part, opaque to this layer
    by_reference: bool = False # a URL standing for the value (file parameters)


def collect(service: Service, pairs, uploads: dict, *, creating: bool) -> list[Value]:
    """Validate a request's parameters against ``service``.

    ``pairs`` are (name, text) in request order; ``uploads`` maps multipart
    part names to file parts.  A file parameter is either a part of its own
    name, ``param:PART`` naming a part (UWS 1.1 §2.2.3.1.1), or an http(s) URL.
    With ``creating``, defaults fill in and required parameters are enforced.
    """
    values: list[Value] = []
    referenced: set[str] = set()
    for name, text in pairs:
        spec = service.spec(name)
        if spec.is_file and is_upload_value(text):
            part = text.removeprefix(UPLOAD_MARKER)
            if part not in uploads:
                raise ParameterError(spec.name, f"no uploaded part named {part!r}")
            referenced.add(part)
            values.append(Value(spec.name, "", uploads[part], True))
        else:
            service.check_option(spec, text)
            values.append(Value(spec.name, spec.check(text), by_reference=spec.is_file))
    for part, upload in uploads.items():
        if part in referenced:
            continue
        spec = service.spec(part)
        if not spec.is_file:
            raise ParameterError(spec.name, "expects a value, not an uploaded file")
        values.append(Value(spec.name, "", upload, True))
    _refuse_repeats(service, values)
    if creating:
        values.extend(_defaults(service, {v.name for v in values}))
    return values


def _refuse_repeats(service: Service, values: list[Value]) -> None:
    seen: set[str] = set()
    for v in values:
        if v.name in seen and not service.spec(v.name).multiple:
            raise ParameterError(v.name, "given more than once")
        seen.add(v.name)


def _defaults(service: Service, given: set[str]) -> list[Value]:
    added = []
    for spec in service.parameters:
        if spec.name in given:
            continue
        if spec.required:
            raise ParameterError(spec.name, "is required")
        if spec.default is not None:
            added.append(Value(spec.name, str(spec.default)))
    return added


def typed_values(specs, parameters) -> dict:
    """Typed values for a runner: {name: value}, a list for multi-valued names."""
    by_name = {spec.name: spec for spec in specs}
    out: dict = {}
    for p in parameters:
        spec = by_name[p.name]
        value = p.value if spec.is_file else spec.convert(p.value)
        if spec.multiple:
            out.setdefault(spec.name, []).append(value)
        else:
            out[spec.name] = value
    return out
