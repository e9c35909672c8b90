"""A second, independent UWS 1.1 server for the client's tests: the standard library's
http.server, jobs in a dict, nothing of our app or our renderers.

Its quirks differ from our server's on purpose, so the client is shown to follow UWS and
not our habits: WAIT is ignored (answers at once), documents use the prefixes ``u:`` and
``xl:``, the list pages with ``Link: rel="next"`` (``?page=N``), Locations are relative,
a result's href answers 303 to where its bytes are served (with byte ranges, unless
``ranges=False``), progress is ``<m:percent>`` in jobInfo, and ``version`` can be left
out (a UWS 1.0 server).

A job runs by the clock: RUN makes it EXECUTING; DURATION seconds later a read finds it
COMPLETED (ERROR with FAIL=true). Every request is recorded in ``requests``.
"""
from __future__ import annotations

import base64
import datetime as dt
import email.parser
import email.policy
import ssl
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape, quoteattr

UWS = "http://www.ivoa.net/xml/UWS/v1.0"
XLINK = "http://www.w3.org/1999/xlink"
FINAL = {"COMPLETED", "ERROR", "ABORTED"}
#: how often a test server looks for its shutdown (the standard library's 0.5 s
#: made every test using one wait that long to stop it)
POLL_S = 0.02


def _time(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class MinimalUWS:
    """``with MinimalUWS() as server: server.url`` is its job list."""

    def __init__(self, users: dict[str, str] | None = None, tokens: dict[str, str] | None = None,
                 version: str | None = "1.1", page_size: int = 2, result_bytes: int = 200_000,
                 ranges: bool = True, cut_after: int | None = None, run_on_create: bool = True):
        self.users = users or {}
        self.tokens = tokens or {}
        self.version = version
        self.page_size = page_size
        self.result_bytes = result_bytes
        self.ranges = ranges            # False: Range headers ignored, whole files sent
        self.cut_after = cut_after      # a whole file's connection breaks after these bytes
        self.run_on_create = run_on_create  # False: PHASE=RUN with the creation is ignored (a MAY)
        self.jobs: dict[str, dict] = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.root + "/jobs"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(POLL_S,), daemon=True)

    def __enter__(self) -> MinimalUWS:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the jobs -------------------------------------------------------------------------

    def advance(self, job: dict) -> None:
        if job["phase"] == "EXECUTING" and time.time() >= job["start"] + job["duration"]:
            job["end"] = time.time()
            job["phase"] = "ERROR" if job["fail"] else "COMPLETED"

    def content(self, job: dict, name: str) -> bytes:
        if name == "echo":
            return job["upload"] if job["upload"] is not None else bytes(
                i * 7 % 251 for i in range(self.result_bytes))
        return f"job {job['id']} done\n".encode()

    def job_xml(self, job: dict) -> str:
        params = "".join(
            f"<u:parameter id={quoteattr(k)}>{escape(v)}</u:parameter>" for k, v in job["params"])
        results = ""
        if job["phase"] == "COMPLETED":
            results = "".join(
                f'<u:result id="{name}" xl:href="/jobs/{job["id"]}/results/{name}" '
                f'size="{len(self.content(job, name))}" mime-type="{mime}"/>'
                for name, mime in (("echo", "application/octet-stream"), ("note", "text/plain")))
        error = ""
        if job["phase"] == "ERROR":
            error = ('<u:errorSummary type="fatal" hasDetail="false">'
                     "<u:message>failed as asked (FAIL=true)</u:message></u:errorSummary>")
        info = ""
        if job["phase"] == "EXECUTING" and job["duration"]:
            percent = 100 * (time.time() - job["start"]) / job["duration"]
            info = f'<u:jobInfo><m:percent xmlns:m="urn:minimal">{percent:.0f}</m:percent></u:jobInfo>'
        owner = (f"<u:ownerId>{escape(job['owner'])}</u:ownerId>" if job["owner"]
                 else '<u:ownerId xsi:nil="true"/>')
        return (f'<?xml version="1.0"?>\n<u:job xmlns:u="{UWS}" xmlns:xl="{XLINK}" '
                f'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"{self._version()}>'
                f"<u:jobId>{job['id']}</u:jobId>"
                + (f"<u:runId>{escape(job['run_id'])}</u:runId>" if job["run_id"] else "")
                + f"{owner}<u:phase>{job['phase']}</u:phase>"
                f"<u:creationTime>{_time(job['created'])}</u:creationTime>"
                + _nillable("startTime", _time(job["start"])) + _nillable("endTime", _time(job["end"]))
                + "<u:executionDuration>0</u:executionDuration>" + _nillable("destruction", None)
                + f"<u:parameters>{params}</u:parameters><u:results>{results}</u:results>"
                f"{error}{info}</u:job>")

    def list_xml(self, refs: list[dict]) -> str:
        body = "".join(
            f'<u:jobref id="{j["id"]}" xl:href="/jobs/{j["id"]}"><u:phase>{j["phase"]}</u:phase>'
            + (f"<u:runId>{escape(j['run_id'])}</u:runId>" if j["run_id"] else "")
            + f"<u:creationTime>{_time(j['created'])}</u:creationTime></u:jobref>" for j in refs)
        return (f'<?xml version="1.0"?>\n<u:jobs xmlns:u="{UWS}" xmlns:xl="{XLINK}"{self._version()}>'
                f"{body}</u:jobs>")

    def _version(self) -> str:
        return f' version="{self.version}"' if self.version else ""


