"""Services (job lists): what a ``[services.NAME]`` table declares, and the checks
of a request's values against the service's parameters and limits (the
declarations themselves: :mod:`uws.domain.parameters`)."""
from __future__ import annotations

import dataclasses
import re

from . import interpreters
from .model import UPLOAD_MARKER, is_upload_value, valid_mime_type, valid_result_id
from .parameters import ParameterError, ParamSpec, declared

SERVICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")

#: UWS job-control names: never service parameters (UWS 1.1 §2.1.11).
CONTROL_NAMES = frozenset({"PHASE", "RUNID", "EXECUTIONDURATION", "DESTRUCTION", "ACTION", "METHOD",
                           "PRIORITY", "STARTAFTER", "CALLBACK"})


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
    max_jobs_per_owner: int = declared(0, min=0)       # jobs kept (any phase but ARCHIVED)
    max_running_per_owner: int = declared(0, min=0)    # jobs EXECUTING; more wait QUEUED
    max_bytes_per_owner: int = declared(0, min=0)      # uploads, results and logs on disk
    anonymous_max_jobs: int = declared(10_000, min=0)
    # 0: a server whose callers are all anonymous uses all its slots; fair dispatch
    # still gives any identified owner the next free slot ahead of them.
    anonymous_max_running: int = declared(0, min=0)
    anonymous_max_bytes: int = declared(10 * GIB, min=0)
    # What one job may write: its working directory (results, tmp, fetched URLs),
    # and its stdout and stderr; past either it is stopped and ends in ERROR.
    max_result_bytes: int = declared(10 * GIB, min=1)
    max_log_bytes: int = declared(100 * MIB, min=1)
    # files and folders in that directory: each is an inode, a step of every measurement
    # and of the deletion (a million empty ones weigh 0 bytes and take seconds to remove)
    max_result_files: int = declared(100_000, min=1, max=100_000_000)
    # results one job may report: each is a row, and a line of every job document
    max_results: int = declared(10_000, min=1, max=1_000_000)
    execution_duration: int = declared(600, **_SECONDS)          # default (0 = unlimited)
    max_execution_duration: int = declared(3600, **_SECONDS)
    lifetime: int = declared(7 * 86400, **_SECONDS)    # default destruction = creation + lifetime
    max_lifetime: int = declared(30 * 86400, **_SECONDS)
    archive: bool = False              # at destruction: ARCHIVED instead of forgotten
    fetch_hosts: tuple[str, ...] = ()  # hosts a URL parameter may name though not public
    max_batch_jobs: int = declared(10_000, min=1, max=1_000_000)   # jobs one batch may create
    # PRIORITY an owner may give (higher runs first); administrators may give any.
    priority_min: int = declared(0, **_PRIORITY)
    priority_max: int = declared(0, **_PRIORITY)
    priority_default: int = declared(0, **_PRIORITY)
    # Transient failures (lost worker, uws.runner.Retryable, retry_exit_codes) run
    # again after retry_backoff seconds, doubled per attempt up to retry_backoff_max.
    max_attempts: int = declared(1, min=1, max=100)
    retry_backoff: float = declared(10.0, min=0, max=86400)
    retry_backoff_max: float = declared(600.0, min=0, max=86400)
    retry_exit_codes: tuple[int, ...] = ()   # command services: exit statuses 1..255
    # CALLBACK URLs (uws.usecases.callbacks): their hosts ("*.example.org", "*": public ones only);
    # none = no callbacks.  Deliveries are signed with the secret when there is one
    # (or UWS_CALLBACK_SECRET_<SERVICE>), and retried for a bounded time.
    callback_hosts: tuple[str, ...] = ()
    callback_secret: str = dataclasses.field(default="", repr=False)
    callback_retry_seconds: int = declared(3600, min=0, max=30 * 86400)
    callback_max_attempts: int = declared(10, min=1, max=1000)
    callback_backoff: float = declared(5.0, min=0.01, max=3600)   # first delay, then doubled
    callback_timeout: float = declared(10.0, min=0.1, max=300)   # connect, then read

    def __post_init__(self):
        if not SERVICE_NAME.fullmatch(self.name):
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
        declared = {spec.name.upper() for spec in self.parameters}
        for arg in self.command:
            for name in PLACEHOLDER.findall(arg):
                if name.upper() not in declared:
                    raise ValueError(f"command: {{{name}}} in {arg!r} names no parameter of "
                                     f"the service: declare it ([[services.{self.name}."
                                     f"parameters]] name = {name!r}) or take it out of "
                                     "command")
                if self.spec(name).multiple and not PLACEHOLDER.fullmatch(arg):
                    raise ValueError(f"command: {{{name}}} may have several values: it "
                                     "must be a whole argument (one argument per value)")
        self._check_no_code_placeholder()
        for spec in self.parameters:
            if spec.default is not None:
                try:
                    self.check_option(spec, spec.default)
                except ParameterError as exc:
                    raise ValueError(f"parameter {spec.name}: default "
                                     f"{spec.default!r}: {exc.message}") from None

    def _check_no_code_placeholder(self):
        """``["sh", "-c", "echo {A}"]`` would run a value as shell code: an
        interpreter's code argument must not hold a placeholder (pass values as
        arguments after it: ``["sh", "-c", 'echo "$1"', "sh", "{A}"]``)."""
        for code in interpreters.code_arguments(self.command):
            if PLACEHOLDER.search(code):
                raise ValueError(f"command: {code!r} is code for {self.command[0]}: a "
                                 "placeholder in it would run a value as code; pass the "
                                 "value as an argument after it instead")

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

    def command_line(self, values: dict[str, list[str]]) -> list[str]:
        """The command with each {NAME} replaced by its value (``values``: each name's
        values, in order); a multiple parameter's placeholder, a whole argument, gives
        one argument per value.  No shell is involved."""
        def fill(match):
            return (values.get(self.spec(match.group(1)).name) or [""])[0]
        line: list[str] = []
        for arg in self.command:
            whole = PLACEHOLDER.fullmatch(arg)
            if whole and self.spec(whole.group(1)).multiple:
                line.extend(values.get(self.spec(whole.group(1)).name, []))
            else:
                line.append(PLACEHOLDER.sub(fill, arg))
        return line

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
            added.append(Value(spec.name, spec.check(spec.default)))
    return added
