"""Headers that make pages and downloads safe to serve on the internet."""
from __future__ import annotations

import io

from uwshelp import settle

#: one database is enough here (HTTP headers; tests/README.rst)
BACKENDS = ("sqlite",)

HTML = {"Accept": "text/html"}


def test_pages_forbid_inline_script_and_framing(client):
    r = client.get("/sleep", headers=HTML)
    policy = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert r.headers["X-Frame-Options"] == "DENY"


def test_every_response_forbids_type_sniffing(client):
    for path in ("/", "/sleep", "/sleep/0123456789abcdef0123456789abcdef"):
        assert client.get(path).headers["X-Content-Type-Options"] == "nosniff"


def test_a_result_is_an_attachment_of_its_declared_type_in_a_sandbox(client):
    path = client.post("/sleep", data={"DURATION": "0", "PHASE": "RUN"}).headers[
        "Location"].replace("http://localhost", "")
    settle(client, path)
    r = client.get(f"{path}/results/result")
    assert r.mimetype == "text/plain"
    assert r.headers["Content-Disposition"].startswith("attachment")
    assert r.headers["Content-Security-Policy"].startswith("sandbox")


def test_an_uploaded_file_is_served_as_an_opaque_attachment(client):
    evil = b"<html><script>alert(1)</script></html>"
    r = client.post("/checksum", data={"FILE": (io.BytesIO(evil), "page.html")},
                    content_type="multipart/form-data")
    path = r.headers["Location"].replace("http://localhost", "")
    r = client.get(f"{path}/parameters/FILE")
    assert r.data == evil
    assert r.mimetype == "application/octet-stream"
    assert r.headers["Content-Disposition"].startswith("attachment")
    assert r.headers["Content-Security-Policy"].startswith("sandbox")
