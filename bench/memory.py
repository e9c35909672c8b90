#!/usr/bin/env python
"""The embedded server's memory while a 2 GiB result is downloaded and a 1 GiB
file is uploaded at the same time: both must stream through bounded buffers.

Starts ``uws serve`` (bench.py's ``Server``) with a config holding one command
service, ``big``, whose job writes a result of ``--result-mib`` MiB from
/dev/zero and whose optional file parameter ``IN`` accepts an upload.  Once the
result is there, one thread downloads it (read in 1 MiB pieces and discarded,
its bytes counted) while another creates a job uploading ``--upload-mib`` MiB as
multipart/form-data, generated on the fly (never held whole in this process
either) and hashed as it is sent; the upload is then checked against the file
the server stored (size and SHA-256).  Meanwhile the server's VmRSS is read
from /proc every ``--interval`` seconds.  See bench/README.rst.

    python bench/memory.py [--result-mib 2048] [--upload-mib 1024] [--put]
                           [--download-rate MIB_S] [--keep]
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Server, load_average  # noqa: E402

TARGET_MIB = 50             # the peak RSS during the transfers, above the idle figure
PIECE = 1 << 20             # what the client reads or sends at a time
TIMEOUT = 120               # seconds without progress on a socket
_JOB_RE = re.compile(r"/big/([^/?#\s]+)")


class RssSampler:
    """VmRSS of one process (all its threads; not its children), every ``interval``
    seconds in a thread of its own, until stopped: the peak and the last figure."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid = pid
        self.interval = interval
        self.samples = 0
        self.peak_kib: int | None = None
        self.last_kib: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def read(self) -> int | None:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return None

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            kib = self.read()
            if kib is not None:
                self.samples += 1
                self.last_kib = kib
                self.peak_kib = kib if self.peak_kib is None else max(self.peak_kib, kib)
            if self._stop.wait(self.interval):
                return


def mib(kib: int | None) -> str:
    return "unknown" if kib is None else f"{kib / 1024:.1f} MiB"


def config_toml(data_dir: Path, result_bytes: int, upload_bytes: int) -> str:
    # the job writes the result with head (fast; no client text reaches the shell)
    return f"""\
[server]
data_dir = "{data_dir}"
max_upload_bytes = {upload_bytes + (1 << 20)}

[services.big]
description = "Writes {result_bytes} bytes of zeros to big.bin"
command = ["sh", "-c", "head -c {result_bytes} /dev/zero > big.bin"]
outputs = [{{name = "big", file = "big.bin"}}]
max_result_bytes = {result_bytes + (1 << 30)}
anonymous_max_bytes = {4 * (result_bytes + upload_bytes)}
execution_duration = 600

[[services.big.parameters]]
name = "IN"
type = "file"
"""


class BigServer(Server):
    """bench.py's server, reading this benchmark's config file."""

    config_text = ""

    def _config_args(self) -> list[str]:
        path = self.log_path.with_name("uws.toml")
        path.write_text(self.config_text)
        return ["--config", str(path)]


def connect(url: str) -> http.client.HTTPConnection:
    host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)


