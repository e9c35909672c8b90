"""The demo services' runners: ``sleep`` and ``checksum``."""
from __future__ import annotations

import hashlib
import time


def sleep(params: dict, ctx) -> None:
    """Sleep DURATION seconds, reporting progress; ABORT kills the process."""
    duration = params["DURATION"]
    step = 0.1
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < duration:
        ctx.progress(100.0 * elapsed / duration, f"slept {elapsed:.1f} of {duration:g} s")
        time.sleep(min(step, duration - elapsed))
    if params["FAIL"]:
        raise RuntimeError(params["MESSAGE"] or "failed on request (FAIL=true)")
    (ctx.workdir / "result.txt").write_text(f"slept {duration:g} s\n{params['MESSAGE']}\n")
    ctx.add_result("result", "result.txt", "text/plain")


def checksum(params: dict, ctx) -> None:
    algorithm = params["ALGORITHM"]
    digest = hashlib.new(algorithm)
    source = params["FILE"]
    if source.startswith("param:"):
        with open(ctx.upload_path("FILE"), "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    else:
        import requests
        with requests.get(source, stream=True, timeout=60) as response:
            response.raise_for_status()
            for chunk in response.iter_content(1 << 20):
                digest.update(chunk)
    (ctx.workdir / "checksum.txt").write_text(f"{digest.hexdigest()}  {algorithm}\n")
    ctx.add_result("checksum", "checksum.txt", "text/plain")
