#!/usr/bin/env python
"""The Python client (uws.client, installed) against gzip bombs: a result and a job
document sent with ``Content-Encoding: gzip, gzip`` that decode to ``--mib`` MiB (1 GiB)
from about 2 KB on the wire. Prints, for each, what the client did, how long it took
and this process's peak memory (VmHWM) before and after; the download's file size is
the figure that matters (the body as sent, not the 1 GiB it would decode to).

    python bench/client_bombs.py [--mib 1024]

A standard-library HTTP server in a thread of this process serves both, on 127.0.0.1.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from uws.client import Client, UWSError

UWS = "http://www.ivoa.net/xml/UWS/v1.0"


def gzip(chunks) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([*(packer.compress(c) for c in chunks), packer.flush()])


def bomb(start: bytes, mib: int) -> bytes:
    """``start`` and ``mib`` MiB of spaces, gzipped twice; one MiB buffer, reused."""
    return gzip([gzip([start, *([b" " * (1 << 20)] * mib)])])


def peak_kib() -> int:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1])
    return -1


def serve(result: bytes, document: bytes) -> ThreadingHTTPServer:
    job = (f'<job xmlns="{UWS}" xmlns:xl="http://www.w3.org/1999/xlink"><jobId>J</jobId>'
           "<phase>COMPLETED</phase><results><result id='r.fits' xl:href='/files/r'/>"
           "</results></job>").encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            body, coded = {"/files/r": (result, True), "/jobs/BOMB": (document, True)}.get(
                self.path, (job, False))
            self.send_response(200)
            if coded:
                self.send_header("Content-Encoding", "gzip, gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="what each bomb decodes to (MiB)")
    args = parser.parse_args()
    started = time.monotonic()
    result = bomb(b"SIMPLE  =                    T", args.mib)
    document = bomb(f'<?xml version="1.0"?><job xmlns="{UWS}">'.encode(), args.mib)
    print(f"bombs of {args.mib} MiB decoded: result {len(result)} B, document {len(document)} B "
          f"on the wire (made in {time.monotonic() - started:.1f} s)")
    httpd = serve(result, document)
    client = Client(f"http://127.0.0.1:{httpd.server_address[1]}/jobs")
    try:
        with tempfile.TemporaryDirectory() as folder:
            before, started = peak_kib(), time.monotonic()
            saved = client.download(client.result("J", "r.fits"), Path(folder) / "r.fits")
            print(f"result download: {saved.stat().st_size} B on disk in "
                  f"{time.monotonic() - started:.2f} s; peak memory {before} -> {peak_kib()} KiB")
        before, started = peak_kib(), time.monotonic()
        try:
            client.get("BOMB")
            outcome = "read (not refused)"
        except UWSError as exc:
            outcome = f"refused: {exc}"
        print(f"job document: {outcome} in {time.monotonic() - started:.2f} s; "
              f"peak memory {before} -> {peak_kib()} KiB")
    finally:
        httpd.shutdown()
        httpd.server_close()


if __name__ == "__main__":
    main()