def request(url: str, method: str, path: str, body=None, headers=None) -> tuple[int, dict, bytes]:
    conn = connect(url)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def make_result(url: str, deadline: float = 300) -> str:
    """Create and run the job writing the big result; its id once COMPLETED."""
    status, headers, body = request(url, "POST", "/big", body="PHASE=RUN",
                                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    if status != 303:
        raise RuntimeError(f"POST /big answered {status}: {body[:300]!r}")
    job = _JOB_RE.search(headers["Location"]).group(1)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        status, _, body = request(url, "GET", f"/big/{job}/phase")
        phase = body.decode().strip()
        if phase == "COMPLETED":
            return job
        if phase in ("ERROR", "ABORTED"):
            raise RuntimeError(f"the result job ended {phase}")
        request(url, "GET", f"/big/{job}?WAIT=30&PHASE={phase}")
    raise RuntimeError(f"the result job did not complete within {deadline} s")


def pending_job(url: str) -> str:
    status, headers, body = request(url, "POST", "/big")
    if status != 303:
        raise RuntimeError(f"POST /big answered {status}: {body[:300]!r}")
    return _JOB_RE.search(headers["Location"]).group(1)


class Download:
    """GET of the result, read in pieces and discarded; at most ``rate`` bytes a second
    when given (a slow reader: the server must then hold back, not buffer)."""

    def __init__(self, url: str, path: str, rate: float = 0):
        self.url, self.path, self.rate = url, path, rate
        self.status = 0
        self.bytes = 0
        self.seconds = 0.0
        self.error = ""

    def run(self) -> None:
        started = time.monotonic()
        conn = connect(self.url)
        try:
            conn.request("GET", self.path)
            r = conn.getresponse()
            self.status = r.status
            buffer = bytearray(PIECE)
            while n := r.readinto(buffer):
                self.bytes += n
                if self.rate:
                    time.sleep(max(0.0, started + self.bytes / self.rate - time.monotonic()))
        except Exception as exc:        # reported, not raised: the other thread goes on
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
            self.seconds = time.monotonic() - started


class Upload:
    """A multipart/form-data body with one file part of ``size`` pseudo-random bytes,
    made piece by piece as it is sent and hashed on the way."""

    def __init__(self, url: str, size: int, put_to: str = ""):
        self.url, self.size, self.put_to = url, size, put_to
        self.boundary = "uws-bench-" + secrets.token_hex(12)
        self.sha256 = hashlib.sha256()
        self.status = 0
        self.location = ""
        self.answer = b""
        self.seconds = 0.0
        self.error = ""
        self._head = (f"--{self.boundary}\r\nContent-Disposition: form-data; name=\"IN\"; "
                      f"filename=\"in.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                      ).encode()
        self._tail = f"\r\n--{self.boundary}--\r\n".encode()

    def _pieces(self, framed: bool = True):
        if framed:
            yield self._head
        # one random MiB, each copy made distinct by its index: cheap, and a
        # misplaced or repeated piece changes the digest
        block = bytearray(random.Random(12).randbytes(PIECE))
        sent = 0
        index = 0
        while sent < self.size:
            block[:8] = index.to_bytes(8, "big")
            piece = bytes(block[:min(PIECE, self.size - sent)])
            self.sha256.update(piece)
            sent += len(piece)
            index += 1
            yield piece
        if framed:
            yield self._tail

    def run(self) -> None:
        started = time.monotonic()
        conn = connect(self.url)
        try:
            if self.put_to:
                # the file alone, as the body of PUT {job}/parameters/IN
                body, length = self._pieces(framed=False), self.size
                conn.request("PUT", f"/big/{self.put_to}/parameters/IN", body=body, headers={
                    "Content-Type": "application/octet-stream", "Content-Length": str(length)})
            else:
                length = len(self._head) + self.size + len(self._tail)
                conn.request("POST", "/big", body=self._pieces(), headers={
                    "Content-Type": f"multipart/form-data; boundary={self.boundary}",
                    "Content-Length": str(length)})
            r = conn.getresponse()
            self.status, self.location, self.answer = r.status, r.getheader("Location", ""), r.read()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
            self.seconds = time.monotonic() - started


def stored_upload(data_dir: Path, job: str) -> Path:
    return data_dir / "jobs" / job[:2] / job / "uploads" / "IN"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(PIECE):
            h.update(piece)
    return h.hexdigest()


def rate(n: int, seconds: float) -> str:
    return f"{n / (1 << 20) / seconds:.0f} MiB/s" if seconds > 0 else "n/a"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--result-mib", type=int, default=2048, help="size of the downloaded result")
    p.add_argument("--upload-mib", type=int, default=1024, help="size of the uploaded file")
    p.add_argument("--put", action="store_true",
                   help="upload by PUT {job}/parameters/IN (application/octet-stream) to a PENDING "
                        "job instead of a multipart creation")
    p.add_argument("--download-rate", type=float, default=0, metavar="MIB_S",
                   help="read the download at most this fast (MiB/s; default: as fast as it comes)")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between RSS samples")
    p.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    return p.parse_args(argv)


def transfer(server: Server, args, failures: list[str]) -> None:
    result_bytes, upload_bytes = args.result_mib << 20, args.upload_mib << 20
    t0 = time.monotonic()
    job = make_result(server.url)
    print(f"result job {job} COMPLETED in {time.monotonic() - t0:.1f} s", flush=True)
    time.sleep(1)           # let the server settle after the job (its sweeps, the WAITs)
    sampler = RssSampler(server.proc.pid, args.interval)
    idle = []
    for _ in range(5):
        idle.append(sampler.read() or 0)
        time.sleep(0.05)
    idle_kib = max(idle)
    print(f"idle VmRSS {mib(idle_kib)} (largest of 5 readings 50 ms apart)", flush=True)

    down = Download(server.url, f"/big/{job}/results/big", args.download_rate * (1 << 20))
    up = Upload(server.url, upload_bytes, put_to=pending_job(server.url) if args.put else "")
    threads = [threading.Thread(target=down.run), threading.Thread(target=up.run)]
    sampler.start()
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    sampler.stop()
    after_kib = sampler.read()

    print(f"\ndownload: {down.bytes} bytes in {down.seconds:.1f} s ({rate(down.bytes, down.seconds)}), "
          f"status {down.status}" + (f", error {down.error}" if down.error else ""))
    print(f"upload:   {upload_bytes} bytes in {up.seconds:.1f} s ({rate(upload_bytes, up.seconds)}), "
          f"status {up.status}" + (f", error {up.error}" if up.error else ""))
    print(f"together: {wall:.1f} s, {rate(down.bytes + upload_bytes, wall)} both ways; both "
          f"running for the first {min(down.seconds, up.seconds):.1f} s")
    if down.status != 200 or down.bytes != result_bytes:
        failures.append(f"download: status {down.status}, {down.bytes} bytes, "
                        f"expected 200 and {result_bytes}")
    check_upload(server, up, upload_bytes, failures)

    delta = (sampler.peak_kib or 0) - idle_kib
    verdict = "PASS" if delta <= TARGET_MIB * 1024 else "FAIL"
    print(f"\nserver VmRSS: idle {mib(idle_kib)}, peak {mib(sampler.peak_kib)} during the "
          f"transfers ({sampler.samples} samples every {args.interval * 1000:.0f} ms), "
          f"after {mib(after_kib)}, VmHWM {mib(server.memory_kib('VmHWM'))}")
    print(f"peak − idle: {mib(delta)}   target ≤ {TARGET_MIB} MiB   {verdict}")
    if verdict == "FAIL":
        failures.append(f"the server's RSS grew by {mib(delta)}, over {TARGET_MIB} MiB")


def check_upload(server: Server, up: Upload, size: int, failures: list[str]) -> None:
    match = _JOB_RE.search(up.location)      # a PUT's 303 goes to its job too
    if up.status != 303 or match is None:
        failures.append(f"upload: status {up.status}, expected 303: {up.answer[:300]!r}")
        return
    path = stored_upload(server.data_dir, match.group(1))
    stored = path.stat().st_size if path.exists() else None
    digest = file_sha256(path) if stored is not None else ""
    same = stored == size and digest == up.sha256.hexdigest()
    print(f"upload stored: {stored} bytes, SHA-256 {digest[:16]}… "
          f"(sent {up.sha256.hexdigest()[:16]}…): {'intact' if same else 'DIFFERENT'}")
    if not same:
        failures.append(f"the stored upload differs: {stored} bytes, SHA-256 {digest}")


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    how = "by PUT {job}/parameters/IN" if args.put else "as multipart/form-data"
    print(f"UWS memory benchmark: download {args.result_mib} MiB while uploading "
          f"{args.upload_mib} MiB {how}; {os.cpu_count()} CPUs, load average {load_average()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="uws-memory-")).resolve()
    server = BigServer(tmp / "data", tmp / "server.log")
    server.config_text = config_toml(tmp / "data", args.result_mib << 20, args.upload_mib << 20)
    failures: list[str] = []
    status = 0
    try:
        server.start()
        print(f"server {server.url} data {server.data_dir}", flush=True)
        transfer(server, args, failures)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        status = 130
    except Exception as exc:
        print(f"\nmemory benchmark aborted: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 1
    finally:
        server.stop()
    problems = server.log_problems()
    print(f"\nServer log ({server.log_path}): {len(problems)} error lines")
    for line in problems[:20]:
        print(f"  {line}")
    if problems:
        failures.append(f"{len(problems)} error lines in the server log")
    print(f"load average after {load_average()}")
    if status == 0 and failures:
        status = 1
    print("\nRESULT: " + ("PASS" if status == 0 else "FAIL" + "".join(f"\n  - {f}" for f in failures)))
    if args.keep or status != 0:
        print(f"data directory kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
