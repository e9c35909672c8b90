"""The one way a job reads a URL (uws.execution.fetch): internal addresses refused
unless allow-listed, checked again after every redirect, capped, and saying nothing
about internal hosts.  Every server here listens on 127.0.0.1 and nothing else is
contacted."""
from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from uws.execution.fetch import FetchError, fetch
from uws.usecases import addresses
from uws.usecases.addresses import public

from conftest import free_port
from uwshelp import ByteServer


class Handler(http.server.BaseHTTPRequestHandler):
    routes: dict = {}
    hits: list = []

    def do_GET(self):
        self.hits.append(self.path)
        status, headers, body = self.routes.get(self.path, (404, {}, b"no"))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if self.path.startswith("/unsized"):
            self.close_connection = True    # the body ends when the connection does
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """An HTTP server on 127.0.0.1: (base URL, its routes {path: (status, headers, body)})."""
    routes = {}
    handler = type("H", (Handler,), {"routes": routes, "hits": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    routes["hits"] = handler.hits
    yield f"http://127.0.0.1:{httpd.server_address[1]}", routes
    httpd.shutdown()
    httpd.server_close()


def test_a_loopback_url_is_refused_by_default(server, tmp_path):
    base, routes = server
    routes["/f"] = (200, {}, b"secret")
    with pytest.raises(FetchError, match="cannot be reached from this service"):
        fetch(f"{base}/f", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_open_and_a_closed_internal_port_give_the_same_error(server, tmp_path):
    base, _ = server
    closed = f"http://127.0.0.1:{free_port()}/f"
    messages = []
    for url in (f"{base}/f", closed):
        with pytest.raises(FetchError) as caught:
            fetch(url, tmp_path / "out")
        messages.append(str(caught.value).replace(url, "URL"))
    assert messages[0] == messages[1]


def test_a_closed_port_of_an_allow_listed_host_says_no_more_than_unreachable(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/f"
    with pytest.raises(FetchError) as caught:
        fetch(url, tmp_path / "out", allow_hosts=["127.0.0.1"])
    assert str(caught.value) == f"cannot fetch {url}: the host cannot be reached from this service"


def test_an_allow_listed_host_is_fetched(server, tmp_path):
    base, routes = server
    routes["/f"] = (200, {}, b"content")
    assert fetch(f"{base}/f", tmp_path / "out", allow_hosts=["127.0.0.1"]) == 7
    assert (tmp_path / "out").read_bytes() == b"content"


def test_a_redirect_to_a_host_not_allow_listed_is_refused(server, tmp_path):
    base, routes = server
    port = base.rsplit(":", 1)[1]
    routes["/f"] = (302, {"Location": f"http://localhost:{port}/g"}, b"")
    routes["/g"] = (200, {}, b"internal")
    with pytest.raises(FetchError, match="cannot be reached"):
        fetch(f"{base}/f", tmp_path / "out", allow_hosts=["127.0.0.1"])


def test_redirects_are_followed_a_bounded_number_of_times(server, tmp_path):
    base, routes = server
    routes["/a"] = (302, {"Location": "/b"}, b"")
    routes["/b"] = (301, {"Location": "/c"}, b"")
    routes["/c"] = (200, {}, b"end")
    routes["/loop"] = (302, {"Location": "/loop"}, b"")
    assert fetch(f"{base}/a", tmp_path / "out", allow_hosts=["127.0.0.1"]) == 3
    with pytest.raises(FetchError, match="more than 5 redirects"):
        fetch(f"{base}/loop", tmp_path / "loop", allow_hosts=["127.0.0.1"])
    assert routes["hits"].count("/loop") == 6


@pytest.mark.parametrize("path, size", [("/big", 5000), ("/unsized", 200_000)],
                         ids=["announced-length", "no-length"])
def test_a_body_past_the_size_cap_is_refused_and_not_kept(server, tmp_path, path, size):
    base, routes = server
    routes[path] = (200, {}, b"x" * size)
    with pytest.raises(FetchError, match="larger than 1000 bytes"):
        fetch(f"{base}{path}", tmp_path / "out", allow_hosts=["127.0.0.1"], max_bytes=1000)
    assert not (tmp_path / "out").exists()


def test_an_error_status_is_an_error(server, tmp_path):
    base, _ = server
    with pytest.raises(FetchError, match="answered 404"):
        fetch(f"{base}/none", tmp_path / "out", allow_hosts=["127.0.0.1"])


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://x/"])
def test_only_http_and_https_are_fetched(url, tmp_path):
    with pytest.raises(FetchError, match="only http and https"):
        fetch(url, tmp_path / "out", allow_hosts=["127.0.0.1", "x"])


def test_the_connection_goes_to_the_address_that_was_checked(server, tmp_path, monkeypatch):
    """A host name is resolved once per request: a second DNS answer (rebinding to
    an internal address after the check) is never asked for."""
    base, routes = server
    routes["/f"] = (200, {}, b"pinned")
    port = int(base.rsplit(":", 1)[1])
    lookups = []
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "files.example":
            lookups.append(host)
            return real("127.0.0.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(addresses.socket, "getaddrinfo", resolve)
    fetch(f"http://files.example:{port}/f", tmp_path / "out", allow_hosts=["files.example"])
    assert (tmp_path / "out").read_bytes() == b"pinned" and lookups == ["files.example"]


def test_a_name_resolving_to_any_internal_address_is_refused(server, tmp_path, monkeypatch):
    base, routes = server
    routes["/f"] = (200, {}, b"secret")
    port = int(base.rsplit(":", 1)[1])
    monkeypatch.setattr(addresses.socket, "getaddrinfo", lambda host, p, **kw: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", p)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p))])
    with pytest.raises(FetchError, match="cannot be reached"):
        fetch(f"http://mixed.example:{port}/f", tmp_path / "out")


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "::1", "::",
    "fe80::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1"])
def test_internal_addresses_are_not_public(address):
    assert not public(address)


@pytest.mark.parametrize("address", ["8.8.8.8", "2001:4860:4860::8888", "::ffff:8.8.8.8"])
def test_global_addresses_are_public(address):
    assert public(address)


@pytest.mark.parametrize("address", ["2002:7f00:1::1", "2002:a9fe:a9fe::1", "::ffff:10.0.0.1"])
def test_an_internal_ipv4_address_inside_ipv6_is_not_public(address):
    assert not public(address)      # 6to4 and mapped forms of 127.0.0.1, 169.254..., 10...


@pytest.mark.parametrize("trickle", ["head", "body"])
def test_a_server_trickling_its_answer_is_cut_off_at_the_fetchs_deadline(tmp_path, trickle):
    """Each byte would restart a read timeout: the deadline holds for the whole fetch."""
    server = ByteServer(trickle, size=100_000)
    try:
        started = time.monotonic()
        with pytest.raises(FetchError, match="timed out"):
            fetch(f"{server.base}/f", tmp_path / "out", allow_hosts=["127.0.0.1"], timeout=1.0)
        assert time.monotonic() - started < 2.0
        assert not (tmp_path / "out").exists()
    finally:
        server.close()


# -- https --------------------------------------------------------------------------------


def test_a_url_with_a_path_and_query_not_in_ascii_is_fetched_percent_encoded(tmp_path):
    server = ByteServer(size=3)
    try:
        url = f"{server.base}/caf\u00e9.fits?band=\u00b5m"
        assert fetch(url, tmp_path / "out", allow_hosts=["127.0.0.1"]) == 3
        assert server.requests[0].startswith(b"GET /caf%C3%A9.fits?band=%C2%B5m ")
    finally:
        server.close()


def test_https_is_fetched_with_the_certificate_checked_against_the_hosts_name(tmp_path, tls):
    server = ByteServer(size=5, tls=tls("files.example"))
    try:
        url = f"https://files.example:{server.port}/f"
        assert fetch(url, tmp_path / "out", allow_hosts=["files.example"]) == 5
        assert f"Host: files.example:{server.port}".encode() in server.requests[0]
    finally:
        server.close()


def test_a_certificate_for_another_name_fails_the_fetch(tmp_path, tls):
    server = ByteServer(size=5, tls=tls("other.example"))
    try:
        with pytest.raises(FetchError, match="the TLS handshake failed"):
            fetch(f"https://files.example:{server.port}/f", tmp_path / "out",
                  allow_hosts=["files.example"])
        assert not (tmp_path / "out").exists()
    finally:
        server.close()


@pytest.mark.parametrize("trickle", ["head", "body"])
def test_a_tls_server_trickling_its_answer_is_cut_off_at_the_deadline(tmp_path, tls, trickle):
    """The deadline shuts a socket down under TLS too, waking a read blocked in it."""
    server = ByteServer(trickle, size=100_000, tls=tls("files.example"))
    try:
        started = time.monotonic()
        with pytest.raises(FetchError, match="timed out"):
            fetch(f"https://files.example:{server.port}/f", tmp_path / "out",
                  allow_hosts=["files.example"], timeout=1.0)
        assert time.monotonic() - started < 2.0
    finally:
        server.close()