def _nillable(name: str, value: str | None) -> str:
    return f"<u:{name}>{value}</u:{name}>" if value else f'<u:{name} xsi:nil="true"/>'


def _handler(server: MinimalUWS):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        # -- plumbing ----------------------------------------------------------------------

        def _reply(self, status: int, body: bytes | str = b"", ctype: str = "text/plain",
                   headers: dict | None = None) -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _see(self, location: str) -> None:
            self._reply(303, b"", headers={"Location": location})

        def _owner(self) -> str | None | bool:
            """The caller's name; None when anonymous is fine; False: refused (401 sent)."""
            if not server.users and not server.tokens:
                return None
            header = self.headers.get("Authorization", "")
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "basic":
                user, _, password = base64.b64decode(value).decode().partition(":")
                if server.users.get(user) == password:
                    return user
            if scheme.lower() == "bearer" and value in server.tokens:
                return server.tokens[value]
            self._reply(401, "who are you?", headers={"WWW-Authenticate": 'Basic realm="minimal"'})
            return False

        def _form(self) -> tuple[list[tuple[str, str]], dict[str, bytes]]:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            ctype = self.headers.get("Content-Type", "")
            if ctype.startswith("multipart/form-data"):
                message = email.parser.BytesParser(policy=email.policy.default).parsebytes(
                    b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
                fields, files = [], {}
                for part in message.iter_parts():
                    name = part.get_param("name", header="content-disposition")
                    payload = part.get_payload(decode=True)
                    if part.get_filename() is not None:
                        files[name] = payload
                    else:
                        fields.append((name, payload.decode()))
                return fields, files
            pairs = parse_qs(body.decode(), keep_blank_values=True)
            return [(k, v) for k, vs in pairs.items() for v in vs], {}

        def _job(self, job_id: str, owner) -> dict | None:
            job = server.jobs.get(job_id)
            if job is None or job["owner"] != owner:
                self._reply(404, f"no such job: {job_id}")
                return None
            server.advance(job)
            return job

        def _record(self) -> tuple[list[str], dict]:
            split = urlsplit(self.path)
            query = parse_qs(split.query, keep_blank_values=True)
            server.requests.append({"method": self.command, "path": split.path, "query": query,
                                    "headers": dict(self.headers), "time": time.monotonic()})
            return [p for p in split.path.split("/") if p], query

        # -- methods -----------------------------------------------------------------------

        def do_GET(self):
            parts, query = self._record()
            if parts[:1] == ["files"] and len(parts) == 3:
                return self._file(parts[1], parts[2])
            owner = self._owner()
            if owner is False:
                return
            with server.lock:
                if parts == ["jobs"]:
                    return self._list(owner, query)
                if len(parts) < 2 or parts[0] != "jobs" or (job := self._job(parts[1], owner)) is None:
                    return self._reply(404, "nothing here") if len(parts) < 2 or parts[0] != "jobs" else None
                rest = parts[2:]
                if not rest:
                    return self._reply(200, server.job_xml(job), "text/xml")
                if rest == ["phase"]:
                    return self._reply(200, job["phase"])
                if len(rest) == 3 and rest[0] == "results" and job["phase"] == "COMPLETED":
                    return self._see(f"/files/{job['id']}/{rest[1]}")
                if len(rest) == 2 and rest[0] == "results" and job["phase"] == "COMPLETED":
                    return self._see(f"/files/{job['id']}/{rest[1]}")
                return self._reply(404, "no such resource")

        def _list(self, owner, query) -> None:
            jobs = [j for j in server.jobs.values() if j["owner"] == owner]
            for j in jobs:
                server.advance(j)
            jobs.sort(key=lambda j: j["created"], reverse=True)
            if "PHASE" in query:
                jobs = [j for j in jobs if j["phase"] in query["PHASE"]]
            if "AFTER" in query:
                after = dt.datetime.fromisoformat(query["AFTER"][0]).timestamp()
                jobs = [j for j in jobs if j["created"] > after]
            if "LAST" in query:
                jobs = jobs[:int(query["LAST"][0])]
            page = int(query.get("page", ["0"])[0])
            size = server.page_size
            headers = {}
            if len(jobs) > (page + 1) * size:
                rest = "&".join(f"{k}={v}" for k, vs in query.items() if k != "page" for v in vs)
                headers["Link"] = f'</jobs?page={page + 1}{"&" + rest if rest else ""}>; rel="next"'
            self._reply(200, server.list_xml(jobs[page * size:(page + 1) * size]), "text/xml", headers)

        def _file(self, job_id: str, name: str) -> None:
            job = server.jobs.get(job_id)
            if job is None or name not in ("echo", "note"):
                return self._reply(404, "no such file")
            data = server.content(job, name)
            ranged = self.headers.get("Range", "")
            if server.ranges and ranged.startswith("bytes=") and ranged.endswith("-"):
                start = int(ranged[6:-1])
                if start >= len(data):
                    return self._reply(416, b"", headers={"Content-Range": f"bytes */{len(data)}"})
                return self._reply(206, data[start:], "application/octet-stream",
                                   {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}",
                                    "Accept-Ranges": "bytes"})
            if server.cut_after is not None:
                return self._cut(data, server.cut_after)
            self._reply(200, data, "application/octet-stream",
                        {"Accept-Ranges": "bytes"} if server.ranges else {})

        def _cut(self, data: bytes, after: int) -> None:
            """Promise the whole file, send its start, and hang up."""
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            self.wfile.write(data[:after])
            self.wfile.flush()
            self.close_connection = True

        def do_POST(self):
            parts, query = self._record()
            owner = self._owner()
            if owner is False:
                return
            fields, files = self._form()
            with server.lock:
                if parts == ["jobs"]:
                    return self._create(owner, fields, files)
                if len(parts) != 3 or parts[0] != "jobs" or (job := self._job(parts[1], owner)) is None:
                    return None if len(parts) == 3 else self._reply(404, "nothing here")
                if parts[2] == "phase":
                    return self._phase(job, dict(fields).get("PHASE", ""))
                if parts[2] == "parameters":
                    if job["phase"] != "PENDING":
                        return self._reply(403, "parameters are frozen once the job has started")
                    _set_parameters(job, fields)
                    return self._see(f"/jobs/{job['id']}")
                return self._reply(404, "no such resource")

        def _create(self, owner, fields, files) -> None:
            job_id = uuid.uuid4().hex[:10]
            job = {"id": job_id, "owner": owner, "phase": "PENDING", "params": [], "created": time.time(),
                   "start": None, "end": None, "duration": 0.0, "fail": False, "run_id": None,
                   "upload": next(iter(files.values()), None)}
            _set_parameters(job, [(k, v) for k, v in fields if k.upper() != "PHASE"])
            for name in files:
                job["params"].append((name, "(uploaded)"))
            server.jobs[job_id] = job
            if ("PHASE", "RUN") in fields and server.run_on_create:
                self._start(job)
            self._see(f"jobs/{job_id}")       # relative, on purpose

        def _phase(self, job: dict, phase: str) -> None:
            if phase == "RUN" and job["phase"] == "PENDING":
                self._start(job)
            elif phase == "ABORT" and job["phase"] not in FINAL:
                job["phase"], job["end"] = "ABORTED", time.time()
            elif phase in ("RUN", "ABORT"):
                return self._reply(403, f"cannot {phase} a job that is {job['phase']}")
            else:
                return self._reply(400, f"PHASE={phase}?")
            self._see(f"/jobs/{job['id']}")

        def _start(self, job: dict) -> None:
            job["phase"], job["start"] = "EXECUTING", time.time()

        def do_DELETE(self):
            parts, _ = self._record()
            owner = self._owner()
            if owner is False:
                return
            with server.lock:
                if len(parts) != 2 or (job := self._job(parts[1], owner)) is None:
                    return None if len(parts) == 2 else self._reply(404, "nothing here")
                del server.jobs[job["id"]]
            self._see("/jobs")

    return Handler


