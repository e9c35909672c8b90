"""The demo services' runners: ``sleep`` and ``checksum``."""
from __future__ import annotations

import hashlib
import time

from .runner import Context


def sleep(params: dict, ctx: Context) -> None:
    """Sleep DURATION seconds, reporting progress; ABORT kills the process."""
    duration = params["DURATION"]
    step = 0.1
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < duration:
        ctx.progress(100.0 * elapsed / duration, f"slept {elapsed:.1f} of {duration:g} s")
        time.sleep(min(step, duration - elapsed))
    if params["FAIL"]:
        raise RuntimeError(params["MESSAGE"] or "failed on request (FAIL=true)")
    ctx.progress(100.0, f"slept {duration:g} s")      # what finished, not the last step
    (ctx.workdir / "result.txt").write_text(f"slept {duration:g} s\n{params['MESSAGE']}\n")
    ctx.add_result("result", "result.txt", "text/plain")


def checksum(params: dict, ctx: Context) -> None:
    """Digest FILE: an upload, or a URL fetched by ``ctx.open_parameter``, which
    refuses internal addresses (loopback, private, ...) unless allow-listed."""
    algorithm = params["ALGORITHM"]
    digest = hashlib.new(algorithm)
    with ctx.open_parameter("FILE") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    (ctx.workdir / "checksum.txt").write_text(f"{digest.hexdigest()}  {algorithm}\n")
    ctx.add_result("checksum", "checksum.txt", "text/plain")
