"""``uws jobs …``: the client on the command line, for any UWS server's job list.

Exit codes (README.rst, *Command-line client*): 0 success (a job COMPLETED), 2 bad usage,
3 the job ended in ERROR, 4 ABORTED, 5 the wait timed out, 6 the server answered an HTTP
error, 7 no answer (connection), 8 an answer that is not UWS, 9 a local file.

Whatever the server said is printed without terminal controls (display.clean).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import __version__
from . import display
from .api import Value, file_name, shortened
from .clibase import (
    CA_FILE,
    CA_HELP,
    JSON_OPTION,
    LOCAL_FILE,
    PHASE_CODES,
    TIMEOUT_OPTION,
    Options,
    fail,
    handled,
    line,
    pass_options,
)
from .clibatch import batch, events
from .documents import Job, Result, to_dict


@click.group(name="jobs", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="UWS_URL", help="The job list's URL, e.g. http://host:8700/sleep [UWS_URL].")
@click.option("--user", envvar="UWS_USER", help="User name for HTTP Basic [UWS_USER].")
@click.option("--password", envvar="UWS_PASSWORD",
              help="Password for HTTP Basic [UWS_PASSWORD]; asked for when missing.")
@click.option("--token", envvar="UWS_TOKEN", help="Bearer token [UWS_TOKEN].")
@JSON_OPTION
@TIMEOUT_OPTION
@click.option("--ca-bundle", type=CA_FILE, envvar="UWS_CA_BUNDLE", help=f"{CA_HELP} [UWS_CA_BUNDLE].")
@click.version_option(__version__, "--version", prog_name="uws", message="%(prog)s %(version)s")
@click.pass_context
def jobs(ctx, url, user, password, token, as_json, http_timeout, ca_bundle):
    """Drive the jobs of any UWS 1.1 server."""
    ctx.obj = Options(url, user, password, token, as_json, http_timeout or 30, ca_bundle)


@jobs.command(name="list")
@click.option("--phase", "phases", multiple=True, help="Only jobs in this phase (repeatable).")
@click.option("--after", help="Only jobs created after this time (ISO 8601, UTC).")
@click.option("--last", type=click.IntRange(min=0), help="Only the LAST most recent jobs.")
@click.option("--page-size", type=click.IntRange(min=1),
              help="Ask for pages of this many jobs (this package's server: extend=N).")
@pass_options
@handled
def list_jobs(opts: Options, phases, after, last, page_size):
    """The jobs, newest first as the server sends them."""
    refs = list(opts.client.jobs(phases=phases, after=after, last=last, page_size=page_size))
    if opts.json:
        opts.emit([to_dict(r) for r in refs])
    else:
        display.job_list(refs)


@jobs.command()
@click.argument("job")
@pass_options
@handled
def show(opts: Options, job):
    """A job's phase, times, parameters, results and error."""
    found = opts.client.get(job)
    if opts.json:
        opts.emit(to_dict(found))
    else:
        display.job(found)


def _parameters(pairs) -> dict[str, list[Value]]:
    parameters: dict[str, list[Value]] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE")
        parameters.setdefault(name, []).append(value)
    return parameters


@jobs.command()
@click.argument("parameters", nargs=-1)
@click.option("--file", "files", multiple=True, metavar="NAME=PATH", help="Upload PATH as parameter NAME.")
@click.option("--run", is_flag=True, help="Start the job at once.")
@click.option("--run-id", help="The job's RUNID.")
@click.option("--execution-duration", type=click.IntRange(min=0), help="Seconds the job may run.")
@click.option("--destruction", help="When the server may destroy the job (ISO 8601).")
@click.option("--wait", "wait_too", is_flag=True, help="With --run: wait for the job, exit by its phase.")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@pass_options
@handled
def create(opts: Options, parameters, files, run, run_id, execution_duration, destruction,
           wait_too, timeout, progress):
    """Create a job from NAME=VALUE parameters (and uploads); prints its id."""
    uploads = {name: Path(str(paths[0])) for name, paths in _parameters(files).items()}
    for name, path in uploads.items():
        _readable(name, path)
    created = opts.client.create(_parameters(parameters), files=uploads, run=run, run_id=run_id,
                                 execution_duration=execution_duration, destruction=destruction)
    if wait_too and run:
        _wait(opts, created, timeout, progress)
    opts.emit(to_dict(created), line(created.id, created.phase, created.url))


