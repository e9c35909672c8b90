"""Signing in from a browser (/signin, /signout) and the pages that find each other,
through the Flask test client; tests/test_browser_signin.py drives them in Chromium."""
from __future__ import annotations

import base64

import lxml.html
import pytest
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig, token_digest
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config

FAST_HASH = "pbkdf2:sha256:1000"     # tests only
USERS = {"alice": "wonderland", "bob": "builder", "root": "toor"}
TOKENS = {"carol-token": "carol", "root-token": "root"}
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
ORIGIN = {"Origin": "http://localhost"}
COOKIE = "uws_session"
EVIL = ["http://evil.example/", "https://evil.example/x", "//evil.example/", "///evil.example",
        "/\\evil.example", "\\\\evil.example", "https:evil.example", "javascript:alert(1)",
        "/\t/evil.example", "/\n/evil.example", "evil.example", "sleep"]


def basic(user: str, password: str | None = None) -> dict:
    raw = f"{user}:{USERS[user] if password is None else password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def _auth(modes=("basic", "bearer"), **limits) -> AuthConfig:
    return AuthConfig(
        modes=modes,
        users={u: generate_password_hash(p, method=FAST_HASH) for u, p in USERS.items()},
        tokens={token_digest(t): name for t, name in TOKENS.items()},
        admins=frozenset({"root"}), **limits)


@pytest.fixture
def make_client(tmp_path, db_url):
    """A client of an app with the given ``[auth]`` (None: no authentication)."""
    apps = []

    def make(auth: AuthConfig | None = None, **settings):
        cfg = make_config(tmp_path / str(len(apps)), db_url, executor="none", scheduler=False,
                          **settings)
        if auth is not None:
            cfg.auth = auth
        application = create_app(cfg)
        application.test_client_class = ValidatingClient
        apps.append(application)
        return application.test_client()
    yield make
    for application in apps:
        shutdown(application)


@pytest.fixture
def client(make_client):
    return make_client(_auth())


def sign_in(client, token: str = "carol-token", next_path: str = "/sleep", **kwargs):
    kwargs.setdefault("headers", ORIGIN)
    return client.post("/signin", data={"token": token, "next": next_path}, **kwargs)


def page(response) -> lxml.html.HtmlElement:
    assert response.content_type == "text/html; charset=utf-8"
    return lxml.html.fromstring(response.data)


def cookie_header(response) -> str:
    cookies = [c for c in response.headers.getlist("Set-Cookie") if c.startswith(f"{COOKIE}=")]
    assert len(cookies) == 1, response.headers.getlist("Set-Cookie")
    return cookies[0]


def create(client, headers=None) -> str:
    r = client.post("/sleep", data={"DURATION": "0"}, headers=headers or {})
    assert r.status_code == 303, r.data
    return r.headers["Location"].replace("http://localhost", "")


def owner_of(client, path: str, headers=None) -> str:
    r = client.get(f"{path}/owner", headers=headers or {})
    assert r.status_code == 200
    return r.get_data(as_text=True).strip()


# -- Basic ---------------------------------------------------------------------------

def test_signin_on_a_basic_only_server_answers_the_challenge(make_client):
    client = make_client(_auth(modes=("basic",)))
    r = client.get("/signin?next=/sleep", headers=BROWSER)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == 'Basic realm="UWS"'
    assert page(r).xpath("//h1")[0].text_content() == "Sign in"


def test_signin_with_basic_credentials_redirects_to_next(client):
    r = client.get("/signin?via=password&next=/sleep/holds", headers={**BROWSER, **basic("root")})
    assert r.status_code == 303
    assert r.headers["Location"] == "http://localhost/sleep/holds"


def test_signin_password_without_credentials_answers_the_basic_challenge(client):
    r = client.get("/signin?via=password&next=/sleep", headers=BROWSER)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == 'Basic realm="UWS"'


