"""Identity and owner isolation (UWS 1.1 §3): each client sees and controls only
its own jobs; another owner's job answers 403 everywhere."""
from __future__ import annotations

import base64

import pytest
from werkzeug.security import generate_password_hash

from uws.auth import token_digest
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config

FAST_HASH = "pbkdf2:sha256:1000"     # tests only; real configs keep werkzeug's default
USERS = {"alice": "wonderland", "bob": "builder", "root": "toor"}
TOKEN = "t0ken-for-carol"


def basic(user: str) -> dict:
    raw = f"{user}:{USERS[user]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    from uws.auth import AuthConfig
    cfg.auth = AuthConfig(
        modes=("basic", "bearer", "header"),
        users={u: generate_password_hash(p, method=FAST_HASH) for u, p in USERS.items()},
        tokens={token_digest(TOKEN): "carol"}, admins=frozenset({"root"}),
        trusted_proxies=frozenset({"127.0.0.1"}))
    return cfg


def create(client, user: str, **params) -> str:
    r = client.post("/sleep", data={"DURATION": "0", **params}, headers=basic(user))
    assert r.status_code == 303
    return r.headers["Location"].replace("http://localhost", "")


def test_the_owner_is_the_authenticated_identity(client):
    path = create(client, "alice")
    assert client.get(f"{path}/owner", headers=basic("alice")).get_data(as_text=True) == "alice"
    assert b"<uws:ownerId>alice</uws:ownerId>" in client.get(path, headers=basic("alice")).data


def test_another_owners_job_is_absent_from_lists_and_counts(client):
    create(client, "alice")
    mine = create(client, "bob")
    listed = client.get("/sleep", headers=basic("bob")).get_data(as_text=True)
    assert listed.count("<uws:jobref") == 1 and mine.rsplit("/", 1)[1] in listed
    assert client.head("/sleep", headers=basic("bob")).headers["X-Job-Count"] == "1"


def _job_routes(app):
    """Every route under a job, with each method it allows (from the route table,
    so a new route cannot be forgotten)."""
    for rule in app.url_map.iter_rules():
        if "<job_id>" not in rule.rule:
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield rule.rule, method


def _url(rule: str, path: str) -> str:
    return (rule.replace("/<service>/<job_id>", path)
            .replace("<result_id>", "result").replace("<name>", "DURATION"))


def test_every_request_on_another_owners_job_answers_403(app, client):
    path = create(client, "alice")
    routes = list(_job_routes(app))
    assert len(routes) >= 15
    for rule, method in routes:
        r = client.open(_url(rule, path), method=method, headers=basic("bob"),
                        data={"PHASE": "ABORT"} if method == "POST" else None)
        assert r.status_code == 403, (method, rule, r.status_code)
    assert client.get(f"{path}/phase", headers=basic("alice")).data == b"PENDING"


def test_every_job_route_is_guarded_by_the_owner_check(app):
    # Bound to the view, not guessed from argument names: a route under a job whose
    # view lacks @job_view (or a service route without a guard) fails here.
    from uws.web.access import access_of
    rules = [rule for rule in app.url_map.iter_rules() if rule.rule.startswith("/<service>")]
    assert len(rules) >= 15
    for rule in rules:
        expected = "job" if rule.rule.startswith("/<service>/<job_id>") else "service"
        if rule.endpoint.startswith("vosi."):
            expected = "public"     # VOSI: readable by anyone, describes no job
        assert access_of(app.view_functions[rule.endpoint]) == expected, rule.rule
    assert all("<job_id>" not in rule.rule or rule.rule.startswith("/<service>/<job_id>")
               for rule in app.url_map.iter_rules())


def test_anonymous_callers_cannot_touch_an_owned_job(client):
    path = create(client, "alice")
    assert client.get(path).status_code == 403
    assert client.delete(path).status_code == 403
    assert client.get(f"{path}?WAIT=1").status_code == 403


def test_an_administrator_sees_and_controls_every_job(client):
    path = create(client, "alice")
    assert path.rsplit("/", 1)[1] in client.get("/sleep", headers=basic("root")).get_data(
        as_text=True)
    assert client.post(f"{path}/phase", data={"PHASE": "ABORT"},
                       headers=basic("root")).status_code == 303
    assert client.get(f"{path}/phase", headers=basic("alice")).data == b"ABORTED"


def test_a_wrong_password_answers_401_with_a_challenge(client):
    r = client.get("/sleep", headers={"Authorization": "Basic " +
                                      base64.b64encode(b"alice:nope").decode()})
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Basic realm=")


def test_a_bearer_token_identifies_its_owner(client):
    r = client.post("/sleep", data={"DURATION": "0"},
                    headers={"Authorization": f"Bearer {TOKEN}"})
    path = r.headers["Location"].replace("http://localhost", "")
    assert client.get(f"{path}/owner", headers={"Authorization": f"Bearer {TOKEN}"}).data == \
        b"carol"


def test_an_unknown_bearer_token_answers_401(client):
    assert client.get("/sleep", headers={"Authorization": "Bearer guess"}).status_code == 401


def test_a_trusted_proxy_header_names_the_owner(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"X-Remote-User": "dave"})
    path = r.headers["Location"].replace("http://localhost", "")
    assert client.get(f"{path}/owner", headers={"X-Remote-User": "dave"}).data == b"dave"


