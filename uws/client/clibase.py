"""What every ``uws jobs`` command shares: the group's options and the client made from
them, the exit codes (README.rst, *Command-line client*), one line on stderr for each
failure, and output that never carries the server's terminal controls."""
from __future__ import annotations

import functools
import json
import sys

import click

from . import display
from .api import Client
from .errors import ConnectionFailed, HTTPError, ProtocolError, Timeout, UWSError

OK, USAGE, JOB_ERROR, JOB_ABORTED, WAIT_TIMEOUT, HTTP_ERROR, CONNECTION, PROTOCOL = 0, 2, 3, 4, 5, 6, 7, 8
LOCAL_FILE = 9
PHASE_CODES = {"COMPLETED": OK, "ARCHIVED": OK, "ERROR": JOB_ERROR, "ABORTED": JOB_ABORTED}


class Options:
    """The group's options, and the client made from them on first use."""

    def __init__(self, url, user, password, token, as_json, http_timeout, ca_bundle):
        self.url, self.user, self.password, self.token = url, user, password, token
        self.json = as_json
        self.http_timeout, self.ca_bundle = http_timeout, ca_bundle
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            if not self.url:
                raise click.UsageError("no server: give --url (or set UWS_URL) to a job list's URL")
            password = self.password
            if self.user and password is None:
                password = click.prompt(f"password for {self.user}", hide_input=True, err=True)
            try:
                self._client = Client(self.url, user=self.user, password=password, token=self.token,
                                      timeout=self.http_timeout, ca_bundle=self.ca_bundle)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--url") from None
        return self._client

    def emit(self, data, text: str | None = None) -> None:
        """JSON for scripts (json.dumps escapes control characters), else ``text`` for
        people: lines of ``line()``."""
        if self.json:
            click.echo(json.dumps(data, indent=2))
        elif text is not None:
            click.echo(text)


def line(*parts) -> str:
    """One line of output, of parts that may come from the server."""
    return " ".join(display.clean(str(p)) for p in parts)


def handled(command):
    """UWS failures as one line on stderr and their exit code, never a traceback."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except Timeout as exc:
            fail(str(exc), WAIT_TIMEOUT)
        except HTTPError as exc:
            fail(str(exc), HTTP_ERROR)
        except ConnectionFailed as exc:
            fail(str(exc), CONNECTION)
        except ProtocolError as exc:
            fail(f"not a UWS answer: {exc}", PROTOCOL)
        except UWSError as exc:
            fail(str(exc), PROTOCOL)
        except OSError as exc:      # an --output or --file that cannot be written or read
            fail(str(exc), LOCAL_FILE)
    return wrapper


def fail(message: str, code: int):
    click.echo(line("uws jobs:", message), err=True)
    sys.exit(code)


JSON_OPTION = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON for scripts instead of tables.")
TIMEOUT_OPTION = click.option(
    "--http-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
    help="Seconds to wait for a connection, and for each whole answer of the server [30].")
CA_HELP = "Certificate authorities (a PEM file) to check https servers against"
CA_FILE = click.Path(exists=True, dir_okay=False)


def pass_options(command):
    """Hand a subcommand the group's options; it takes the ones that are not about the
    server (``--json``, ``--http-timeout``, ``--ca-bundle``) where people put them
    (``uws jobs show ID --json``) as well as before the subcommand."""
    @JSON_OPTION
    @TIMEOUT_OPTION
    @click.option("--ca-bundle", type=CA_FILE, help=f"{CA_HELP}.")    # the group reads the variable
    @click.pass_obj
    @functools.wraps(command)
    def wrapper(opts: Options, *args, as_json: bool = False, http_timeout=None, ca_bundle=None,
                **kwargs):
        opts.json = opts.json or as_json
        opts.http_timeout = http_timeout or opts.http_timeout
        opts.ca_bundle = ca_bundle or opts.ca_bundle
        return command(opts, *args, **kwargs)
    return wrapper
