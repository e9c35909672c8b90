#!/usr/bin/env python
"""What one batch body at the size cap costs the server to parse: peak RSS growth, wall
and CPU time, for the worst bodies an anonymous client can send.

    python bench/batchbodies.py [--cases json-empty,json-one-key,csv-one-value|all] [--mib 32]

Each case runs in a fresh Python process of its own (so one case's peak cannot hide
another's): it builds the app in process (a temporary SQLite database, the demo
services, no executor, no scheduler), sends one small batch to load the code, builds
the body (``--mib`` MiB, by default the server's cap ``MAX_BATCH_BYTES``), reads its own
``VmRSS`` (the idle figure, which includes the body: a real server keeps a big body in
waitress's temporary file, not in memory) after resetting its peak (``VmHWM``, through
``/proc/self/clear_refs``), POSTs the body to ``/sleep/batches`` through Flask's test
client (as its input stream: given as ``data`` the client would copy it), then reads
``VmHWM`` (the peak) and the wall and CPU time of the POST.  Nothing leaves the
process; each case is bounded by a timeout.
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time

TIMEOUT = 600           # seconds a case may take before it is reported as such
CASES = {
    # name: (content type, the body's opening, one row, the closing)
    "json-empty": ("application/json", b"[", b"{},", b"{}]"),
    "json-one-key": ("application/json", b"[", b'{"DURATION":0},', b'{"DURATION":0}]'),
    "csv-one-value": ("text/csv", b"DURATION\n", b"0\n", b"0\n"),
    # within the row limit, but every byte still to be read: one row of 16 M values (of a
    # parameter that takes one: refused by the use case, after parsing), whitespace,
    # blank lines
    "json-one-row": ("application/json", b'[{"DURATION":[', b"0,", b"0]}]"),
    "json-spaces": ("application/json", b"[", b" ", b"{}]"),
    "csv-blank-lines": ("text/csv", b"DURATION\n", b"\n", b"0\n"),
    # rows of 512 values each: as many values as fit
    "json-dense-rows": ("application/json", b"[", b'{"DURATION":[' + b"0," * 511 + b"0]},",
                        b"{}]"),
    "csv-dense-rows": ("text/csv", b"DURATION," * 511 + b"DURATION\n", b"0," * 511 + b"0\n",
                       b"0\n"),
}
DEFAULT_CASES = ("json-empty", "json-one-key", "csv-one-value")


def body(case: str, size: int) -> bytes:
    """The case's body, as many rows as fit in ``size`` bytes, made without a second copy
    of it (which would raise the peak before the POST is even sent)."""
    _, head, row, tail = CASES[case]
    rows = (size - len(head) - len(tail)) // len(row)
    piece = row * 4096
    return b"".join([head, *[piece] * (rows // 4096), row * (rows % 4096), tail])


def status_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (the peak) of this process, in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Start VmHWM afresh from the current RSS (Linux >= 4.0), so that making the app
    and the body does not count."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child(case: str, size: int) -> dict:
    from uws.config import settings as config_mod
    from uws.web.app import create_app, shutdown
    data_dir = tempfile.mkdtemp(prefix="uws-batchbodies-")
    cfg = config_mod.from_dict({}, env={}, data_dir=data_dir, executor="none",
                               scheduler=False, fork_server_at_start=False)
    app = create_app(cfg)
    try:
        client = app.test_client()
        warm = client.post("/sleep/batches", data='[{"DURATION": 0}]',
                           content_type="application/json")
        assert warm.status_code == 303, warm.data
        ctype = CASES[case][0]
        data = body(case, size)
        reset_peak()
        idle = status_kib("VmRSS")
        wall, cpu = time.perf_counter(), time.process_time()
        answer = client.post("/sleep/batches", input_stream=io.BytesIO(data),
                             content_length=len(data), content_type=ctype)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peak = status_kib("VmHWM")
        return {"case": case, "bytes": len(data), "status": answer.status_code,
                "answer": answer.get_data(as_text=True).strip()[:100],
                "idle_mib": idle / 1024, "growth_mib": max(peak - idle, 0) / 1024,
                "wall_s": wall, "cpu_s": cpu}
    finally:
        shutdown(app)
        shutil.rmtree(data_dir, ignore_errors=True)


def run_case(case: str, size: int) -> dict:
    try:
        done = subprocess.run([sys.executable, __file__, "--child", case, "--bytes", str(size)],
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": f"over {TIMEOUT} s"}
    if done.returncode != 0:
        return {"case": case, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help=f"of {', '.join(CASES)} (or all)")
    parser.add_argument("--mib", type=float, default=None,
                        help="body size in MiB (default: the server's MAX_BATCH_BYTES)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.bytes)))
        return
    from uws.web.batchbodies import MAX_BATCH_BYTES
    size = int(args.mib * (1 << 20)) if args.mib else MAX_BATCH_BYTES
    print(f"body size {size} bytes; one fresh process per case")
    print(f"{'case':<15} {'status':>6} {'idle MiB':>9} {'peak-idle MiB':>14} {'wall s':>7} "
          f"{'CPU s':>6}  answer")
    for case in CASES if args.cases == "all" else args.cases.split(","):
        r = run_case(case, size)
        if "error" in r:
            print(f"{case:<15} failed: {r['error']}")
            continue
        print(f"{case:<15} {r['status']:>6} {r['idle_mib']:9.1f} {r['growth_mib']:14.1f} "
              f"{r['wall_s']:7.2f} {r['cpu_s']:6.2f}  {r['answer']}", flush=True)


if __name__ == "__main__":
    main()