def test_a_trusted_proxy_header_wins_over_credentials_the_proxy_passes_on(client):
    # A proxy that authenticated with Basic may forward that header; it is its business.
    forwarded = "Basic " + base64.b64encode(b"dave:proxy-password").decode()
    r = client.post("/sleep", data={"DURATION": "0"},
                    headers={"X-Remote-User": "dave", "Authorization": forwarded})
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    assert client.get(f"{path}/owner", headers={"X-Remote-User": "dave"}).data == b"dave"


def test_a_utf8_owner_name_from_the_proxy_header_is_decoded(client):
    # WSGI passes header bytes on as latin-1 text: "zoë" arrives as "zoÃ«"
    latin1 = "zoë".encode().decode("latin-1")
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"X-Remote-User": latin1})
    path = r.headers["Location"].replace("http://localhost", "")
    assert client.get(f"{path}/owner", headers={"X-Remote-User": latin1}).data == "zoë".encode()


def test_a_proxy_header_that_is_not_utf8_answers_400(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"X-Remote-User": "d\xe4ve"})
    assert r.status_code == 400
    assert client.get("/sleep", headers={"X-Remote-User": "d\xe4ve"}).status_code == 400


@pytest.mark.parametrize("name", ["da\x00ve", "da\x1bve"])
def test_a_proxy_header_with_a_control_character_answers_400(client, name):
    """An owner no document could show, and PostgreSQL could not store (NUL: a 500)."""
    for r in (client.post("/sleep", data={"DURATION": "0"}, headers={"X-Remote-User": name}),
              client.get("/sleep", headers={"X-Remote-User": name})):
        assert r.status_code == 400
        assert b"X-Remote-User header holds a control character" in r.data


def test_wrong_credentials_from_an_untrusted_address_answer_401_despite_the_header(client):
    r = client.get("/sleep", environ_base={"REMOTE_ADDR": "192.0.2.7"},
                   headers={"X-Remote-User": "dave", "Authorization": "Bearer guess"})
    assert r.status_code == 401


def test_the_proxy_header_from_an_untrusted_address_is_ignored(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"X-Remote-User": "dave"},
                    environ_base={"REMOTE_ADDR": "192.0.2.7"})
    path = r.headers["Location"].replace("http://localhost", "")
    assert client.get(f"{path}/owner").data == b""


def test_a_service_closed_to_anonymous_use_challenges_with_401(tmp_path, db_url, config):
    import dataclasses
    config.services["sleep"] = dataclasses.replace(config.services["sleep"], anonymous=False)
    app = create_app(config)
    app.test_client_class = ValidatingClient
    try:
        c = app.test_client()
        r = c.get("/sleep")
        assert r.status_code == 401 and "Basic" in r.headers["WWW-Authenticate"]
        assert c.post("/sleep", data={"DURATION": "0"}).status_code == 401
        assert c.get("/sleep", headers=basic("bob")).status_code == 200
    finally:
        shutdown(app)


# -- Authorization headers the server does not check ------------------------------------

EMPTY_BASIC = "Basic " + base64.b64encode(b":").decode()


@pytest.fixture
def open_server(tmp_path, db_url):
    """A server with no [auth] table: everyone is anonymous."""
    app = create_app(make_config(tmp_path, db_url, executor="none", scheduler=False))
    app.test_client_class = ValidatingClient
    yield app.test_client()
    shutdown(app)


@pytest.mark.parametrize("header", [EMPTY_BASIC, "Basic", "Bearer a-gateway-token",
                                    "Negotiate YIIB", "Basic not-base64!"])
def test_a_server_without_authentication_ignores_authorization_headers(open_server, header):
    r = open_server.post("/sleep", data={"DURATION": "0"}, headers={"Authorization": header})
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    assert open_server.get(f"{path}/owner", headers={"Authorization": header}).data == b""
    assert open_server.get("/sleep", headers={"Authorization": header}).status_code == 200


@pytest.fixture
def basic_only(tmp_path, db_url):
    """Basic authentication only, with the sleep service closed to anonymous callers
    and the checksum service open to them."""
    import dataclasses

    from uws.auth import AuthConfig
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.auth = AuthConfig(modes=("basic",), users={
        "alice": generate_password_hash(USERS["alice"], method=FAST_HASH)})
    cfg.services["sleep"] = dataclasses.replace(cfg.services["sleep"], anonymous=False)
    app = create_app(cfg)
    app.test_client_class = ValidatingClient
    yield app.test_client()
    shutdown(app)


def test_a_scheme_that_is_not_configured_counts_as_no_credentials(basic_only):
    bearer = {"Authorization": "Bearer a-gateway-token"}
    assert basic_only.get("/checksum", headers=bearer).status_code == 200    # anonymous
    r = basic_only.get("/sleep", headers=bearer)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic realm=")


def test_empty_basic_credentials_count_as_none(basic_only):
    assert basic_only.get("/checksum", headers={"Authorization": EMPTY_BASIC}).status_code == 200
    assert basic_only.get("/sleep", headers={"Authorization": EMPTY_BASIC}).status_code == 401


def test_wrong_credentials_of_a_configured_scheme_still_answer_401(basic_only):
    wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:guess").decode()}
    assert basic_only.get("/checksum", headers=wrong).status_code == 401
    assert basic_only.get("/sleep", headers=basic("alice")).status_code == 200
