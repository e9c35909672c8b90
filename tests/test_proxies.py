"""Behind a trusted reverse proxy ([server] trusted_proxies): the client is the address
the proxy forwards, links use its scheme and host, and its connections are not capped
per address.  Forwarding headers from any other peer are ignored."""
from __future__ import annotations

import base64
import logging
import subprocess

import pytest
from werkzeug.security import generate_password_hash

from test_connections import _closed_by_server, _connect, _descriptors, serve  # noqa: F401
from uws.auth import AuthConfig
from uws.config.settings import ConfigError, from_dict
from uws.http.proxies import TrustedProxies, networks
from uws.web.app import create_app, shutdown
from uws.web.proxied import PEER_KEY

from conftest import ValidatingClient, make_config

PROXY = "10.0.0.5"


@pytest.fixture
def make_app(tmp_path):
    apps = []

    def make(trusted=(PROXY,), **overrides):
        cfg = make_config(tmp_path / str(len(apps)), "", executor="none", scheduler=False,
                          trusted_proxies=list(trusted), **overrides)
        app = create_app(cfg)
        app.test_client_class = ValidatingClient
        app.extensions["seen"] = seen = {}

        @app.get("/_seen")
        def _seen():        # what the views see of the request
            from flask import request
            seen.update(request.environ)
            return "ok"

        apps.append(app)
        return app

    yield make
    for app in apps:
        shutdown(app)


def seen_by(app, peer: str, headers: dict) -> dict:
    """The environ the app's views see for a request from ``peer`` with ``headers``."""
    seen = app.extensions["seen"]
    seen.clear()
    r = app.test_client().get("/_seen", headers=headers, environ_base={"REMOTE_ADDR": peer})
    assert r.status_code == 200
    return dict(seen)


def test_a_trusted_proxy_s_x_forwarded_for_names_the_client(make_app):
    seen = seen_by(make_app(), PROXY, {"X-Forwarded-For": "203.0.113.9"})
    assert seen["REMOTE_ADDR"] == "203.0.113.9"
    assert seen[PEER_KEY] == PROXY


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(make_app):
    seen = seen_by(make_app(), "198.51.100.7", {"X-Forwarded-For": "203.0.113.9",
                                                "Forwarded": "for=203.0.113.10"})
    assert seen["REMOTE_ADDR"] == "198.51.100.7"


def test_the_right_most_address_that_is_not_a_trusted_proxy_is_the_client(make_app):
    app = make_app(trusted=(PROXY, "10.0.1.0/24"))
    # the client wrote "1.2.3.4" itself; 10.0.1.8 is a second trusted proxy in the chain
    seen = seen_by(app, PROXY, {"X-Forwarded-For": "1.2.3.4, 203.0.113.9, 10.0.1.8"})
    assert seen["REMOTE_ADDR"] == "203.0.113.9"


def test_a_cidr_entry_trusts_every_address_in_its_range(make_app):
    app = make_app(trusted=("10.0.0.0/8",))
    assert seen_by(app, "10.200.3.4", {"X-Forwarded-For": "203.0.113.9"})["REMOTE_ADDR"] \
        == "203.0.113.9"
    assert seen_by(app, "11.0.0.1", {"X-Forwarded-For": "203.0.113.9"})["REMOTE_ADDR"] \
        == "11.0.0.1"


def test_the_forwarded_header_s_for_names_the_client(make_app):
    seen = seen_by(make_app(), PROXY,
                   {"Forwarded": 'for=1.2.3.4, for="[2001:db8::7]:4711";proto=https'})
    assert seen["REMOTE_ADDR"] == "2001:db8::7"