def test_signin_keeps_the_query_of_next(client):
    r = client.get("/signin?via=password&next=%2Fsleep%3FPHASE%3DQUEUED%26LAST%3D5",
                   headers=basic("alice"))
    assert r.status_code == 303
    assert r.headers["Location"] == "http://localhost/sleep?PHASE=QUEUED&LAST=5"


def test_signin_without_next_goes_to_the_services_page(client):
    r = client.get("/signin?via=password", headers=basic("alice"))
    assert r.status_code == 303
    assert r.headers["Location"] == "http://localhost/"


def test_a_wrong_password_on_a_page_counts_as_one_failure(make_client):
    client = make_client(_auth(max_failures_per_user=2))
    for _ in range(2):
        r = client.get("/sleep", headers={**BROWSER, **basic("alice", "wrong")})
        assert r.status_code == 401     # the header's links did not check it again
    assert client.get("/sleep", headers=basic("alice")).status_code == 429


# -- no open redirect ----------------------------------------------------------------

@pytest.mark.parametrize("target", EVIL)
def test_signin_refuses_a_next_that_is_not_a_path_of_this_server(client, target):
    r = client.get("/signin", query_string={"via": "password", "next": target}, headers=basic("alice"))
    assert r.status_code == 400
    assert "Location" not in r.headers
    assert "next: must be a path on this server" in r.get_data(as_text=True)


@pytest.mark.parametrize("target", EVIL)
def test_the_token_form_refuses_a_next_that_is_not_a_path_of_this_server(client, target):
    r = sign_in(client, next_path=target)
    assert r.status_code == 400
    assert "Location" not in r.headers and "Set-Cookie" not in r.headers


# -- bearer tokens: the form and the cookie ------------------------------------------

def test_signin_shows_the_token_form_and_the_password_link(client):
    r = client.get("/signin?next=/sleep", headers=BROWSER)
    assert r.status_code == 200
    doc = page(r)
    form = doc.xpath("//form[@action='http://localhost/signin']")[0]
    assert form.xpath(".//input[@name='next']/@value") == ["/sleep"]
    assert form.xpath(".//input[@name='token']/@type") == ["password"]
    assert doc.xpath("//a[@data-role='password-signin']/@href") == \
        ["http://localhost/signin?via=password&next=/sleep"]


def test_a_right_token_sets_the_session_cookie_and_redirects(client):
    r = sign_in(client)
    assert r.status_code == 303
    assert r.headers["Location"] == "http://localhost/sleep"
    cookie = cookie_header(r)
    attributes = {a.strip().split("=")[0] for a in cookie.split(";")[1:]}
    assert cookie.startswith(f"{COOKIE}=carol-token;")
    assert attributes == {"HttpOnly", "Path", "SameSite"}   # a session cookie: no Expires
    assert "SameSite=Strict" in cookie and "Path=/" in cookie


def test_the_session_cookie_is_secure_under_https(client):
    r = sign_in(client, base_url="https://localhost",
                headers={"Origin": "https://localhost"})
    assert r.status_code == 303
    assert "; Secure" in cookie_header(r)


def test_the_session_cookie_is_secure_when_public_url_is_https(make_client):
    client = make_client(_auth(), public_url="https://uws.example.org/")
    r = client.post("/signin", data={"token": "carol-token"},
                    headers={"Origin": "https://uws.example.org"})
    assert r.status_code == 303
    assert "; Secure" in cookie_header(r)


def test_the_cookie_identifies_reading_requests(client):
    path = create(client, basic("alice"))
    client.set_cookie(COOKIE, "carol-token")
    assert client.get(path).status_code == 403          # alice's job: not carol's
    r = client.get("/", headers=BROWSER)
    assert page(r).xpath("//*[@data-role='signed-in']/strong")[0].text == "carol"


def test_the_cookie_identifies_a_post_from_our_page(client):
    client.set_cookie(COOKIE, "carol-token")
    path = create(client, ORIGIN)
    assert owner_of(client, path) == "carol"