def _set_parameters(job: dict, fields: list[tuple[str, str]]) -> None:
    for name, value in fields:
        key = name.upper()
        if key == "RUNID":
            job["run_id"] = value
        elif key == "DURATION":
            job["duration"] = float(value)
        elif key == "FAIL":
            job["fail"] = value.lower() == "true"
        if key != "RUNID":
            job["params"] = [(k, v) for k, v in job["params"] if k.upper() != key] + [(name, value)]


# -- a server of one behaviour, for the client's odd cases --------------------------------------

class Scripted:
    """``with Scripted(answer) as server``: every request is answered by ``answer(request)``,
    which returns ``(status, headers, body)``, or None once it has written the answer to
    ``request.wfile`` itself (a trickle, a broken body). ``request`` is the handler: its
    ``command``, ``path`` (with the query), ``headers``, and ``body`` (what was posted).
    Every request is recorded in ``requests``; ``url`` is ``{root}/jobs``."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None):
        self.answer = answer
        self.requests: list[dict] = []
        self.httpd = _QuietOnRefusedTLS(("127.0.0.1", 0), _scripted_handler(self))
        self.httpd.daemon_threads = True
        if tls is not None:     # https: the handshake in each request's thread
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True,
                                                do_handshake_on_connect=False)
        scheme = "http" if tls is None else "https"
        self.root = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.root + "/jobs"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(POLL_S,), daemon=True)

    def __enter__(self) -> Scripted:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietOnRefusedTLS(ThreadingHTTPServer):
    """A client refusing the certificate is what the https tests expect: no traceback
    in the test run's output for it (other errors are printed as usual)."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ssl.SSLError):
            super().handle_error(request, client_address)


