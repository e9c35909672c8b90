"""Log lines an operator can use, the same under ``uws serve``, gunicorn and ``uws worker``.

:func:`configure` is called by the CLI and by the app factory: it installs one handler
on the root logger, once (a second call only changes its format), and only when the
root logger has no handler yet, so a process whose logging is configured already
(gunicorn's ``--log-config``, a test harness) keeps its own.  ``log_format = "json"``
writes one JSON object a line, with fixed keys, for log shippers.

The request id of the request being served (``X-Request-ID``) is in a context
variable, set by the web layer, and goes into every line logged while serving it.
"""
from __future__ import annotations

import contextvars
import json
import logging
import time

#: The request id of the request this thread serves ("" outside requests).
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("uws_request_id", default="")

#: Fields a line may carry (``extra=``), in the order the text format shows them.
FIELDS = ("client", "method", "path", "status", "duration_ms", "job_id", "service", "owner",
          "from_phase", "to_phase", "worker", "error")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RequestIdFilter(logging.Filter):
    """Puts the current request id into each record (``record.request_id``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = request_id.get()
        return True


class TextFormatter(logging.Formatter):
    """The classic line, then `` [request-id]`` when there is one."""

    def __init__(self):
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", "")
        return f"{line} [{rid}]" if rid else line


class JsonFormatter(logging.Formatter):
    """One object a line: time (UTC, ISO 8601), level, logger, message, request_id,
    then the fields of :data:`FIELDS` the record carries (null otherwise), and the
    traceback (``exception``) if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                    + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "") or None,
        }
        for name in FIELDS:
            line[name] = getattr(record, name, None)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


def handler(fmt: str, stream=None) -> logging.Handler:
    """A handler writing ``fmt`` lines (to stderr), request ids included."""
    made = logging.StreamHandler(stream)
    made.setFormatter(formatter(fmt))
    made.addFilter(RequestIdFilter())
    made.uws_handler = True    # type: ignore[attr-defined]   # found again by configure
    return made


def configure(fmt: str = "text") -> None:
    """The process's log lines in ``fmt`` ("text" or "json"), INFO and up for uws."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "uws_handler", False)]
    if ours:
        for made in ours:
            made.setFormatter(formatter(fmt))
    elif not root.handlers:
        root.addHandler(handler(fmt))
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
    uws = logging.getLogger("uws")
    if uws.level == logging.NOTSET:
        uws.setLevel(logging.INFO)
