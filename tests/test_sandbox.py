"""What a job cannot do: turn a value into an option, reach internal hosts through
a URL parameter, outlive its end, publish files that are not its own, read the
server's secrets, or have its results run as script in a browser."""
from __future__ import annotations

import http.server
import json
import os
import stat
import sys
import threading

import pytest
from lxml import etree

from uws.config import settings as config_mod
from uws.web.app import create_app, shutdown

from conftest import IN_CI, ValidatingClient, free_port, make_config
from uwshelp import NS, gone, phase, settle, wait_for

#: one database is enough here (job processes; the store's side of runs is in test_attempt_fence.py;
#: tests/README.rst)
BACKENDS = ("sqlite",)

PY = sys.executable
ARGV = "import sys, json; open('argv.json','w').write(json.dumps(sys.argv[1:]))"
# Starts `setsid env -i sleep 60` (no UWS_JOB_ID, a session of its own), notes its pid.
ESCAPE = ("import subprocess, sys, time\n"
          "p = subprocess.Popen(['setsid', 'env', '-i', 'sleep', '60'])\n"
          "open('pid.txt', 'w').write(str(p.pid))\n"
          "if float(sys.argv[1]) < 0:\n"
          "    import os, signal; os.kill(os.getppid(), signal.SIGKILL); time.sleep(60)\n"
          "time.sleep(float(sys.argv[1]))\n")
ENVIRON = "import os, json; open('env.json','w').write(json.dumps(dict(os.environ)))"
LINK = ("import os, sys\n"
        "os.link(sys.argv[1], 'stolen.txt')\n"
        "open('own.txt', 'w').write('mine')\n"
        "fd = int(os.environ['UWS_REPORT_FD'])\n"
        "os.write(fd, b'result stolen stolen.txt text/plain\\nresult own own.txt\\n')\n")
TYPED = ("import os\n"
         "for name in ('x.html', 'x.svg', 'x.js', 'x.xml', 'y.html', 'x.txt'):\n"
         "    open(name, 'w').write('<script>alert(1)</script>')\n"
         "fd = int(os.environ['UWS_REPORT_FD'])\n"
         "os.write(fd, b'result html x.html\\nresult svg x.svg\\nresult js x.js\\n'\n"
         "             b'result xml x.xml\\nresult declared y.html text/html\\n'\n"
         "             b'result text x.txt\\n')\n")
SERVICES = {
    "tar": {"command": [PY, "-c", ARGV, "-xf", "{ARCHIVE}", "{MEMBER}"],
            "parameters": [{"name": "ARCHIVE", "type": "string", "default": "a.tar"},
                           {"name": "MEMBER", "type": "string", "required": True},
                           {"name": "NOTE", "type": "string", "default": ""}]},
    "grep": {"command": [PY, "-c", ARGV, "{FLAGS}"],
             "parameters": [{"name": "FLAGS", "type": "string", "allow_options": True}]},
    "local": {"command": [PY, "-c", ARGV + "; open('copy','wb').write(open(sys.argv[1],'rb')"
                                            ".read())", "{INPUT}"],
              "fetch_hosts": ["127.0.0.1"],
              "parameters": [{"name": "INPUT", "type": "file", "required": True}]},
    "strict": {"command": [PY, "-c", ARGV, "{INPUT}"],
               "parameters": [{"name": "INPUT", "type": "file", "required": True}]},
    "checksum": {"runner": "uws.demo:checksum", "fetch_hosts": ["127.0.0.1"],
                 "parameters": [{"name": "FILE", "type": "file", "required": True},
                                {"name": "ALGORITHM", "type": "enum", "default": "sha256",
                                 "choices": ["md5", "sha256"]}]},
    "escape": {"command": [PY, "-c", ESCAPE, "{SECONDS}"],
               "parameters": [{"name": "SECONDS", "type": "float", "default": 0,
                               "allow_options": True}]},
    "environ": {"command": [PY, "-c", ENVIRON]},
    "link": {"command": [PY, "-c", LINK, "{TARGET}"],
             "parameters": [{"name": "TARGET", "type": "string", "required": True}]},
    "typed": {"command": [PY, "-c", TYPED]},
}


def need_cgroups() -> None:
    """Skip locally where no cgroup v2 hierarchy is writable; under CI (whose machine
    offers one) its absence is a failure, never a silent skip."""
    if IN_CI:
        pytest.fail("CI needs a writable cgroup v2 hierarchy for the cgroup tests")
    pytest.skip("no writable cgroup v2 hierarchy here")