def test_links_use_the_forwarded_scheme_and_host_of_a_trusted_proxy(make_app):
    app = make_app(allowed_hosts=["uws.example.org"])
    r = app.test_client().get("/", headers={
        "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "uws.example.org", "Accept": "application/xml"},
        environ_base={"REMOTE_ADDR": PROXY})
    assert r.status_code == 200
    assert b"https://uws.example.org/sleep" in r.data


def test_forwarded_scheme_and_host_from_an_untrusted_peer_are_ignored(make_app):
    app = make_app(allowed_hosts=["uws.example.org"])
    r = app.test_client().get("/", headers={
        "X-Forwarded-Proto": "https", "X-Forwarded-Host": "uws.example.org",
        "Accept": "application/xml"}, environ_base={"REMOTE_ADDR": "198.51.100.7"})
    assert r.status_code == 200
    assert b"https://uws.example.org" not in r.data
    assert b"http://localhost/sleep" in r.data


def test_a_malformed_x_forwarded_for_is_logged_once_and_the_proxy_stands_for_the_client(
        make_app, caplog):
    app = make_app()
    with caplog.at_level(logging.WARNING, logger="uws.web.proxied"):
        for _ in range(3):
            seen = seen_by(app, PROXY, {"X-Forwarded-For": "not-an-address"})
            assert seen["REMOTE_ADDR"] == PROXY
    warnings = [r for r in caplog.records if r.name == "uws.web.proxied"]
    assert len(warnings) == 1


@pytest.mark.parametrize("entry", ["10.0.0.300", "proxy.example.org", "10.0.0.0/33"])
def test_a_trusted_proxies_entry_that_is_no_address_stops_the_configuration(entry):
    with pytest.raises(ConfigError, match=r"server\.trusted_proxies"):
        from_dict({"server": {"trusted_proxies": [entry]}}, env={})


def test_uws_serve_refuses_a_bad_trusted_proxies_entry_with_exit_2(tmp_path):
    from uwshelp import UWS_COMMAND
    config = tmp_path / "uws.toml"
    config.write_text('[server]\ntrusted_proxies = ["10.0.0.0/99"]\n')
    done = subprocess.run([UWS_COMMAND, "serve", "--config", str(config), "--data-dir",
                           str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "server.trusted_proxies" in done.stderr


def test_ipv4_mapped_peers_match_ipv4_entries():
    trusted = TrustedProxies(networks(["10.0.0.0/8"]))
    assert trusted.trusts("::ffff:10.1.2.3")
    assert not trusted.trusts("::ffff:11.1.2.3")


def test_the_password_throttle_counts_the_forwarded_client(tmp_path):
    cfg = make_config(tmp_path, "", executor="none", scheduler=False,
                      trusted_proxies=[PROXY])
    cfg.auth = AuthConfig(modes=("basic",), max_failures_per_address=2,
                          max_failures_per_user=0, users={
                              "alice": generate_password_hash("w", method="pbkdf2:sha256:1000")})
    app = create_app(cfg)
    try:
        client = app.test_client()

        def guess(forwarded_for):
            token = base64.b64encode(b"alice:wrong").decode()
            return client.get("/sleep", headers={"Authorization": f"Basic {token}",
                                                 "X-Forwarded-For": forwarded_for},
                              environ_base={"REMOTE_ADDR": PROXY}).status_code
        assert [guess("203.0.113.9") for _ in range(3)] == [401, 401, 429]
        assert guess("203.0.113.10") == 401      # another client behind the same proxy
    finally:
        shutdown(app)


def test_the_header_mode_still_believes_its_proxy_by_the_proxy_s_own_address(tmp_path):
    cfg = make_config(tmp_path, "", executor="none", scheduler=False,
                      trusted_proxies=[PROXY])
    cfg.auth = AuthConfig(modes=("header",), trusted_proxies=frozenset({PROXY}))
    app = create_app(cfg)
    try:
        r = app.test_client().get("/sleep", headers={
            "X-Remote-User": "carol", "X-Forwarded-For": "203.0.113.9",
            "Accept": "application/json"}, environ_base={"REMOTE_ADDR": PROXY})
        assert r.status_code == 200
        assert r.headers.get("X-Request-ID")
        from uws.web.identity import current_caller  # noqa: F401  (the path it takes)
        r = app.test_client().get("/sleep?PHASE=PENDING", headers={
            "X-Remote-User": "carol", "X-Forwarded-For": "203.0.113.9"},
            environ_base={"REMOTE_ADDR": PROXY})
        assert r.status_code == 200
    finally:
        shutdown(app)


def test_the_connection_cap_spares_a_trusted_proxy(serve):  # noqa: F811
    port = serve(connections_per_address=3, trusted_proxies=["127.0.2.1"])
    proxy = [_connect(port, "127.0.2.1") for _ in range(6)]
    other = [_connect(port, "127.0.2.2") for _ in range(3)]
    try:
        socket_wait = 10
        from uwshelp import wait_for
        wait_for(lambda: _descriptors(serve.process.pid) >= 9, timeout=socket_wait)
        extra = _connect(port, "127.0.2.2")
        assert _closed_by_server(extra, timeout=10)     # an untrusted address is capped
        for s in proxy:                                  # every proxy connection is served
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        for s in proxy + other:
            s.close()
