"""Plain helpers and constants shared by the tests (fixtures live in conftest.py)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from lxml import etree

NS = {"uws": "http://www.ivoa.net/xml/UWS/v1.0",
      "xlink": "http://www.w3.org/1999/xlink",
      "xsi": "http://www.w3.org/2001/XMLSchema-instance"}
HREF = "{http://www.w3.org/1999/xlink}href"
NIL = "{http://www.w3.org/2001/XMLSchema-instance}nil"
ACTIVE = ("PENDING", "QUEUED", "EXECUTING")
#: The installed ``uws`` command, as users run it (beside this interpreter).
UWS_COMMAND = str(Path(sys.executable).with_name("uws"))


def files_under(root: Path, pattern: str = "*") -> list[Path]:
    """The files under ``root`` matching ``pattern``, but those of the executors' spare
    job directories (``jobs/.spare/``, made ahead of any job; uws.execution.jobdirs)."""
    return [p for p in Path(root).rglob(pattern)
            if p.is_file() and ".spare" not in p.relative_to(root).parts]


def path_of(url: str) -> str:
    """The path and query of an absolute URL, for the Flask test client."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def job_id(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def create(client, **params) -> str:
    """Create a sleep job; the path of its URL."""
    r = client.post("/sleep", data=params)
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def create_id(client, **params) -> str:
    """Create a sleep job; its id."""
    return job_id(create(client, **params))


def job_xml(client, path: str, query: str = ""):
    r = client.get(path + query)
    assert r.status_code == 200, r.data
    return etree.fromstring(r.data)


def text(el, tag: str):
    return el.findtext(f"uws:{tag}", namespaces=NS)


def phase(client, path: str) -> str:
    return client.get(f"{path}/phase").get_data(as_text=True)


def assert_303_to_job(r, path: str) -> None:
    assert r.status_code == 303, r.data
    assert r.headers["Location"] == f"http://localhost{path}"


def wait_while(client, path: str, phases) -> str:
    """Block with ``WAIT=10&PHASE=<current>`` until the job leaves ``phases``; its phase."""
    for _ in range(30):
        current = job_xml(client, path).findtext("uws:phase", namespaces=NS)
        if current not in phases:
            return current
        client.get(f"{path}?WAIT=10&PHASE={current}")
    pytest.fail(f"{path} stayed in {phases}")


def run_to_end(client, path: str) -> str:
    """RUN the job and block until it leaves the active phases; its phase."""
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    return wait_while(client, path, ACTIVE)


def wait_for(predicate, timeout=10.0, step=0.02):
    """Poll until ``predicate()`` holds (when, by the monotonic clock); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(step)
    pytest.fail("condition not reached in time")


def settle(client, path, timeout=15):
    """Poll until the job leaves the active phases; the response to GET of it."""
    wait_for(lambda: phase(client, path) not in ACTIVE, timeout)
    return client.get(path)


def gone(pids) -> bool:
    """True when none of ``pids`` runs any more (zombies count as gone)."""
    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # a zombie has exited; only its parent's wait() is missing
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    return not any(alive(p) for p in pids)