@pytest.fixture
def config(tmp_path, db_url):
    return make_config(tmp_path, db_url, services=SERVICES)


def post_job(client, service, **params):
    return client.post(f"/{service}", data={**params, "PHASE": "RUN"})


def start(client, service, **params) -> str:
    r = post_job(client, service, **params)
    assert r.status_code == 303, r.get_data(as_text=True)
    return r.headers["Location"].replace("http://localhost", "")


def job_dir(config, path: str):
    job_id = path.rsplit("/", 1)[1]
    return config.data_dir / "jobs" / job_id[:2] / job_id


def argv_of(config, path):
    return json.loads((job_dir(config, path) / "results" / "argv.json").read_text())


# -- item 3: a value never becomes an option ---------------------------------------------

def test_a_value_starting_with_a_dash_is_refused_at_creation_naming_the_parameter(client):
    r = post_job(client, "tar", MEMBER="--to-command=id > /tmp/pwned")
    assert r.status_code == 400
    assert "MEMBER" in r.get_data(as_text=True)
    assert etree.fromstring(client.get("/tar").data).findall("uws:jobref", NS) == []


def test_a_value_starting_with_a_dash_is_refused_at_parameter_update(client, config):
    path = client.post("/tar", data={"MEMBER": "ok"}).headers["Location"].replace(
        "http://localhost", "")
    r = client.post(f"{path}/parameters", data={"MEMBER": "-x"})
    assert r.status_code == 400 and "MEMBER" in r.get_data(as_text=True)
    params = client.get(f"{path}/parameters").get_data(as_text=True)
    assert ">ok<" in params and "-x" not in params


def test_a_dash_value_of_a_parameter_the_command_does_not_receive_is_accepted(client):
    assert post_job(client, "tar", MEMBER="m", NOTE="-just a note").status_code == 303


def test_a_parameter_declaring_allow_options_passes_a_dash_value(client, config):
    path = start(client, "grep", FLAGS="-i")
    assert b"COMPLETED" in settle(client, path).data
    assert argv_of(config, path) == ["-i"]


def test_a_dash_default_for_a_command_placeholder_is_a_configuration_error():
    services = {"bad": {"command": ["true", "{X}"],
                        "parameters": [{"name": "X", "type": "string", "default": "-rf"}]}}
    with pytest.raises(config_mod.ConfigError, match="X"):
        config_mod.from_dict({"services": services}, env={})


# -- item 6: URL parameters -------------------------------------------------------------