def test_the_cookie_is_refused_for_a_cross_site_post(client):
    client.set_cookie(COOKIE, "carol-token")
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    assert "cross-site" in r.get_data(as_text=True)


def test_the_cookie_is_no_credentials_for_a_post_naming_no_page(client):
    client.set_cookie(COOKIE, "carol-token")
    path = create(client)       # no Origin, no Referer: not known to come from our page
    client.delete_cookie(COOKIE)
    assert owner_of(client, path) == ""


def test_a_cookie_whose_token_is_no_longer_accepted_is_anonymous_and_cleared(client):
    client.set_cookie(COOKIE, "revoked-token")
    r = client.get("/", headers=BROWSER)
    assert r.status_code == 200
    assert page(r).xpath("//a[@class='signin-link']")
    assert "Max-Age=0" in cookie_header(r)


def test_a_wrong_token_shows_the_form_again_with_an_error(client):
    r = sign_in(client, token="guess")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="UWS"'    # no Basic dialog
    assert "Set-Cookie" not in r.headers
    doc = page(r)
    assert doc.xpath("//p[@class='form-error']")[0].text == "That token is not accepted."
    assert doc.xpath("//input[@name='next']/@value") == ["/sleep"]


def test_wrong_tokens_count_against_the_address_limit(make_client):
    client = make_client(_auth(max_failures_per_address=2))
    for _ in range(2):
        assert sign_in(client, token="guess").status_code == 401
    r = sign_in(client)     # the right token, too late
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) > 0
    assert "Set-Cookie" not in r.headers


