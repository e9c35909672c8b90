"""Jobs forked by the executor's fork server: as isolated as spawned ones, and a
crashing job or a dead fork server costs no other job."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from conftest import make_config
from uwshelp import gone, phase, settle, wait_for

#: one database is enough here (job processes; the store's side of runs is in test_attempt_fence.py;
#: tests/README.rst)
BACKENDS = ("sqlite",)

RUNNERS = '''
import ctypes, json, os, resource, subprocess, sys, time
from pathlib import Path

with open(Path(__file__).with_name("imports.log"), "a") as f:
    f.write(f"{os.getpid()}\\n")


def _parent_of(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _write(ctx, name, data):
    (ctx.workdir / f"{name}.json").write_text(json.dumps(data))
    ctx.add_result(name, f"{name}.json", "application/json")


def whoami(params, ctx):
    cgroup = [line for line in open("/proc/self/cgroup").read().splitlines()
              if line.startswith("0::")]
    _write(ctx, "me", {"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
                       "supervisor": os.getppid(), "starter": _parent_of(os.getppid()),
                       "cgroup": cgroup})


def world(params, ctx):
    umask = os.umask(0)
    os.umask(umask)
    environ = Path("/proc/self/environ").read_bytes().split(b"\\0")
    _write(ctx, "world", {
        "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask, "path0": sys.path[0],
        "fsize": resource.getrlimit(resource.RLIMIT_FSIZE),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "fds": len(os.listdir("/proc/self/fd")),
        "proc_job_id": [e.decode() for e in environ if e.startswith(b"UWS_JOB_ID=")]})


def family(params, ctx):
    child = subprocess.Popen(["sleep", "60"])
    (ctx.workdir / "pids").write_text(f"{os.getpid()} {os.getppid()} {child.pid}")
    time.sleep(60)


def crash(params, ctx):
    if params["HOW"] == "segfault":
        ctypes.string_at(0)
    if params["HOW"] == "exit":
        os._exit(7)
    if params["HOW"].startswith("sys.exit"):
        sys.exit(int(params["HOW"][len("sys.exit"):] or 0) or None)
    raise MemoryError()
'''
# Importable by the server, not in the fork server (whose UWS_JOB_ID is the room
# its jobs write their ids into: dashes).
UNFORKABLE = '''
import os
if os.environ.get("UWS_JOB_ID", "").startswith("-"):
    raise ImportError("not in the fork server")


def run(params, ctx):
    supervisor = os.getppid()
    starter = open(f"/proc/{supervisor}/stat").read().rsplit(")", 1)[1].split()[1]
    (ctx.workdir / "ok.txt").write_text(starter)
    ctx.add_result("ok", "ok.txt", "text/plain")
'''
SERVICES = {
    "whoami": {"runner": "fsrunners:whoami"},
    "world": {"runner": "fsrunners:world"},
    "family": {"runner": "fsrunners:family"},
    "crash": {"runner": "fsrunners:crash",
              "parameters": [{"name": "HOW", "type": "string", "required": True}]},
    "unforkable": {"runner": "fsunforkable:run"},
    # prints the pid of its supervisor's parent
    "cmd": {"command": [sys.executable, "-c", "import os; print(open(f'/proc/{os.getppid()}"
                        "/stat').read().rsplit(')', 1)[1].split()[1])"]},
}


@pytest.fixture
def modules(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "fsrunners.py").write_text(RUNNERS)
    (lib / "fsunforkable.py").write_text(UNFORKABLE)
    monkeypatch.syspath_prepend(str(lib))
    return lib


@pytest.fixture
def config(tmp_path, db_url, modules):
    # started with the executor, as by default: these tests watch it from the start
    return make_config(tmp_path, db_url, services=SERVICES, fork_server_at_start=True)


def run(client, service, **params) -> str:
    r = client.post(f"/{service}", data={**params, "PHASE": "RUN"})
    assert r.status_code == 303
    return r.headers["Location"].replace("http://localhost", "")


def result(client, path, name) -> dict:
    assert phase(client, path) == "COMPLETED", client.get(path).data
    return json.loads(client.get(f"{path}/results/{name}").data)


def fork_server_pid(api) -> int:
    wait_for(lambda: api.executor.processes.forks.pid is not None)
    return api.executor.processes.forks.pid


def test_a_forked_job_has_a_session_and_process_group_of_its_own(client, api):
    server = fork_server_pid(api)
    path = run(client, "whoami")
    settle(client, path)
    me = result(client, path, "me")
    assert me["starter"] == server        # forked: its supervisor is the fork server's child
    assert me["pgid"] == me["sid"] == me["supervisor"]
    assert me["pgid"] not in (os.getpgid(server), os.getpgid(0))


def test_a_forked_job_is_in_its_own_cgroup_where_there_are_cgroups(client, api):
    fork_server_pid(api)
    path = settle_path(client, "whoami")
    job_id = path.rsplit("/", 1)[1]
    (line,) = result(client, path, "me")["cgroup"] or [""]
    if api.executor.processes.cgroups is not None:
        assert line.endswith(f"/uws-jobs/{job_id}")
    else:
        assert "uws-jobs" not in line


def test_abort_kills_a_forked_job_and_its_grandchild_within_a_second(client, api):
    path = run(client, "family")
    pids_file = api.executor.files.results_dir(path.rsplit("/", 1)[1]) / "pids"
    wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 3)
    pids = [int(p) for p in pids_file.read_text().split()]
    sent = time.monotonic()
    assert client.post(f"{path}/phase", data={"PHASE": "ABORT"}).status_code == 303
    assert wait_for(lambda: gone(pids), timeout=5) - sent < 1.0
    assert phase(client, path) == "ABORTED"


@pytest.mark.parametrize("how", ["segfault", "exit", "memory"])
def test_a_crashing_job_ends_in_error_and_the_fork_server_runs_the_next(client, api, how):
    server = fork_server_pid(api)
    doc = settle(client, run(client, "crash", HOW=how)).get_data(as_text=True)
    assert "<uws:phase>ERROR</uws:phase>" in doc
    path = run(client, "whoami")
    settle(client, path)
    assert result(client, path, "me")["starter"] == server


@pytest.mark.parametrize("how", ["sys.exit", "sys.exit0"])
def test_a_runner_that_calls_sys_exit_without_a_status_completes(client, how):
    doc = settle(client, run(client, "crash", HOW=how)).get_data(as_text=True)
    assert "<uws:phase>COMPLETED</uws:phase>" in doc


def test_a_runner_that_calls_sys_exit_with_a_status_ends_in_error_saying_it(client):
    doc = settle(client, run(client, "crash", HOW="sys.exit3")).get_data(as_text=True)
    assert "<uws:phase>ERROR</uws:phase>" in doc and "exited with status 3" in doc


def test_a_job_whose_fork_server_is_killed_ends_and_the_next_runs_on_a_new_one(client, api):
    server = fork_server_pid(api)
    path = run(client, "family")
    pids_file = api.executor.files.results_dir(path.rsplit("/", 1)[1]) / "pids"
    wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 3)
    pids = [int(p) for p in pids_file.read_text().split()]
    os.kill(server, signal.SIGKILL)
    doc = settle(client, path, timeout=10).get_data(as_text=True)
    assert "<uws:phase>ERROR</uws:phase>" in doc and "fork server" in doc
    wait_for(lambda: gone(pids), timeout=5)
    path = run(client, "whoami")
    settle(client, path)
    starter = result(client, path, "me")["starter"]
    assert starter != server and starter == api.executor.processes.forks.pid


def test_the_runner_module_is_imported_by_the_server_and_the_fork_server_only(
        client, api, modules):
    server = fork_server_pid(api)
    for _ in range(3):
        settle(client, run(client, "whoami"))
    imports = [int(pid) for pid in (modules / "imports.log").read_text().split()]
    # (this process imports it once, when the first test of the session checks the config)
    assert imports.count(server) == 1 and set(imports) <= {server, os.getpid()}


def test_a_runner_the_fork_server_cannot_import_still_runs_spawned(client, api):
    server = fork_server_pid(api)
    path = settle_path(client, "unforkable")
    assert phase(client, path) == "COMPLETED"
    assert int(client.get(f"{path}/results/ok").data) == os.getpid()     # spawned here
    assert result(client, settle_path(client, "whoami"), "me")["starter"] == server


def test_a_command_is_forked_then_execs_its_program(client, api):
    server = fork_server_pid(api)
    path = settle_path(client, "cmd")
    assert phase(client, path) == "COMPLETED"
    stdout = api.executor.files.job_dir(path.rsplit("/", 1)[1]) / "stdout.log"
    assert int(stdout.read_text()) == server


def test_a_forked_job_sees_the_same_world_as_a_spawned_one(client, api, monkeypatch):
    fork_server_pid(api)
    forked_path = settle_path(client, "world")
    monkeypatch.setattr(api.executor.processes.forks, "serves", lambda module: False)
    spawned_path = settle_path(client, "world")
    forked, spawned = (result(client, p, "world") for p in (forked_path, spawned_path))
    for world, path in ((forked, forked_path), (spawned, spawned_path)):
        job_id = path.rsplit("/", 1)[1]
        assert world["proc_job_id"] == [f"UWS_JOB_ID={job_id}"]    # what strays.py looks for
        assert job_id in world["cwd"] and world["path0"] == world["cwd"]
        own = f"{job_id[:2]}/{job_id}"
        for name in ("HOME", "TMPDIR"):
            world["env"][name] = world["env"][name].replace(own, "<job>")
        world["env"]["UWS_JOB_ID"] = "<id>"
        world["env"]["UWS_REPORT_FD"] = "<fd>"       # 3 when forked; fds are counted
        world["cwd"] = world["path0"] = world["cwd"].replace(own, "<job>")
        del world["proc_job_id"]
    assert forked == spawned


def settle_path(client, service, **params) -> str:
    path = run(client, service, **params)
    settle(client, path)
    return path


# Starts a thread when the fork server imports it (not when the server does).
THREADED = '''
import os
import threading
import time
if os.environ.get("UWS_JOB_ID", "").startswith("-"):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()


def run(params, ctx):
    supervisor = os.getppid()
    starter = open(f"/proc/{supervisor}/stat").read().rsplit(")", 1)[1].split()[1]
    (ctx.workdir / "ok.txt").write_text(starter)
    ctx.add_result("ok", "ok.txt", "text/plain")
'''


def test_a_runner_starting_threads_in_the_fork_server_makes_every_job_spawned(
        tmp_path, db_url, monkeypatch):
    from uws.web.app import create_app, shutdown
    lib = tmp_path / "threadlib"
    lib.mkdir()
    (lib / "fsthreaded.py").write_text(THREADED)
    monkeypatch.syspath_prepend(str(lib))
    app = create_app(make_config(tmp_path, db_url, services={
        "threaded": {"runner": "fsthreaded:run"}}))
    try:
        client = app.test_client()
        path = settle_path(client, "threaded")
        assert phase(client, path) == "COMPLETED"
        assert int(client.get(f"{path}/results/ok").data) == os.getpid()     # spawned here
        forks = app.extensions["uws"].executor.processes.forks
        assert forks.unusable and "threads" in forks.unusable
        assert forks.pid is None            # the unfit fork server was not kept
    finally:
        shutdown(app)
