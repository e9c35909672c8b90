#!/usr/bin/env python
"""The ceiling of bench/bench.py: the benchmark's URLs on a bare Flask app without storage.

It runs under the same server as ``uws serve`` (uws.http.server: waitress with the
same settings), so the benchmark's client, the HTTP server and Flask cost the same on
both sides; what the UWS server spends beyond this app is its own overhead (storage,
documents, hooks).  No UWS server can beat these figures with that client on that
machine.

    python bench/ceiling.py --port P

- ``POST /{service}`` reads the form and answers 303 to a new job URL;
- ``DELETE /{service}/{id}`` answers 303 to the list;
- ``GET|HEAD /{service}/{id}`` answers the job document last given for ``job``;
- ``GET|HEAD /{service}?query`` answers the list body last given for that query.

The bodies are the UWS server's own responses, captured by the benchmark and given
with ``PUT /_ceiling/body?key=...`` (body = the bytes, Content-Type = theirs), so both
sides send the same bytes.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import uuid

from flask import Flask, Response, abort, request


def make_app() -> Flask:
    app = Flask("ceiling")
    bodies: dict[str, tuple[bytes, str]] = {}

    @app.put("/_ceiling/body")
    def set_body():
        bodies[request.args["key"]] = (request.get_data(), request.content_type or "text/xml")
        return "", 204

    def answer(key: str) -> Response:
        if key not in bodies:
            abort(404)
        data, ctype = bodies[key]
        return Response(data, content_type=ctype)

    @app.post("/<service>")
    def create(service: str):
        if not request.form:        # a server must read the form it is sent
            abort(400)
        job_url = f"{request.host_url}{service}/{uuid.uuid4().hex}"
        return Response(status=303, headers={"Location": job_url})

    @app.get("/<service>")
    def job_list(service: str):
        return answer(request.query_string.decode())

    @app.get("/<service>/<job_id>")
    def job(service: str, job_id: str):
        return answer("job")

    @app.delete("/<service>/<job_id>")
    def delete(service: str, job_id: str):
        return Response(status=303, headers={"Location": f"{request.host_url}{service}"})

    return app


def main(argv=None) -> int:
    from uws.config import settings as config
    from uws.http import server as httpserver

    ap = argparse.ArgumentParser(description="the benchmark's ceiling server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    # The default configuration of uws serve: the same threads, limits and timeouts.
    cfg = config.load(None, env={}, host=args.host, port=args.port,
                      data_dir=tempfile.mkdtemp(prefix="uws-ceiling-"))
    server = httpserver.create(make_app(), cfg, httpserver.raise_open_file_limit(), args.host)
    print(f"ceiling server on http://{args.host}:{server.effective_port}/", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