def test_the_token_form_refuses_a_cross_site_post(client):
    r = client.post("/signin", data={"token": "carol-token"},
                    headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    assert "Set-Cookie" not in r.headers


def test_sign_out_clears_the_cookie(client):
    sign_in(client)
    r = client.post("/signout", headers={**ORIGIN, **BROWSER})
    assert r.status_code == 200
    cookie = cookie_header(r)
    assert cookie.startswith(f"{COOKIE}=;") and "Max-Age=0" in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert page(r).xpath("//h1")[0].text_content() == "Signed out"
    assert client.get_cookie(COOKIE) is None
    assert page(client.get("/", headers=BROWSER)).xpath("//a[@class='signin-link']")


def test_sign_out_after_basic_says_the_browser_forgets_only_when_closed(client):
    r = client.post("/signout", headers={**ORIGIN, **BROWSER, **basic("alice")})
    assert r.status_code == 200
    assert "until it is closed" in page(r).xpath("//p[@role='status']")[0].text_content()


def test_signin_is_not_found_without_authentication(make_client):
    client = make_client()
    assert client.get("/signin", headers=BROWSER).status_code == 404
    assert client.post("/signin", data={"token": "x"}).status_code == 404


# -- the header, and pages that need an identity ------------------------------------

def test_the_header_links_to_sign_in_with_the_page_as_next(client):
    doc = page(client.get("/sleep?PHASE=QUEUED", headers=BROWSER))
    assert doc.xpath("//header//a[@class='signin-link']/@href") == \
        ["http://localhost/signin?next=/sleep%3FPHASE%3DQUEUED"]


def test_the_header_shows_who_is_signed_in(client):
    doc = page(client.get("/sleep", headers={**BROWSER, **basic("alice")}))
    assert doc.xpath("//header//*[@data-role='signed-in']/strong")[0].text == "alice"
    assert doc.xpath("//header//form[@action='http://localhost/signout']")
    assert not doc.xpath("//header//a[@class='signin-link']")


def test_no_sign_in_link_without_authentication(make_client):
    doc = page(make_client().get("/sleep", headers=BROWSER))
    assert not doc.xpath("//header//a[@class='signin-link']")


def test_the_header_links_an_administrator_to_holds_and_statistics(client):
    doc = page(client.get("/sleep", headers={**BROWSER, **basic("root")}))
    assert doc.xpath("//header//a[@class='admin-link']/@href") == \
        ["http://localhost/sleep/holds", "http://localhost/stats"]


def test_the_holds_page_of_an_anonymous_browser_links_to_sign_in(client):
    r = client.get("/sleep/holds", headers=BROWSER)
    assert r.status_code == 403
    link = page(r).xpath("//*[@data-role='signin']/a/@href")
    assert link == ["http://localhost/signin?next=/sleep/holds"]


def test_the_holds_page_of_a_user_says_who_is_signed_in(client):
    r = client.get("/sleep/holds", headers={**BROWSER, **basic("alice")})
    assert r.status_code == 403
    assert page(r).xpath("//*[@data-role='who']/strong")[0].text == "alice"


def test_xml_and_json_clients_keep_their_403(client):
    r = client.get("/sleep/holds")
    assert r.status_code == 403 and r.content_type.startswith("text/plain")
    assert "sign" not in r.get_data(as_text=True).lower()
    r = client.get("/sleep/holds", headers={"Accept": "application/json"})
    assert r.status_code == 403
    assert r.get_json()["error"]["status"] == 403


def test_an_administrator_signed_in_by_token_reaches_holds_and_stats(client):
    assert sign_in(client, token="root-token").status_code == 303
    assert client.get("/sleep/holds", headers=BROWSER).status_code == 200
    doc = page(client.get("/stats", headers=BROWSER))
    assert doc.xpath("//h1")[0].text_content().strip() == "Statistics of the server"


# -- pages that find each other ------------------------------------------------------

def test_a_service_page_links_to_its_batches_and_statistics(make_client):
    doc = page(make_client().get("/sleep", headers=BROWSER))
    links = doc.xpath("//nav[@class='service-links']/a/@href")
    assert links == ["http://localhost/sleep/batches", "http://localhost/sleep/stats"]


def test_an_administrators_service_page_links_to_its_holds(client):
    doc = page(client.get("/sleep", headers={**BROWSER, **basic("root")}))
    assert doc.xpath("//nav[@class='service-links']/a[@data-role='holds']/@href") == \
        ["http://localhost/sleep/holds"]


def _counts(client, headers) -> dict[str, str]:
    r = client.get("/", headers={**BROWSER, **headers})
    assert r.status_code == 200
    return {li.get("data-service"): " ".join(li.xpath(".//*[@data-role='counts']")[0]
                                             .text_content().split())
            for li in page(r).xpath("//ul[@class='services']/li")}


def test_the_services_page_counts_the_callers_jobs(client):
    for _ in range(2):
        create(client, basic("alice"))
    create(client, basic("bob"))
    assert _counts(client, basic("alice"))["sleep"] == "2 your jobs"
    assert _counts(client, basic("root"))["sleep"] == "3 all owners' jobs"
    assert _counts(client, {})["sleep"] == "0 anonymous jobs"


def test_the_services_page_counts_queued_jobs_apart(make_client):
    client = make_client()
    r = client.post("/sleep", data={"DURATION": "0", "PHASE": "RUN"})
    assert r.status_code == 303
    create(client)
    assert _counts(client, {})["sleep"] == "2 jobs QUEUED 1"


def test_the_services_page_links_each_service(make_client):
    doc = page(make_client().get("/", headers=BROWSER))
    item = doc.xpath("//ul[@class='services']/li[@data-service='sleep']")[0]
    assert item.xpath(".//nav/a/@href") == ["http://localhost/sleep", "http://localhost/sleep/batches",
                                            "http://localhost/sleep/stats"]


@pytest.mark.parametrize("name", ["signin", "signout"])
def test_a_service_cannot_take_the_name_of_the_sign_in_pages(tmp_path, db_url, name):
    from uws.config.settings import ConfigError
    with pytest.raises(ConfigError, match="reserved"):
        make_config(tmp_path, db_url, services={name: {"runner": "uws.demo:sleep"}})
