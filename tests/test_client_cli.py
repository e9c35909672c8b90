"""``uws jobs …`` (uws/client/cli.py): each subcommand, its ``--json`` output and each
documented exit code, against tests/minimal_uws.py (an independent server) and, for the
real dispatch from the ``uws`` command, a subprocess of the installed ``uws``."""
from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time

import pytest
import trustme
from click.testing import CliRunner

from minimal_uws import BROKEN, MinimalUWS, Scripted, holding_wait, job_document, job_list
from uws.client.cli import jobs

from uwshelp import UWS_COMMAND

COMPLETED, USAGE, ERROR, ABORTED, TIMEOUT, HTTP, CONNECTION, PROTOCOL = 0, 2, 3, 4, 5, 6, 7, 8


@pytest.fixture
def server():
    with MinimalUWS() as minimal:
        yield minimal


def uws_jobs(server: MinimalUWS, *args: str, env: dict | None = None):
    return CliRunner().invoke(jobs, ["--url", server.url, *args], env=env)


def as_json(server: MinimalUWS, *args: str):
    result = uws_jobs(server, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def created(server: MinimalUWS, *params: str) -> str:
    return as_json(server, "create", *params)["job_id"]


def test_create_prints_the_new_jobs_id_phase_and_url(server):
    result = uws_jobs(server, "create", "DURATION=5")
    job_id, phase, url = result.stdout.split()
    assert (result.exit_code, phase, url) == (0, "PENDING", f"{server.url}/{job_id}")


def test_create_json_shows_parameters_and_run_id(server):
    job = as_json(server, "create", "DURATION=5", "COLOUR=red", "--run-id", "r7")
    assert job["run_id"] == "r7"
    assert {"id": "COLOUR", "value": "red", "by_reference": False, "is_post": False} in job["parameters"]


def test_create_uploads_a_file(server, tmp_path):
    data = tmp_path / "table.bin"
    data.write_bytes(b"\x00\x01uploaded")
    job_id = created(server, "DURATION=0", "--run", "--file", f"TABLE={data}")
    uws_jobs(server, "wait", job_id)
    assert uws_jobs(server, "results", job_id, "echo", "--output", str(tmp_path / "e")).exit_code == 0
    assert (tmp_path / "e").read_bytes() == b"\x00\x01uploaded"


def test_a_parameter_without_equals_sign_is_bad_usage(server):
    assert uws_jobs(server, "create", "DURATION").exit_code == USAGE


def test_no_url_is_bad_usage(server):
    result = CliRunner().invoke(jobs, ["list"], env={"UWS_URL": None})
    assert result.exit_code == USAGE
    assert "--url" in result.stderr


def test_url_from_the_environment(server):
    job_id = created(server, "DURATION=5")
    result = CliRunner().invoke(jobs, ["--json", "list"], env={"UWS_URL": server.url})
    assert [r["id"] for r in json.loads(result.stdout)] == [job_id]


def test_list_json_follows_every_page(server):
    made = {created(server, "DURATION=5") for _ in range(5)}
    assert {r["id"] for r in as_json(server, "list")} == made


def test_list_filters_by_phase(server):
    running = as_json(server, "create", "DURATION=60", "--run")["job_id"]
    created(server, "DURATION=60")
    assert [r["id"] for r in as_json(server, "list", "--phase", "EXECUTING")] == [running]


def test_list_table_shows_each_job_whole(server):
    job_id = created(server, "DURATION=5")
    result = uws_jobs(server, "list")
    assert job_id in result.stdout and "PENDING" in result.stdout


def test_show_json_is_the_job(server):
    job_id = created(server, "DURATION=5")
    job = as_json(server, "show", job_id)
    assert (job["job_id"], job["phase"], job["url"]) == (job_id, "PENDING", f"{server.url}/{job_id}")


def test_json_may_follow_the_subcommand(server):
    job_id = created(server, "DURATION=5")
    result = uws_jobs(server, "show", job_id, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["job_id"] == job_id


def test_a_piped_table_keeps_each_job_id_on_one_line(server):
    job_ids = {created(server, "DURATION=5") for _ in range(2)}
    lines = uws_jobs(server, "list").stdout.splitlines()
    assert all(any(job_id in line for line in lines) for job_id in job_ids)


def test_show_table_names_the_fields(server):
    job_id = created(server, "DURATION=5")
    assert "parameter DURATION" in uws_jobs(server, "show", job_id).stdout


def test_run_starts_the_job(server):
    job_id = created(server, "DURATION=60")
    assert as_json(server, "run", job_id)["phase"] == "EXECUTING"


def test_wait_exits_0_when_completed(server):
    job_id = created(server, "DURATION=0.3", "--run")
    result = uws_jobs(server, "--json", "wait", job_id)
    assert result.exit_code == COMPLETED
    assert json.loads(result.stdout)["phase"] == "COMPLETED"


def test_wait_exits_3_on_error_and_prints_the_message(server):
    job_id = created(server, "DURATION=0", "FAIL=true", "--run")
    result = uws_jobs(server, "wait", job_id)
    assert result.exit_code == ERROR
    assert "failed as asked" in result.stdout


def test_wait_exits_4_when_aborted(server):
    job_id = created(server, "DURATION=60", "--run")
    assert as_json(server, "abort", job_id)["phase"] == "ABORTED"
    assert uws_jobs(server, "wait", job_id).exit_code == ABORTED


def test_wait_exits_5_on_timeout(server):
    job_id = created(server, "DURATION=60", "--run")
    result = uws_jobs(server, "wait", job_id, "--timeout", "0.5")
    assert result.exit_code == TIMEOUT
    assert "still EXECUTING" in result.stderr


def test_wait_on_a_pending_job_says_it_must_be_run(server):
    job_id = created(server, "DURATION=1")
    result = uws_jobs(server, "wait", job_id, "--timeout", "0.3")
    assert result.exit_code == TIMEOUT
    assert f"uws jobs run {job_id}" in result.stderr


def test_run_wait_exits_by_the_final_phase(server):
    job_id = created(server, "DURATION=0", "FAIL=true")
    assert uws_jobs(server, "run", job_id, "--wait").exit_code == ERROR


def test_progress_bar_shows_the_servers_percent(server):
    job_id = created(server, "DURATION=1", "--run")
    result = uws_jobs(server, "wait", job_id, "--progress")
    assert "100%" in result.stderr


def test_progress_bar_without_percent_shows_time_elapsed(server):
    job_id = created(server, "DURATION=0", "FAIL=true", "--run")
    result = uws_jobs(server, "wait", job_id, "--progress")
    assert "0:00:0" in result.stderr and "%" not in result.stderr


def test_json_wait_draws_no_bar(server):
    job_id = created(server, "DURATION=0.3", "--run")
    assert uws_jobs(server, "--json", "wait", job_id).stderr == ""


def test_delete_then_show_exits_6(server):
    job_id = created(server, "DURATION=5")
    assert as_json(server, "delete", job_id) == {"deleted": f"{server.url}/{job_id}"}
    result = uws_jobs(server, "show", job_id)
    assert result.exit_code == HTTP
    assert "404" in result.stderr and "no such job" in result.stderr


def test_abort_of_a_finished_job_exits_6(server):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    assert uws_jobs(server, "abort", job_id).exit_code == HTTP


def test_unreachable_server_exits_7():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(jobs, ["--url", f"http://127.0.0.1:{port}/jobs", "list"])
    assert result.exit_code == CONNECTION
    assert "cannot reach" in result.stderr


def test_an_answer_that_is_not_uws_exits_8(server):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    result = CliRunner().invoke(jobs, ["--url", f"{server.root}/files/{job_id}/note", "list"])
    assert result.exit_code == PROTOCOL


def test_results_json_lists_the_results(server):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    results = as_json(server, "results", job_id)
    assert [(r["id"], r["href"]) for r in results] == [
        ("echo", f"{server.url}/{job_id}/results/echo"), ("note", f"{server.url}/{job_id}/results/note")]


def test_results_output_downloads_every_result_into_a_directory(server, tmp_path):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    saved = as_json(server, "results", job_id, "--output", str(tmp_path / "out"))
    note = f"job {job_id} done\n"
    assert {s["id"]: s["bytes"] for s in saved} == {"echo": server.result_bytes, "note": len(note)}
    assert (tmp_path / "out" / "note").read_text() == note


def test_results_output_resumes_a_partial_file(server, tmp_path):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    whole = server.content(server.jobs[job_id], "echo")
    (tmp_path / "echo").write_bytes(whole[:1000])
    assert uws_jobs(server, "results", job_id, "echo", "-o", str(tmp_path / "echo"),
                    "--resume").exit_code == 0
    assert (tmp_path / "echo").read_bytes() == whole


def test_an_output_that_cannot_be_written_exits_9_without_a_traceback(server, tmp_path):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    result = uws_jobs(server, "results", job_id, "echo", "-o", str(tmp_path / "no" / "such" / "f"))
    # 9 is the handled exit: an uncaught exception would exit 1 (the output may hold
    # the test server's own traceback of the connection the client dropped)
    assert result.exit_code == 9, result.output
    assert "uws jobs: " in result.stderr and "No such file or directory" in result.stderr


def test_results_output_into_a_directory_names_the_file_by_result(server, tmp_path):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    assert uws_jobs(server, "results", job_id, "note", "-o", str(tmp_path)).exit_code == 0
    assert (tmp_path / "note").read_text() == f"job {job_id} done\n"


def test_a_broken_download_exits_7_and_a_second_run_with_resume_completes_it(tmp_path):
    with MinimalUWS(cut_after=100_000) as server:
        job_id = created(server, "DURATION=0", "--run")
        uws_jobs(server, "wait", job_id)
        target = str(tmp_path / "echo")
        assert uws_jobs(server, "results", job_id, "echo", "-o", target).exit_code == CONNECTION
        assert uws_jobs(server, "results", job_id, "echo", "-o", target,
                        "--resume").exit_code == 0
        assert (tmp_path / "echo").read_bytes() == server.content(server.jobs[job_id], "echo")


def test_unknown_result_exits_6(server):
    job_id = created(server, "DURATION=0", "--run")
    uws_jobs(server, "wait", job_id)
    assert uws_jobs(server, "results", job_id, "nope").exit_code == HTTP


@pytest.fixture
def guarded():
    with MinimalUWS(users={"alice": "secret"}, tokens={"tok-1": "carol"}) as minimal:
        yield minimal


def test_basic_auth_options(guarded):
    job = as_json(guarded, "--user", "alice", "--password", "secret", "create", "DURATION=1")
    assert job["owner_id"] == "alice"


def test_password_is_asked_for_when_missing(guarded):
    result = CliRunner().invoke(jobs, ["--url", guarded.url, "--user", "alice", "--json", "create",
                                       "DURATION=1"], input="secret\n")
    assert json.loads(result.stdout)["owner_id"] == "alice"


def test_token_from_the_environment(guarded):
    result = CliRunner().invoke(jobs, ["--url", guarded.url, "--json", "create", "DURATION=1"],
                                env={"UWS_TOKEN": "tok-1"})
    assert json.loads(result.stdout)["owner_id"] == "carol"


def test_wrong_credentials_exit_6(guarded):
    result = uws_jobs(guarded, "--token", "wrong", "list")
    assert result.exit_code == HTTP
    assert "401" in result.stderr


def test_installed_uws_command_dispatches_to_jobs(server):
    done = subprocess.run([UWS_COMMAND, "jobs", "--url", server.url, "--json", "create", "DURATION=0",
                           "--run", "--wait"], capture_output=True, text=True, timeout=60)
    assert done.returncode == COMPLETED, done.stderr
    assert json.loads(done.stdout)["phase"] == "COMPLETED"
    failed = subprocess.run([UWS_COMMAND, "jobs", "--url", server.url, "create", "DURATION=0", "FAIL=true",
                             "--run", "--wait"], capture_output=True, text=True, timeout=60)
    assert failed.returncode == ERROR


# -- what the server says, printed safely --------------------------------------------------------

def scripted(server: Scripted, *args: str):
    return CliRunner().invoke(jobs, ["--url", server.url, *args])


def test_credentials_in_the_url_are_used_and_never_printed(guarded):
    url = guarded.url.replace("http://", "http://alice:secret@")
    made = CliRunner().invoke(jobs, ["--url", url, "create", "DURATION=1"])
    shown = CliRunner().invoke(jobs, ["--url", url, "--json", "show", made.stdout.split()[0]])
    missing = CliRunner().invoke(jobs, ["--url", url, "show", "nosuch"])
    assert (made.exit_code, shown.exit_code, missing.exit_code) == (0, 0, HTTP)
    assert json.loads(shown.stdout)["owner_id"] == "alice"
    assert all("secret" not in r.output for r in (made, shown, missing))


MARKUP = {"list": job_list(("a[/]b", "COMPLETED")),
          "show": job_document("J", "COMPLETED", run_id="[bold]x[/bold] [/oops]"),
          "results": job_document("J", "COMPLETED", {"[/]": "/r"})}


@pytest.mark.parametrize(("command", "text"), [("list", "a[/]b"), ("show", "[bold]x[/bold] [/oops]"),
                                               ("results", "[/]")])
def test_server_text_that_looks_like_markup_is_printed_as_it_is(command, text):
    with Scripted(lambda r: (200, {}, MARKUP[command])) as server:
        result = scripted(server, command, *(["J"] if command != "list" else []))
    assert result.exit_code == 0, result.output
    assert text in result.stdout


CONTROLS = ("\x1b", "\x07", "\x9b")


def test_terminal_controls_in_an_error_message_are_not_printed():
    body = b"oops \x1b]0;PWNED\x07\x1b[2J\x1b[31mred\x1b[0m"
    with Scripted(lambda r: (500, {"Content-Type": "text/plain"}, body)) as server:
        result = scripted(server, "show", "J")
    assert result.exit_code == HTTP
    assert "oops red" in result.stderr and not any(c in result.output for c in CONTROLS)


@pytest.mark.parametrize("command", ["show", "create"])
def test_terminal_controls_in_a_job_are_not_printed(command):
    def answer(request):
        if request.command == "POST":
            return 303, {"Location": "/jobs/J"}, ""
        return 200, {}, job_document("J\x9b2J", "PENDING", run_id="\x9b31mred")

    with Scripted(answer) as server:
        result = scripted(server, command, "J" if command == "show" else "A=1")
    assert result.exit_code == 0, result.output
    assert "J2J" in result.stdout and not any(c in result.output for c in CONTROLS)


# -- odd answers and bad options: their exit codes, never a traceback ---------------------------------

@pytest.mark.parametrize(("answer", "code"), [
    (BROKEN["truncated"], CONNECTION),
    (BROKEN["bad-gzip"], PROTOCOL),
    (BROKEN["redirect-loop"], PROTOCOL),
    (lambda r: (503, {"Content-Type": "text/plain; charset=bogus"}, b"down \xe9"), HTTP),
], ids=["truncated", "bad-gzip", "redirect-loop", "unknown-charset"])
def test_a_broken_answer_exits_with_its_code_and_one_line(answer, code):
    with Scripted(answer) as server:
        result = scripted(server, "show", "J")
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("uws jobs: ") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("href", ["file:///etc/passwd", "ftp://127.0.0.1/x"])
def test_a_result_href_that_is_not_http_exits_8(href, tmp_path):
    with Scripted(lambda r: (200, {}, job_document("J", "COMPLETED", {"r": href}))) as server:
        result = scripted(server, "results", "J", "-o", str(tmp_path))
    assert result.exit_code == PROTOCOL, result.output
    assert len(server.requests) == 1


@pytest.mark.parametrize("url", ["127.0.0.1:8971/jobs", "http://[::1/x", "http://127.0.0.1:99999/x"])
def test_a_url_that_is_not_http_is_bad_usage(url):
    result = CliRunner().invoke(jobs, ["--url", url, "list"])
    assert result.exit_code == USAGE, result.output
    assert "--url" in result.stderr


@pytest.mark.parametrize("seconds", ["0", "-1"])
def test_an_http_timeout_not_above_zero_is_bad_usage(server, seconds):
    assert uws_jobs(server, "--http-timeout", seconds, "list").exit_code == USAGE


def test_an_answer_trickling_beyond_the_http_timeout_exits_7():
    body = job_document("J").encode()

    def trickle(request):
        request.send_response(200)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        try:
            for byte in body:
                request.wfile.write(bytes([byte]))
                request.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass

    with Scripted(trickle) as server:
        started = time.monotonic()
        result = CliRunner().invoke(jobs, ["--url", server.url, "--http-timeout", "1", "show", "J"])
        assert result.exit_code == CONNECTION and time.monotonic() - started < 3


def test_the_http_timeout_may_follow_the_subcommand():
    def slow(request):
        time.sleep(5)
        return 200, {}, job_document("J")

    with Scripted(slow) as server:
        started = time.monotonic()
        result = CliRunner().invoke(jobs, ["--url", server.url, "show", "J",
                                           "--http-timeout", "1"])
        assert result.exit_code == CONNECTION and time.monotonic() - started < 3


@pytest.fixture
def https_job(tmp_path):
    """(URL of an https job list whose certificate a CA of its own signed, that CA's
    bundle file)."""
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with Scripted(lambda r: (200, {}, job_document("J", "COMPLETED")), tls=context) as server:
        yield server.url, str(bundle)


def test_an_https_server_signed_by_an_unknown_authority_exits_7(https_job):
    url, _ = https_job
    result = CliRunner().invoke(jobs, ["--url", url, "show", "J"])
    assert result.exit_code == CONNECTION, result.output


@pytest.mark.parametrize("where", ["before", "after"])
def test_ca_bundle_names_the_authorities_an_https_server_is_checked_against(https_job, where):
    url, bundle = https_job
    option = ["--ca-bundle", bundle]
    args = [*option, "show", "J"] if where == "before" else ["show", "J", *option]
    result = CliRunner().invoke(jobs, ["--url", url, "--json", *args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["phase"] == "COMPLETED"


def test_ca_bundle_before_the_subcommand_wins_over_its_variable(https_job, tmp_path):
    url, bundle = https_job
    env = {"UWS_CA_BUNDLE": str(tmp_path / "gone.pem")}
    result = CliRunner().invoke(jobs, ["--url", url, "--ca-bundle", bundle, "show", "J"], env=env)
    assert result.exit_code == 0, result.output


def test_ca_bundle_from_the_variable(https_job):
    url, bundle = https_job
    result = CliRunner().invoke(jobs, ["--url", url, "show", "J"], env={"UWS_CA_BUNDLE": bundle})
    assert result.exit_code == 0, result.output


def test_ca_bundle_wins_over_requests_own_variable(https_job, tmp_path):
    url, bundle = https_job
    other = trustme.CA()
    other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    env = {"REQUESTS_CA_BUNDLE": str(tmp_path / "other.pem")}
    assert CliRunner().invoke(jobs, ["--url", url, "show", "J"], env=env).exit_code == CONNECTION
    result = CliRunner().invoke(jobs, ["--url", url, "show", "J", "--ca-bundle", bundle], env=env)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", ["run", "delete"])
def test_a_change_answered_308_is_not_reported_done(command):
    def answer(request):
        if request.command == "GET":
            return 200, {}, job_document("J")
        return 308, {"Location": request.path + "?canonical=1"}, ""

    with Scripted(answer) as server:
        result = scripted(server, command, "J")
    assert result.exit_code == PROTOCOL
    assert "?canonical=1" in result.stderr


def test_wait_timeout_bounds_a_wait_the_server_holds_too_long():
    with Scripted(holding_wait) as server:
        started = time.monotonic()
        result = scripted(server, "wait", "J", "--timeout", "2")
        assert result.exit_code == TIMEOUT and time.monotonic() - started < 4


def test_results_output_gives_each_result_a_file_of_its_own(tmp_path):
    ids = ["", ".", "..", "a/b", "a_b"]

    def answer(request):
        if request.path.startswith("/files/"):
            return 200, {}, request.path
        return 200, {}, job_document("J", "COMPLETED", {i: f"/files/{n}" for n, i in enumerate(ids)})

    with Scripted(answer) as server:
        result = scripted(server, "--json", "results", "J", "-o", str(tmp_path))
    saved = json.loads(result.stdout)
    assert len({s["path"] for s in saved}) == len(ids)
    assert [open(s["path"]).read() for s in saved] == [f"/files/{n}" for n in range(len(ids))]


# -- paging with a limit, versions, times, files, URLs ----------------------------------------------

#: the tests against our server need one database only (the client is what is tested)
BACKENDS = ("sqlite",)


def test_list_page_size_with_last_gives_the_last_jobs_on_a_server_knowing_only_last(server):
    made = [created(server, "DURATION=5") for _ in range(5)]
    listed = as_json(server, "list", "--page-size", "2", "--last", "3")
    assert [r["id"] for r in listed] == made[::-1][:3]


def test_list_page_size_with_last_on_our_server(live_server):
    url = f"{live_server.url}/sleep"
    made = [json.loads(CliRunner().invoke(jobs, ["--url", url, "--json", "create", "DURATION=5"])
                       .stdout)["id"] for _ in range(5)]
    result = CliRunner().invoke(jobs, ["--url", url, "--json", "list", "--page-size", "2",
                                       "--last", "3"])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)] == made[::-1][:3]


def test_version_of_uws_jobs():
    import uws
    result = CliRunner().invoke(jobs, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"uws {uws.__version__}\n")


def test_version_of_uws():
    import uws
    done = subprocess.run([UWS_COMMAND, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"uws {uws.__version__}\n")


def test_tables_show_times_to_the_second_and_json_keeps_them_whole(server):
    job_id = created(server, "DURATION=5")
    table = uws_jobs(server, "list").stdout
    stamp = as_json(server, "show", job_id)["creation_time"]      # 2026-…T17:40:14.847000Z
    assert "." in stamp and stamp[:19] + "Z" in table and stamp not in table
    assert stamp[:19] + "Z" in uws_jobs(server, "show", job_id).stdout


def test_json_of_a_job_names_its_id_id_and_still_job_id(server):
    job = as_json(server, "create", "DURATION=5")
    assert job["id"] == job["job_id"]


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_an_upload_that_cannot_be_read_exits_9_saying_why(server, tmp_path, what):
    path = tmp_path / "gone" if what == "missing" else tmp_path
    result = uws_jobs(server, "create", "DURATION=1", "--file", f"TABLE={path}")
    assert result.exit_code == 9, result.output
    said = "No such file or directory" if what == "missing" else "Is a directory"
    assert f"--file TABLE={path}: cannot read it: {said}" in result.stderr
    assert not [r for r in server.requests if r["method"] == "POST"]


def test_a_url_that_is_no_job_list_names_the_services_to_use(live_server):
    result = CliRunner().invoke(jobs, ["--url", f"{live_server.url}/", "list"])
    assert result.exit_code == PROTOCOL
    assert "is not a UWS job list" in result.stderr
    assert f"{live_server.url}/sleep" in result.stderr
