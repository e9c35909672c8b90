#!/usr/bin/env python
"""What the JSON representations cost next to the XML ones (issue 13).

In process, through the WSGI app (no HTTP): the median CPU time of GET of one job, of
a page of 100 jobrefs and of the whole list of ``--jobs`` jobs, as XML and as JSON
(the two interleaved, so that other load on the machine weighs on both alike), and
the rendering alone of ``--refs`` jobrefs.  Prints one line per figure.

    python bench/representations.py [--jobs 2000] [--refs 100000] [--repeat 200]
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

from uws.config import settings as config_mod
from uws.domain.model import JobRef
from uws.domain.phases import Phase
from uws.render import json as jsonr
from uws.render import xml as xmlr
from uws.usecases.jobs import Control
from uws.web.app import create_app, shutdown

JSON = {"Accept": "application/json"}


def cpu_ms(action) -> float:
    start = time.process_time()
    action()
    return 1000 * (time.process_time() - start)


def compare(name: str, xml_action, json_action, repeat: int) -> None:
    xml_times, json_times = [], []
    for _ in range(repeat):
        xml_times.append(cpu_ms(xml_action))
        json_times.append(cpu_ms(json_action))
    xml_ms, json_ms = statistics.median(xml_times), statistics.median(json_times)
    print(f"{name:<34} XML {xml_ms:8.3f} ms   JSON {json_ms:8.3f} ms   "
          f"JSON/XML {json_ms / xml_ms:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_mod.from_dict({"services": {}}, env={}, data_dir=Path(tmp) / "data",
                                   database_url=f"sqlite:///{tmp}/uws.sqlite3",
                                   executor="none", scheduler=False)
        app = create_app(cfg)
        try:
            api, client = app.extensions["uws"], app.test_client()
            ids = [api.create("sleep", [("DURATION", "0"), ("MESSAGE", "x" * 20)], {},
                              Control(run_id="bench")) for _ in range(args.jobs)]
            job = f"/sleep/{ids[0]}"
            compare("GET {job}", lambda: client.get(job).data,
                    lambda: client.get(job, headers=JSON).data, args.repeat)
            compare("GET {jobs}?extend=100", lambda: client.get("/sleep?extend=100").data,
                    lambda: client.get("/sleep?extend=100", headers=JSON).data, args.repeat)
            compare("GET {jobs}?LAST=100", lambda: client.get("/sleep?LAST=100").data,
                    lambda: client.get("/sleep?LAST=100", headers=JSON).data, args.repeat)
            compare(f"GET {{jobs}} ({args.jobs} jobs)", lambda: client.get("/sleep").data,
                    lambda: client.get("/sleep", headers=JSON).data, max(args.repeat // 10, 5))
        finally:
            shutdown(app)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    refs = [JobRef(f"{n:032x}", Phase.COMPLETED, "bench", "alice", now) for n in range(args.refs)]

    def href(job_id: str) -> str:
        return "http://localhost/sleep/" + job_id
    compare(f"render {args.refs} jobrefs",
            lambda: b"".join(xmlr.job_list(refs, "http://localhost/sleep")),
            lambda: b"".join(jsonr.job_list(refs, href)), 5)


if __name__ == "__main__":
    main()
