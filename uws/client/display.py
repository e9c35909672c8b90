"""What ``uws jobs`` shows people: rich tables, and a progress bar while waiting.

Server text is shown as text, never read as rich markup, and without the control
characters (escape sequences, BEL…) that would drive the terminal.
"""
from __future__ import annotations

import datetime as dt
import re

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .batches import Batch, BatchRef
from .documents import Job, JobRef, Result
from .events import Event

# ESC sequences whole (CSI, OSC up to BEL or ST, two-character ones), then any other C0
# or C1 control but newline and tab, and the bidirectional overrides that reorder text
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -~])")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str, newlines: bool = False) -> str:
    """``text`` without terminal controls; newlines (and tabs) become spaces unless kept."""
    text = _CONTROL.sub("", _ESCAPE.sub("", text)).replace("\t", " ")
    return text if newlines else text.replace("\n", " ")


def _text(value: str | None, newlines: bool = False) -> Text:
    return Text(clean(value or "", newlines))


def _console() -> Console:
    console = Console(soft_wrap=True)
    if not console.is_terminal:     # a pipe or a file: no folding at 80 columns
        console.width = max(console.width, 200)
    return console


def _table(*columns: str, show_header: bool = True) -> Table:
    """Long ids and URLs fold onto more lines rather than being cut: people copy them."""
    table = Table(show_header=show_header)
    for name in columns:
        table.add_column(name, overflow="fold")
    return table


def when(value: dt.datetime | None) -> str:
    """A time in UTC to the second, as people read it (``--json`` keeps the server's
    precision)."""
    if value is None:
        return ""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_when = when


def job_list(refs: list[JobRef]) -> None:
    table = _table("Job", "Phase", "Run ID", "Owner", "Created")
    for r in refs:
        table.add_row(_text(r.id), _text(r.phase), _text(r.run_id), _text(r.owner_id),
                      _when(r.creation_time))
    _console().print(table)


def job(found: Job) -> None:
    table = _table("Field", "Value", show_header=False)
    for name, value in (("job", found.id), ("url", found.url), ("phase", found.phase),
                        ("run ID", found.run_id), ("owner", found.owner_id),
                        ("created", _when(found.creation_time)), ("started", _when(found.start_time)),
                        ("ended", _when(found.end_time)),
                        ("execution duration", f"{found.execution_duration} s"
                         if found.execution_duration is not None else None),
                        ("destruction", _when(found.destruction)),
                        ("progress", f"{found.progress:g} %" if found.progress is not None else None)):
        if value:
            table.add_row(name, _text(str(value)))
    for p in found.parameters:
        table.add_row(_text(f"parameter {p.id}"), _text(p.value, newlines=True))
    for r in found.results:
        table.add_row(_text(f"result {r.id}"), _text(r.href))
    if found.error_summary is not None:
        summary = found.error_summary
        table.add_row("error", _text(f"{summary.type}: {summary.message}", newlines=True))
    _console().print(table)


def results(found: list[Result]) -> None:
    table = _table("Result", "Type", "Size", "URL")
    for r in found:
        table.add_row(_text(r.id), _text(r.mime_type), "" if r.size is None else str(r.size), _text(r.href))
    _console().print(table)


def batch(found: Batch) -> None:
    table = _table("Field", "Value", show_header=False)
    counts = ", ".join(f"{phase} {n}" for phase, n in found.phases.items() if n)
    for name, value in (("batch", found.id), ("url", found.url), ("status", found.status),
                        ("complete", f"{found.percent_complete:g} %"),
                        ("jobs", f"{found.job_count}" + (f" ({counts})" if counts else "")),
                        ("run ID", found.run_id), ("owner", found.owner_id),
                        ("created", when(found.creation_time))):
        if value:
            table.add_row(name, _text(str(value)))
    _console().print(table)
    if found.jobs:
        jobs = _table("Job", "Phase", "Error")
        for j in found.jobs:
            jobs.add_row(_text(j.id), _text(j.phase), _text(j.error))
        _console().print(jobs)


def batch_list(refs: list[BatchRef]) -> None:
    table = _table("Batch", "Jobs", "Run ID", "Owner", "Created")
    for r in refs:
        table.add_row(_text(r.id), str(r.job_count), _text(r.run_id), _text(r.owner_id),
                      when(r.creation_time))
    _console().print(table)


def event_line(e: Event) -> str:
    """``ID TIME JOB OLD -> NEW`` (``-`` before a creation and after a deletion), and
    the percent of a progress report."""
    text = f"{e.id} {when(e.time)} {e.job_id} {e.old_phase or '-'} -> {e.new_phase or '-'}"
    if e.progress is not None:
        text += f" {e.progress:.0f} %"
    return clean(text)


class BatchProgress:
    """A bar on stderr filling with the batch's percent complete."""

    def __init__(self, enabled: bool):
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                 TaskProgressColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                                 disable=not enabled)
        self.task: TaskID | None = None

    def __enter__(self) -> BatchProgress:
        self.progress.start()
        self.task = self.progress.add_task("batch", total=100)
        return self

    def update(self, current: Batch) -> None:
        assert self.task is not None
        self.progress.update(self.task, description=clean(f"{current.id} {current.status}"),
                             completed=current.percent_complete)

    def __exit__(self, *exc) -> None:
        self.progress.stop()


class WaitProgress:
    """A bar on stderr: the percent from jobInfo when the server reports one, else a
    pulse with the time elapsed."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                 TaskProgressColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                                 disable=not enabled)
        self.task: TaskID | None = None

    def __enter__(self) -> WaitProgress:
        self.progress.start()
        self.task = self.progress.add_task("waiting", total=None)
        return self

    def update(self, current: Job) -> None:
        assert self.task is not None
        label = clean(f"{current.id} {current.phase}")
        if current.progress is not None:
            self.progress.update(self.task, description=label, total=100, completed=current.progress)
        elif current.phase == "COMPLETED":
            self.progress.update(self.task, description=label, total=100, completed=100)
        else:
            self.progress.update(self.task, description=label)

    def __exit__(self, *exc) -> None:
        self.progress.stop()