def _readable(name: str, path: Path) -> None:
    """An upload that can be read, checked before anything is sent; else exit 9 (a
    local file) with what is wrong with it: missing, a directory, not readable."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        fail(f"--file {name}={path}: cannot read it: {exc.strerror or exc} "
             "(give a file to upload)", LOCAL_FILE)


@jobs.command()
@click.argument("job")
@click.option("--wait", "wait_too", is_flag=True, help="Wait for the job, exit by its phase.")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@pass_options
@handled
def run(opts: Options, job, wait_too, timeout, progress):
    """Start a job (PHASE=RUN)."""
    started = opts.client.run(job)
    if wait_too:
        _wait(opts, started, timeout, progress)
    opts.emit(to_dict(started), line(started.id, started.phase))


@jobs.command()
@click.argument("job")
@click.option("--timeout", type=float, help="Give up after this many seconds (exit code 5).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@pass_options
@handled
def wait(opts: Options, job, timeout, progress):
    """Wait until the job finishes; the exit code says how (0 COMPLETED, 3 ERROR, 4 ABORTED)."""
    _wait(opts, opts.client.get(job), timeout, progress)


def _wait(opts: Options, job: Job, timeout, progress) -> None:
    show_bar = (not opts.json and sys.stderr.isatty()) if progress is None else progress
    if job.phase in ("PENDING", "HELD"):
        click.echo(line(f"uws jobs: job {job.id} is {job.phase}: it starts only once run "
                        f"(uws jobs run {job.id})"), err=True)
    with display.WaitProgress(enabled=show_bar) as bar:
        done = opts.client.wait(job, timeout=timeout, block=1 if show_bar else 30, on_update=bar.update)
    text = line(done.id, done.phase)
    if done.error_summary is not None:
        text += ": " + line(done.error_summary.message)
    opts.emit(to_dict(done), text)
    sys.exit(PHASE_CODES[done.phase])


@jobs.command()
@click.argument("job")
@pass_options
@handled
def abort(opts: Options, job):
    """Abort a job (PHASE=ABORT)."""
    aborted = opts.client.abort(job)
    opts.emit(to_dict(aborted), line(aborted.id, aborted.phase))


@jobs.command()
@click.argument("job")
@pass_options
@handled
def delete(opts: Options, job):
    """Delete a job."""
    opts.client.delete(job)
    opts.emit({"deleted": opts.client.job_url(job)}, line("deleted", job))


@jobs.command()
@click.argument("job")
@click.argument("result_id", required=False)
@click.option("--output", "-o", type=click.Path(path_type=Path),
              help="Download: a file (or a directory) for RESULT_ID, else a directory for "
                   "every result.")
@click.option("--resume", is_flag=True,
              help="Complete files left by an earlier download of these results that broke off.")
@pass_options
@handled
def results(opts: Options, job, result_id, output, resume):
    """List a job's results, or download them with --output."""
    found = [opts.client.result(job, result_id)] if result_id else list(opts.client.results(job))
    if output is None:
        if opts.json:
            opts.emit([to_dict(r) for r in found])
        else:
            display.results(found)
        return
    if result_id:
        named = output.is_dir()
        target = output / file_name(found[0]) if named else output
        saved = [opts.client.download(found[0], target, resume)]
    else:
        named = True
        saved = opts.client.save_results(found, output, resume)
    renamed = [_renamed(r, p) if named else None for r, p in zip(found, saved)]
    for r, p, how in zip(found, saved, renamed):
        if how is not None:
            click.echo(line(f"uws jobs: result {_short(r.id)!r} saved as {p.name}: its id {how} "
                            "to a safe file name"), err=True)
    opts.emit([{"id": r.id, "path": str(p), "bytes": p.stat().st_size, "renamed": how}
               for r, p, how in zip(found, saved, renamed)],
              "\n".join(line(p) for p in saved))


def _renamed(result: Result, path: Path) -> str | None:
    """How a result's file name differs from its id: "shortened" (too long for a
    file name), "changed" (characters replaced, or -2, -3... added), or None."""
    if path.name == result.id:
        return None
    return "shortened" if shortened(result) else "changed"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


jobs.add_command(batch)
jobs.add_command(events)
