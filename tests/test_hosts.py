"""Host names the server answers to (DNS rebinding), and absolute URLs behind a proxy."""
from __future__ import annotations

import re

import pytest
import requests
from lxml import etree

from uws.config import settings as config_mod
from uws.web.app import create_app, shutdown

from conftest import LiveServer, ValidatingClient, make_config

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture
def make_client(tmp_path):
    """A test client of create_app with the given [server] settings."""
    apps = []

    def make(**settings):
        cfg = make_config(tmp_path / str(len(apps)), "", executor="none", scheduler=False,
                          **settings)
        app = create_app(cfg)
        app.test_client_class = ValidatingClient
        apps.append(app)
        return app.test_client()

    yield make
    for app in apps:
        shutdown(app)


@pytest.mark.parametrize("base", ["http://evil.example", "http://evil.example:8700",
                                  "http://127.0.0.1.evil.example:8700",
                                  "http://localhost.evil.example"])
def test_a_host_the_server_does_not_answer_to_gets_400_in_text(make_client, base):
    client = make_client()
    for headers in ({}, HTML):
        r = client.get("/sleep", base_url=base, headers=headers)
        assert r.status_code == 400, base
        assert r.content_type == "text/plain; charset=utf-8"


def test_a_rebound_host_cannot_create_jobs(make_client):
    client = make_client()
    r = client.post("/sleep", data={"DURATION": "0"}, base_url="http://evil.example:8700",
                    headers={"Origin": "http://evil.example:8700"})
    assert r.status_code == 400
    assert client.head("/sleep").headers["X-Job-Count"] == "0"


@pytest.mark.parametrize("base", ["http://localhost", "http://localhost:8700",
                                  "http://127.0.0.1:49152", "http://[::1]:8700",
                                  "http://LocalHost:1"])
def test_localhost_and_loopback_addresses_are_answered_on_any_port(make_client, base):
    assert make_client().get("/sleep", base_url=base).status_code == 200


def test_an_allowed_host_is_answered_and_names_the_urls(make_client):
    client = make_client(allowed_hosts=["uws.example.org"])
    r = client.post("/sleep", data={"DURATION": "0"}, base_url="https://uws.example.org:8443")
    assert re.fullmatch(r"https://uws\.example\.org:8443/sleep/[0-9a-f]+", r.headers["Location"])
    assert client.get("/sleep", base_url="http://other.example.org").status_code == 400


def test_a_star_in_allowed_hosts_answers_every_host(make_client):
    assert make_client(allowed_hosts=["*"]).get(
        "/sleep", base_url="http://anything.example").status_code == 200


def test_a_server_bound_to_every_address_answers_ip_addresses_but_not_other_names(make_client):
    client = make_client(host="0.0.0.0")
    assert client.get("/sleep", base_url="http://192.0.2.15:8700").status_code == 200
    assert client.get("/sleep", base_url="http://[2001:db8::5]:8700").status_code == 200
    assert client.get("/sleep", base_url="http://evil.example:8700").status_code == 400


def test_a_server_bound_to_a_name_answers_it(make_client):
    client = make_client(host="uws.lan")
    assert client.get("/sleep", base_url="http://uws.lan:8700").status_code == 200
    assert client.get("/sleep", base_url="http://192.0.2.15:8700").status_code == 400


# -- behind a reverse proxy ---------------------------------------------------------

PUBLIC = "https://uws.example.org/jobs/"


def test_urls_in_documents_and_redirects_come_from_the_public_url(make_client):
    client = make_client(public_url="https://uws.example.org/jobs")
    r = client.post("/sleep", data={"DURATION": "0"}, base_url="http://127.0.0.1:8700")
    assert re.fullmatch(re.escape(PUBLIC) + r"sleep/[0-9a-f]+", r.headers["Location"])
    job_id = r.headers["Location"].rsplit("/", 1)[1]
    listing = etree.fromstring(client.get("/sleep").data)
    assert [ref.get("{http://www.w3.org/1999/xlink}href") for ref in listing] == \
        [f"{PUBLIC}sleep/{job_id}"]
    assert client.delete(f"/sleep/{job_id}").headers["Location"].startswith(f"{PUBLIC}sleep?")


def test_pages_behind_a_proxy_link_below_the_public_url(make_client):
    client = make_client(public_url=PUBLIC)
    page = client.get("/sleep", headers=HTML).get_data(as_text=True)
    assert f'href="{PUBLIC}"' in page and f'action="{PUBLIC}sleep"' in page
    assert 'href="/jobs/_static/uws.css' in page


def test_the_public_host_is_answered_and_posts_from_its_pages_are_accepted(make_client):
    client = make_client(public_url=PUBLIC)
    assert client.get("/sleep", base_url="https://uws.example.org").status_code == 200
    # the proxy passes on its own Host; the browser names the public origin
    r = client.post("/sleep", data={"DURATION": "0"}, base_url="http://127.0.0.1:8700",
                    headers={"Origin": "https://uws.example.org"})
    assert r.status_code == 303
    r = client.post("/sleep", data={"DURATION": "0"}, base_url="http://127.0.0.1:8700",
                    headers={"Origin": "https://evil.example"})
    assert r.status_code == 403


# -- over real HTTP ---------------------------------------------------------------

def test_a_rebinding_host_header_over_http_answers_400(tmp_path):
    app = create_app(make_config(tmp_path, "", executor="none", scheduler=False))
    try:
        with LiveServer(app, threads=4) as server:
            port = server.url.rsplit(":", 1)[1]
            assert requests.get(f"{server.url}/sleep", headers={
                "Host": f"attacker.example:{port}"}, timeout=10).status_code == 400
            for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
                assert requests.get(f"{server.url}/sleep", headers={"Host": host},
                                    timeout=10).status_code == 200
    finally:
        shutdown(app)


# -- configuration ------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [
    ("public_url", "uws.example.org"), ("public_url", "ftp://uws.example.org/"),
    ("public_url", "https://uws.example.org/?x=1"), ("public_url", "https://:8443/"),
    ("allowed_hosts", "uws.example.org"), ("allowed_hosts", ["https://uws.example.org"]),
    ("allowed_hosts", ["uws.example.org:8443"]), ("allowed_hosts", ["a b"]),
])
def test_an_unusable_host_setting_stops_the_server(key, value):
    with pytest.raises(config_mod.ConfigError, match=f"server.{key}"):
        config_mod.from_dict({"server": {key: value}}, env={})


def test_host_settings_are_read_from_the_server_table_and_the_environment():
    cfg = config_mod.from_dict({"server": {"allowed_hosts": ["UWS.Example.org.", "[::2]"]}},
                               env={"UWS_PUBLIC_URL": "https://uws.example.org:443/a"})
    assert cfg.allowed_hosts == ("uws.example.org", "::2")
    assert cfg.public_url == "https://uws.example.org/a/"
