"""The first things anyone does: create a job, start the server."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_create_answers_303_to_absolute_job_url(client):
    r = client.post("/sleep", data={"DURATION": "0"})
    assert r.status_code == 303
    assert r.headers["Location"].startswith("http://localhost/sleep/")


@pytest.mark.parametrize("toml, named", [
    ('[server]\nport = "abc"\n', "port"),
    ('[services.x]\nrunner = "no colon"\n', "runner"),
    ('[[services.x.parameters]]\nname = "A"\ntype = "weird"\n', "weird"),
    ("this is not toml", "line 1"),
])
def test_a_bad_configuration_is_one_clear_line_and_exit_status_2(tmp_path, toml, named):
    path = tmp_path / "uws.toml"
    path.write_text(toml)
    done = subprocess.run([sys.executable, "-m", "uws", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("UWS_")})
    assert done.returncode == 2
    assert named in done.stderr and "Traceback" not in done.stderr
