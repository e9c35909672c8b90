"""``uws jobs batch …`` and ``uws jobs events``: this package's extensions (batches,
job events) on the command line. They live under ``uws jobs`` because they are reached
from the same job list (``--url``, a service): its ``/batches`` and ``/events``."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from . import display
from .batches import BODY_TYPES, Batch
from .clibase import (
    JOB_ABORTED,
    JOB_ERROR,
    LOCAL_FILE,
    OK,
    Options,
    fail,
    handled,
    line,
    pass_options,
)
from .documents import to_dict
from .errors import Timeout

#: ``batch show --follow``'s exit code by the batch's final status, as ``wait``'s by phase
STATUS_CODES = {"completed": OK, "failed": JOB_ERROR, "partially failed": JOB_ERROR,
                "aborted": JOB_ABORTED}
FOLLOW_S = 1.0          # between two reads of a batch's progress


@click.group(name="batch")
def batch():
    """Batches: many jobs made by one request (this package's servers)."""


def _emit_batch(opts: Options, found: Batch) -> None:
    if opts.json:
        opts.emit(to_dict(found))
    else:
        display.batch(found)


@batch.command(name="create")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--run", is_flag=True, help="Queue every job at once.")
@click.option("--run-id", help="The batch's (and each job's) RUNID.")
@click.option("--callback", help="A URL the server POSTs the batch's report to at its end.")
@pass_options
@handled
def create_batch(opts: Options, file: Path, run, run_id, callback):
    """A batch of one job per row of FILE: CSV (a header row of parameter names) or JSON
    (a list of objects), by its suffix. Prints its id, status and URL."""
    if file.suffix.lower() not in BODY_TYPES:
        raise click.BadParameter(f"{file}: give a .csv or .json file", param_hint="FILE")
    try:
        with open(file, "rb"):
            pass
    except OSError as exc:
        fail(f"{file}: cannot read it: {exc.strerror or exc} (give a batch file)", LOCAL_FILE)
    made = opts.client.create_batch(file, run=run, run_id=run_id, callback=callback)
    opts.emit(to_dict(made), line(made.id, made.status, made.url))


@batch.command(name="show")
@click.argument("batch_id", metavar="BATCH")
@click.option("--follow", is_flag=True, help="Show its progress until every job has ended; "
              "the exit code says how (0 completed, 3 failed, 4 aborted).")
@click.option("--timeout", type=float, help="With --follow: give up after this many seconds.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@pass_options
@handled
def show_batch(opts: Options, batch_id, follow, timeout, progress):
    """A batch: its status, counts by phase, and each job with its error."""
    if not follow:
        _emit_batch(opts, opts.client.batch(batch_id))
        return
    final = _follow(opts, batch_id, timeout, progress)
    _emit_batch(opts, opts.client.batch(final))
    sys.exit(STATUS_CODES.get(final.status, OK))


def _follow(opts: Options, batch_id: str, timeout: float | None, progress) -> Batch:
    deadline = None if timeout is None else time.monotonic() + timeout
    show_bar = (not opts.json and sys.stderr.isatty()) if progress is None else progress
    current = opts.client.batch(batch_id, all_jobs=False)
    if current.status == "pending":
        click.echo(line(f"uws jobs: batch {current.id} is pending: its jobs start only once "
                        f"run (uws jobs batch run {current.id})"), err=True)
    with display.BatchProgress(enabled=show_bar) as bar:
        while True:
            bar.update(current)
            if current.is_final:
                return current
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"batch {current.id} still {current.status} after {timeout:g} s")
            pause = FOLLOW_S if deadline is None else min(FOLLOW_S, deadline - time.monotonic())
            time.sleep(max(pause, 0))
            current = opts.client.batch(current, all_jobs=False)


@batch.command(name="list")
@pass_options
@handled
def list_batches(opts: Options):
    """Your batches (an administrator's: everyone's), newest first."""
    refs = list(opts.client.batches())
    if opts.json:
        opts.emit([to_dict(r) for r in refs])
    else:
        display.batch_list(refs)


def _control(name: str, doc: str, act):
    @batch.command(name=name, help=doc)
    @click.argument("batch_id", metavar="BATCH")
    @pass_options
    @handled
    def command(opts: Options, batch_id):
        found = act(opts.client, batch_id)
        opts.emit(to_dict(found), line(found.id, found.status, found.url))
    return command


_control("run", "Run the batch's PENDING and HELD jobs.", lambda c, b: c.run_batch(b))
_control("abort", "Abort the batch's unfinished jobs.", lambda c, b: c.abort_batch(b))
_control("repeat", "A new batch repeating the batch's ERROR and ABORTED jobs; prints it.",
         lambda c, b: c.repeat_batch(b))


@batch.command(name="delete")
@click.argument("batch_id", metavar="BATCH")
@pass_options
@handled
def delete_batch(opts: Options, batch_id):
    """Delete the batch and all its jobs."""
    url = opts.client.batch_url(batch_id)
    opts.client.delete_batch(batch_id)
    opts.emit({"deleted": url}, line("deleted", batch_id))


@click.command(name="events")
@click.option("--after", type=click.IntRange(min=0), help="Only events after this event id.")
@click.option("--since", help="Only events at or after this time (ISO 8601).")
@click.option("--owner", help="An administrator: only this owner's events.")
@click.option("--follow", is_flag=True,
              help="Go on printing events as they happen, until interrupted (Ctrl-C).")
@pass_options
@handled
def events(opts: Options, after, since, owner, follow):
    """Your jobs' events (creations, phase changes, progress, deletions), oldest first:
    ``ID TIME JOB OLD -> NEW``. With --follow, from now (or --after, --since) on."""
    client = opts.client
    if not follow:
        found = list(client.all_events(after=after, since=since, owner=owner))
        if opts.json:
            opts.emit([to_dict(e) for e in found])
        else:
            for e in found:
                click.echo(display.event_line(e))
        return
    try:
        for e in client.follow_events(after=after, since=since, owner=owner):
            # one JSON object per line with --json: a stream has no end to close a list
            click.echo(json.dumps(to_dict(e)) if opts.json else display.event_line(e))
            sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit(OK)        # the way a follow ends
