"""``uws jobs batch …`` and the Client's batch operations against this server over real
HTTP (batches are its extension; tests/test_batches.py covers the server's side on both
databases, so SQLite is enough here)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from uws.client import Client
from uws.client.cli import jobs

BACKENDS = ("sqlite",)
COMPLETED, USAGE, ERROR, ABORTED, TIMEOUT, HTTP, LOCAL_FILE = 0, 2, 3, 4, 5, 6, 9


@pytest.fixture
def url(live_server) -> str:
    return f"{live_server.url}/sleep"


def uws_jobs(url: str, *args: str):
    return CliRunner().invoke(jobs, ["--url", url, *args])


def as_json(url: str, *args: str):
    result = uws_jobs(url, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("DURATION,FAIL\n0,false\n0,true\n")
    return path


def test_batch_create_prints_the_batch_id_status_and_url(url, csv_file):
    result = uws_jobs(url, "batch", "create", str(csv_file))
    batch_id, status, batch_url = result.stdout.split()
    assert (result.exit_code, status, batch_url) == (0, "pending", f"{url}/batches/{batch_id}")


def test_batch_create_from_json_with_run_id(url, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text('[{"DURATION": 5}, {"DURATION": 6}, {"DURATION": 7}]')
    made = as_json(url, "batch", "create", str(path), "--run-id", "night-1")
    assert (made["run_id"], made["job_count"], made["phases"]["PENDING"]) == ("night-1", 3, 3)


def test_batch_show_follow_exits_3_when_a_job_failed(url, csv_file):
    made = as_json(url, "batch", "create", str(csv_file), "--run")
    result = uws_jobs(url, "batch", "show", made["id"], "--follow", "--timeout", "60")
    assert result.exit_code == ERROR, result.output
    assert "partially failed" in result.stdout and "FAIL=true" in result.stdout


def test_batch_show_follow_exits_0_when_every_job_completed(url, tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text("DURATION\n0\n0.2\n")
    made = as_json(url, "batch", "create", str(path), "--run")
    result = uws_jobs(url, "--json", "batch", "show", made["id"], "--follow", "--timeout", "60")
    assert result.exit_code == COMPLETED, result.output
    shown = json.loads(result.stdout)
    assert shown["status"] == "completed" and [j["phase"] for j in shown["jobs"]] == ["COMPLETED"] * 2


def test_batch_show_follow_of_a_pending_batch_says_to_run_it_and_times_out_with_5(url, csv_file):
    made = as_json(url, "batch", "create", str(csv_file))
    result = uws_jobs(url, "batch", "show", made["id"], "--follow", "--timeout", "0.5")
    assert result.exit_code == TIMEOUT
    assert f"uws jobs batch run {made['id']}" in result.stderr


def test_batch_run_queues_a_pending_batch(url, csv_file):
    made = as_json(url, "batch", "create", str(csv_file))
    assert as_json(url, "batch", "run", made["id"])["status"] != "pending"
    assert uws_jobs(url, "batch", "show", made["id"], "--follow", "--timeout", "60").exit_code == ERROR


def test_batch_abort_ends_it_aborted_and_follow_exits_4(url, tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("DURATION\n60\n60\n")
    made = as_json(url, "batch", "create", str(path), "--run")
    assert as_json(url, "batch", "abort", made["id"])["status"] == "aborted"
    assert uws_jobs(url, "batch", "show", made["id"], "--follow").exit_code == ABORTED


def test_batch_repeat_makes_a_batch_of_the_failed_jobs(url, csv_file):
    made = as_json(url, "batch", "create", str(csv_file), "--run")
    uws_jobs(url, "batch", "show", made["id"], "--follow", "--timeout", "60")
    again = as_json(url, "batch", "repeat", made["id"])
    assert again["id"] != made["id"] and (again["job_count"], again["status"]) == (1, "pending")


def test_batch_repeat_without_failed_jobs_exits_6_with_the_servers_message(url, csv_file):
    made = as_json(url, "batch", "create", str(csv_file))
    result = uws_jobs(url, "batch", "repeat", made["id"])
    assert result.exit_code == HTTP and "403" in result.stderr


def test_batch_list_shows_the_callers_batches_newest_first(url, csv_file):
    first = as_json(url, "batch", "create", str(csv_file))["id"]
    second = as_json(url, "batch", "create", str(csv_file))["id"]
    assert [b["id"] for b in as_json(url, "batch", "list")] == [second, first]
    assert second in uws_jobs(url, "batch", "list").stdout


def test_batch_delete_removes_it(url, csv_file):
    made = as_json(url, "batch", "create", str(csv_file))
    assert uws_jobs(url, "batch", "delete", made["id"]).exit_code == 0
    result = uws_jobs(url, "batch", "show", made["id"])
    assert result.exit_code == HTTP and "404" in result.stderr


def test_batch_create_of_a_file_neither_csv_nor_json_is_bad_usage(url, tmp_path):
    path = tmp_path / "jobs.txt"
    path.write_text("DURATION\n1\n")
    result = uws_jobs(url, "batch", "create", str(path))
    assert result.exit_code == USAGE and ".csv or .json" in result.stderr


def test_batch_create_of_a_missing_file_exits_9(url, tmp_path):
    result = uws_jobs(url, "batch", "create", str(tmp_path / "gone.csv"))
    assert result.exit_code == LOCAL_FILE and "No such file" in result.stderr


def test_a_bad_row_exits_6_naming_it(url, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("DURATION\n1\nsoon\n")
    result = uws_jobs(url, "batch", "create", str(path))
    assert result.exit_code == HTTP and "row 2" in result.stderr


def test_client_batch_of_rows_and_its_jobs(url):
    client = Client(url)
    made = client.create_batch([{"DURATION": 5}, {"DURATION": 6}])
    assert [client.get(j.url).parameter("DURATION") for j in made.jobs] == ["5", "6"]
    assert client.batch(made.id, all_jobs=False).jobs == ()
