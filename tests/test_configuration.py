"""A configuration that cannot work stops the server at start: one line naming the
file, the key and the problem, exit status 2, and nothing started."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest

from uws.config.settings import ConfigError, from_dict
from uws.web.app import create_app

from uwshelp import UWS_COMMAND

SLEEP = '[services.s]\nrunner = "uws.demo:sleep"\n'

MISTAKES = [
    # (the file, the key the message must name, words of the problem)
    ('[services.wc]\ncommand = "wc -l {F}"\n[[services.wc.parameters]]\nname = "F"\n',
     "services.wc.command", "must be an array"),
    ('[services.x]\ndescription = "neither runner nor command"\n',
     "services.x", "runner or a command"),
    ('[services.x]\nrunner = "nosuch:fn"\n', "services.x.runner", "No module named 'nosuch'"),
    ('[services.x]\nrunner = "uws.demo:nosuch"\n', "services.x.runner", "no function 'nosuch'"),
    (SLEEP + '[[services.s.parameters]]\nname = "N"\ntype = "integer"\ndefault = "abc"\n',
     "services.s.parameters[0]", "default 'abc': not an integer"),
    (SLEEP + "execution_duration = -5\n", "services.s.execution_duration", "at least 0"),
    (SLEEP + 'max_execution_duration = "3600"\n', "services.s.max_execution_duration",
     "must be a whole number, not a string"),
    (SLEEP + "execution_duration = 7200\n", "services.s.execution_duration",
     "beyond max_execution_duration (3600)"),
    ("[sever]\nport = 1\n", "[sever]", "unknown table"),
    ("[executor]\nslot = 3\n", "executor.slot", "unknown key"),
    ('[executor]\nkind = "lokal"\n', "executor.kind", "'lokal' is not one of local, none"),
    (SLEEP + "retries = 3\n", "services.s.retries", "unknown key"),
    (SLEEP + '[[services.s.parameters]]\nname = "N"\nvalues = [1, 2]\n',
     "services.s.parameters[0].values", "unknown key"),
    (SLEEP + '[services.s.parameters]\nname = "N"\n', "services.s.parameters",
     "must be an array of tables"),
    ('[services.x]\ncommand = ["no-such-program-here"]\n', "services.x.command",
     "no such executable"),
    ('[server]\nport = "abc"\n', "server.port", "must be a whole number"),
    ('[auth]\nmodes = ["basic"]\n[auth.users]\nalice = "plain password"\n', "auth.users",
     "not a werkzeug password hash"),
    ("[server]\nmax_upload_bytes = 10000000\nmax_buffered_bytes = 5000000\n",
     "server.max_buffered_bytes", "under the largest request body"),
    (SLEEP + "max_result_bytes = 0\n", "services.s.max_result_bytes", "at least 1"),
    ('[services.x]\ncommand = ["sh", "-c", "echo {A} > out.txt"]\n'
     '[[services.x.parameters]]\nname = "A"\n', "services.x", "would run a value as code"),
    ('[services.x]\ncommand = ["/usr/bin/python3", "-c", "print(\'{A}\')"]\n'
     '[[services.x.parameters]]\nname = "A"\n', "services.x", "would run a value as code"),
    ('[services.x]\ncommand = ["echo", "x{M}y"]\n[[services.x.parameters]]\nname = "M"\n'
     'multiple = true\n', "services.x", "must be a whole argument"),
    ('[services.x]\ncommand = ["echo", "{A}", "--b={B}"]\n[[services.x.parameters]]\nname = "A"\n',
     "services.x", "command: {B} in '--b={B}' names no parameter of the service: declare it "
     "([[services.x.parameters]] name = 'B') or take it out of command"),
    ("this is not toml", "not valid TOML", "line 1"),
]


def serve(*args, env=None, timeout=60):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
    return subprocess.run([UWS_COMMAND, "serve", *args], capture_output=True, text=True,
                          timeout=timeout, env={**clean, **(env or {})})


@pytest.mark.parametrize("toml, key, problem", MISTAKES)
def test_a_configuration_mistake_stops_uws_serve_with_one_line_and_status_2(tmp_path, toml,
                                                                               key, problem):
    path = tmp_path / "uws.toml"
    path.write_text(toml)
    done = serve("--config", str(path), "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert str(path) in line and key in line and problem in line, line
    assert not (tmp_path / "data").exists()     # refused before anything started


@pytest.mark.parametrize("toml, key, problem", MISTAKES[:-1])
def test_create_app_refuses_the_same_mistakes(tmp_path, toml, key, problem):
    import tomllib
    with pytest.raises(ConfigError) as refused:
        create_app(tomllib.loads(toml))
    assert key in str(refused.value) and problem in str(refused.value)


def test_an_environment_variable_of_the_wrong_type_is_named(tmp_path):
    done = serve("--data-dir", str(tmp_path / "data"), env={"UWS_PORT": "eighty"})
    assert done.returncode == 2
    assert "UWS_PORT" in done.stderr and "not a whole number: 'eighty'" in done.stderr


def test_a_port_in_use_is_one_line_and_exit_status_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--port", str(port), "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}" in line and "in use" in line
    assert not (tmp_path / "data").exists()     # the other server's data was never touched


def test_an_unreachable_database_is_one_line_and_exit_status_2(tmp_path):
    path = tmp_path / "uws.toml"
    path.write_text('[server]\ndatabase_url = "postgresql+psycopg://nobody@127.0.0.1:1/x"\n')
    done = serve("--config", str(path), "--port", "0", "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("uws: cannot start:") and "127.0.0.1" in line


def test_postgresql_without_its_driver_says_which_extra_to_install(monkeypatch):
    import sys

    from uws.store.engine import make_engine
    monkeypatch.setitem(sys.modules, "psycopg", None)      # as if it were not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'ivoa-uws-server\[postgres\]'"):
        make_engine("postgresql://nobody@127.0.0.1:1/x")


def test_a_default_left_out_is_lowered_to_its_maximum():
    cfg = from_dict({"services": {"s": {"runner": "uws.demo:sleep",
                                        "max_execution_duration": 60, "max_lifetime": 3600}}})
    assert cfg.services["s"].execution_duration == 60
    assert cfg.services["s"].lifetime == 3600


def test_toml_values_of_other_types_become_parameter_defaults():
    cfg = from_dict({"services": {"s": {"runner": "uws.demo:sleep", "parameters": [
        {"name": "N", "type": "integer", "default": 3},
        {"name": "B", "type": "boolean", "default": True}]}}})
    assert [p.default for p in cfg.services["s"].parameters] == ["3", "true"]


def test_a_correct_command_service_is_accepted_with_its_placeholders():
    cfg = from_dict({"services": {"wc": {
        "command": ["wc", "-l", "{F}"], "parameters": [{"name": "F", "type": "file"}],
        "outputs": [{"name": "count", "file": "count.txt", "mime_type": "text/plain"}]}}})
    assert cfg.services["wc"].command == ("wc", "-l", "{F}")
    assert cfg.services["wc"].outputs[0].file == "count.txt"


def test_the_celery_queue_may_come_from_the_environment():
    cfg = from_dict({"executor": {"kind": "celery", "broker_url": "redis://127.0.0.1:1/0"}},
                    env={"UWS_QUEUE": "uws-cutouts"})
    assert cfg.queue == "uws-cutouts"


def test_a_test_timing_that_names_no_constant_stops_the_command_with_one_line(tmp_path):
    done = subprocess.run([UWS_COMMAND, "db", "current", "--data-dir", str(tmp_path)],
                          env={**os.environ, "UWS_TEST_TIMINGS": "LEASE=6 NOSUCH=1"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "uws: UWS_TEST_TIMINGS: 'NOSUCH' is no timing constant"


def test_test_timings_change_only_the_constants_they_name_and_all_or_none():
    from uws.domain import timing
    before = timing.LEASE, timing.REDISPATCH
    with pytest.raises(ValueError):
        timing.shorten_for_tests("LEASE=6 REDISPATCH=zero")
    assert (timing.LEASE, timing.REDISPATCH) == before


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_a_data_dir_that_cannot_be_used_names_the_setting(tmp_path, where):
    (tmp_path / "a-file").write_text("")
    data = tmp_path / "a-file" if where == "a-file" else tmp_path / "a-file" / "data"
    done = serve("--port", "0", "--data-dir", str(data))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"data_dir: cannot use {str(data)!r} as the data directory" in line
    assert "not a directory" in line and "--data-dir, UWS_DATA_DIR or [server] data_dir" in line