def _scripted_handler(server: Scripted):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _any(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.body = self.rfile.read(length) if length else b""
            server.requests.append({"method": self.command, "path": self.path,
                                    "headers": dict(self.headers), "body": self.body})
            answer = server.answer(self)
            if answer is None:
                return
            status, headers, body = answer
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            headers = {"Content-Type": "text/xml", **headers}
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:       # a client that stopped reading
                self.close_connection = True

        do_GET = do_POST = do_DELETE = _any

    return Handler


def job_document(job_id: str, phase: str = "PENDING", results: dict[str, str] | None = None,
                 run_id: str | None = None, created: str = "2024-01-01T00:00:00Z") -> str:
    """A UWS 1.1 job document; ``results`` maps result ids to hrefs."""
    listed = "".join(f"<u:result id={quoteattr(i)} xl:href={quoteattr(h)}/>"
                     for i, h in (results or {}).items())
    return (f'<?xml version="1.0"?>\n<u:job xmlns:u="{UWS}" xmlns:xl="{XLINK}" version="1.1">'
            f"<u:jobId>{escape(job_id)}</u:jobId>"
            + (f"<u:runId>{escape(run_id)}</u:runId>" if run_id is not None else "")
            + f"<u:phase>{phase}</u:phase><u:creationTime>{escape(created)}</u:creationTime>"
            f"<u:results>{listed}</u:results></u:job>")


def job_list(*jobs: tuple[str, str], href: bool = True) -> str:
    """A UWS 1.1 job list of (id, phase), with hrefs relative to the list or none."""
    refs = "".join(f"<u:jobref id={quoteattr(i)}"
                   + (f" xl:href={quoteattr('jobs/' + i)}" if href else "")
                   + f"><u:phase>{p}</u:phase></u:jobref>" for i, p in jobs)
    return f'<?xml version="1.0"?>\n<u:jobs xmlns:u="{UWS}" xmlns:xl="{XLINK}" version="1.1">{refs}</u:jobs>'


def _truncated(request):
    """A job document cut short: 100 of the 5000 bytes announced, then the end."""
    request.send_response(200)
    request.send_header("Content-Length", "5000")
    request.end_headers()
    request.wfile.write(job_document("J").encode()[:100])
    request.close_connection = True


#: Answers no client can read, for Scripted: each by what is wrong with it.
BROKEN = {
    "truncated": _truncated,
    "bad-gzip": lambda r: (200, {"Content-Encoding": "gzip"}, "not gzip"),
    "redirect-loop": lambda r: (302, {"Location": r.path}, ""),
}


def holding_wait(request):
    """An EXECUTING job, held far longer than a WAIT asks (20 s) when one is asked."""
    if "WAIT=" in request.path:
        time.sleep(20)
    return 200, {}, job_document("J", "EXECUTING")