@pytest.fixture
def web(tmp_path):
    """A static HTTP server on 127.0.0.1 serving tmp_path/www; its base URL."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "data.bin").write_bytes(b"remote content")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_command_receives_a_url_parameter_as_a_local_fetched_file(client, config, web):
    path = start(client, "local", INPUT=f"{web}/data.bin")
    assert b"COMPLETED" in settle(client, path).data
    [arg] = argv_of(config, path)
    assert arg.startswith(str(job_dir(config, path))) and "http" not in arg
    assert (job_dir(config, path) / "results" / "copy").read_bytes() == b"remote content"


def test_a_command_whose_url_cannot_be_fetched_ends_in_error_before_it_starts(client, config,
                                                                              web):
    path = start(client, "strict", INPUT=f"{web}/data.bin")
    doc = settle(client, path).get_data(as_text=True)
    assert "<uws:phase>ERROR</uws:phase>" in doc
    assert "INPUT: cannot fetch" in doc and "cannot be reached from this service" in doc
    assert not (job_dir(config, path) / "results" / "argv.json").exists()


def test_the_demo_checksum_refuses_a_loopback_url(tmp_path, db_url, web):
    app = create_app(make_config(tmp_path, db_url))     # the demo services
    app.test_client_class = ValidatingClient
    try:
        client = app.test_client()
        open_port = settle(client, start(client, "checksum", FILE=f"{web}/data.bin"))
        closed = settle(client, start(client, "checksum",
                                      FILE=f"http://127.0.0.1:{free_port()}/data.bin"))
        texts = []
        for doc in (open_port, closed):
            body = doc.get_data(as_text=True)
            assert "<uws:phase>ERROR</uws:phase>" in body
            texts.append(body.split("<uws:message>")[1].split("</uws:message>")[0]
                         .split(": ", 1)[1])
        assert texts[0] == texts[1] == "the host cannot be reached from this service"
    finally:
        shutdown(app)


def test_the_demo_checksum_fetches_an_allow_listed_host(client, web):
    import hashlib
    path = start(client, "checksum", FILE=f"{web}/data.bin")
    assert b"COMPLETED" in settle(client, path).data
    digest = client.get(f"{path}/results/checksum").get_data(as_text=True).split()[0]
    assert digest == hashlib.sha256(b"remote content").hexdigest()


# -- item 8: nothing outlives its job ------------------------------------------------------

@pytest.fixture(params=["cgroup", "process-tree"])
def isolation(request, monkeypatch):
    """Each kind of job containment: per-job cgroups (where this machine offers
    them) and the supervisor/process-tree fallback."""
    from uws.execution import cgroups
    if request.param == "cgroup":
        if cgroups.detect() is None:
            need_cgroups()
    else:
        monkeypatch.setattr(cgroups, "detect", lambda: None)
    return request.param


@pytest.fixture
def isolated(isolation, config):
    app = create_app(config)
    app.test_client_class = ValidatingClient
    yield app.test_client(), app.extensions["uws"]
    shutdown(app)


def escaped_pid(config, path) -> int:
    pid_file = job_dir(config, path) / "results" / "pid.txt"
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    return int(pid_file.read_text())


def test_a_setsid_env_i_child_does_not_outlive_a_completed_job(isolated, config):
    client, api = isolated
    path = start(client, "escape", SECONDS="0")
    wait_for(lambda: phase(client, path) == "COMPLETED", timeout=10)
    pid = escaped_pid(config, path)
    wait_for(lambda: gone([pid]), timeout=5)


def test_a_setsid_env_i_child_does_not_outlive_an_aborted_job(isolated, config):
    client, api = isolated
    path = start(client, "escape", SECONDS="60")
    pid = escaped_pid(config, path)
    assert not gone([pid])
    client.post(f"{path}/phase", data={"PHASE": "ABORT"})
    wait_for(lambda: gone([pid]), timeout=5)
    assert phase(client, path) == "ABORTED"


def test_a_setsid_env_i_child_does_not_outlive_its_destroyed_job(isolated, config):
    client, api = isolated
    path = start(client, "escape", SECONDS="60")
    pid = escaped_pid(config, path)
    assert client.delete(path).status_code == 303
    wait_for(lambda: gone([pid]), timeout=5)


def test_a_job_runs_in_a_cgroup_of_its_own_removed_at_its_end(client, api, config):
    if api.executor.processes.cgroups is None:
        need_cgroups()
    path = start(client, "escape", SECONDS="60")
    pid = escaped_pid(config, path)
    group = api.executor.processes.cgroups.path(path.rsplit("/", 1)[1])
    assert str(pid) in (group / "cgroup.procs").read_text().split()
    client.post(f"{path}/phase", data={"PHASE": "ABORT"})
    wait_for(lambda: not group.exists(), timeout=5)


def test_a_job_killing_its_supervisor_still_leaves_nothing_with_cgroups(client, api, config):
    """Only a cgroup holds a job whose command kills the process above it (after
    which its orphans belong to init)."""
    if api.executor.processes.cgroups is None:
        need_cgroups()
    path = start(client, "escape", SECONDS="-1")
    wait_for(lambda: phase(client, path) == "ERROR", timeout=10)
    pid = escaped_pid(config, path)
    wait_for(lambda: gone([pid]), timeout=5)


def test_recovering_a_lost_job_ends_what_is_left_in_its_cgroup(client, api, config):
    import datetime as dt
    import subprocess

    from uws.domain import timeutil
    from uws.store.tables import job as J
    from uws.usecases.sweeps import Sweeps
    if api.executor.processes.cgroups is None:
        need_cgroups()
    r = client.post("/escape", data={"SECONDS": "60"})
    assert r.status_code == 303
    job_id = r.headers["Location"].rsplit("/", 1)[1]
    with api.store.engine.begin() as conn:     # its worker died, leaving this behind
        conn.execute(J.update().where(J.c.id == job_id).values(
            phase="EXECUTING", lease_owner="gone-host:1:x", start_time=timeutil.now(),
            lease_expires=timeutil.now() - dt.timedelta(seconds=1)))
    left = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert api.executor.processes.cgroups.enter(job_id, left.pid)
        sweeps = Sweeps(config=config, store=api.store, files=api.files, executor=api.executor)
        sweeps.recover_lost()
        left.wait(5)
        assert not api.executor.processes.cgroups.path(job_id).exists()
    finally:
        left.kill()
        left.wait()


def test_empty_cgroups_left_by_a_killed_server_are_pruned(api):
    import uuid
    groups = api.executor.processes.cgroups
    if groups is None:
        need_cgroups()
    left = groups.path(uuid.uuid4().hex)
    left.mkdir()
    groups.prune(min_age=0)
    assert not left.exists()


def test_a_hard_linked_result_is_refused(client, config):
    target = config.data_dir / "other-owner-upload"
    target.write_text("another owner's file")
    path = start(client, "link", TARGET=str(target))
    settle(client, path)
    results = client.get(f"{path}/results").get_data(as_text=True)
    assert 'id="own"' in results and 'id="stolen"' not in results
    assert client.get(f"{path}/results/stolen").status_code == 404


def test_a_result_hard_linked_after_it_was_recorded_is_not_served(client, config):
    path = start(client, "typed")
    settle(client, path)
    results = job_dir(config, path) / "results"
    os.unlink(results / "x.txt")
    os.link(job_dir(config, path) / "stderr.log", results / "x.txt")
    assert client.get(f"{path}/results/text").status_code == 404


def test_a_job_sees_only_the_documented_environment(client, config, monkeypatch):
    monkeypatch.setenv("UWS_DATABASE_URL", "postgresql://admin:secret@db/uws")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    path = start(client, "environ")
    assert b"COMPLETED" in settle(client, path).data
    env = json.loads((job_dir(config, path) / "results" / "env.json").read_text())
    documented = {"PATH", "LANG", "LC_ALL", "PYTHONPATH", "HOME", "TMPDIR", "UWS_JOB_ID",
                  "UWS_REPORT_FD"}
    assert set(env) - {"LC_CTYPE"} <= documented     # Python itself may set LC_CTYPE
    assert env["UWS_JOB_ID"] == path.rsplit("/", 1)[1]
    assert env["TMPDIR"].startswith(str(job_dir(config, path)))
    assert "secret" not in json.dumps(env) and "hunter2" not in json.dumps(env)


def test_the_data_directory_and_job_files_are_private_to_the_server_user(tmp_path, db_url):
    import io
    old = os.umask(0o022)
    try:
        cfg = make_config(tmp_path, db_url, services=SERVICES)
        app = create_app(cfg)
        try:
            client = app.test_client()
            r = client.post("/local", data={"INPUT": (io.BytesIO(b"data"), "in.txt"),
                                            "PHASE": "RUN"},
                            content_type="multipart/form-data")
            path = r.headers["Location"].replace("http://localhost", "")
            settle(client, path)
        finally:
            shutdown(app)
    finally:
        os.umask(old)
    job = job_dir(cfg, path)
    dirs = [cfg.data_dir, cfg.data_dir / "jobs", job.parent, job, job / "uploads",
            job / "results"]
    files = [job / "uploads" / "INPUT", job / "stdout.log", job / "stderr.log",
             job / "results" / "copy"]
    if db_url.startswith("sqlite"):
        files.append(tmp_path / db_url[len("sqlite:///"):])
    modes = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in dirs + files}
    assert modes == {**{str(p): "0o700" for p in dirs}, **{str(p): "0o600" for p in files}}


# -- item 9: no guessed script types ---------------------------------------------------

def test_a_result_type_is_never_guessed_as_a_script_type(client):
    path = start(client, "typed")
    settle(client, path)
    doc = etree.fromstring(client.get(f"{path}/results").data)
    types = {r.get("id"): r.get("mime-type") for r in doc.findall("uws:result", NS)}
    assert types == {"html": "application/octet-stream", "svg": "application/octet-stream",
                     "js": "application/octet-stream", "xml": "application/octet-stream",
                     "declared": "text/html", "text": "text/plain"}
    served = client.get(f"{path}/results/html")
    assert served.headers["Content-Type"] == "application/octet-stream"
    declared = client.get(f"{path}/results/declared")
    assert "sandbox" in declared.headers["Content-Security-Policy"]


def test_a_job_finds_modules_where_the_server_found_them(monkeypatch, tmp_path):
    from uws.execution.task import job_environment
    (tmp_path / "lib").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("lib")     # relative, as PYTHONPATH=lib gives it
    env = job_environment("0" * 32, 3, tmp_path / "tmp")
    assert str(tmp_path / "lib") in env["PYTHONPATH"].split(os.pathsep)
