"""VOSI 1.1 (IVOA Support Interfaces): /{service}/availability and
/{service}/capabilities, valid against the official schemas in schemas/ (offline)."""
from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from lxml import etree
from werkzeug.security import generate_password_hash

from test_identity import FAST_HASH, USERS, basic
from uws.auth import AuthConfig
from uws.resources import schemas_dir
from uws.web.app import create_app, shutdown

from conftest import make_config

#: one database is enough here (documents that read no job; tests/README.rst)
BACKENDS = ("sqlite",)

AVAILABILITY = "http://www.ivoa.net/xml/VOSIAvailability/v1.0"
CAPABILITIES = "http://www.ivoa.net/xml/VOSICapabilities/v1.0"
VODATASERVICE = "http://www.ivoa.net/xml/VODataService/v1.1"
XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
UWS_STANDARD = "ivo://ivoa.net/std/UWS#rest-1.1"


def _vosi_schema() -> etree.XMLSchema:
    """The VOSI schemas and VODataService (for vs:ParamHTTP), imported from local files."""
    imports = [(AVAILABILITY, "VOSIAvailability-v1.0.xsd"),
               (CAPABILITIES, "VOSICapabilities-v1.0.xsd"),
               (VODATASERVICE, "VODataService-v1.3.xsd")]
    text = ('<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
            + "".join(f'<xs:import namespace="{ns}" '
                      f'schemaLocation="{(schemas_dir() / name).as_uri()}"/>'
                      for ns, name in imports)
            + "</xs:schema>")
    return etree.XMLSchema(etree.fromstring(text))


SCHEMA = _vosi_schema()


def vosi(response, root: str):
    """The response's document, checked: 200, XML, valid VOSI with that root element."""
    assert response.status_code == 200, response.data
    assert response.mimetype in ("text/xml", "application/xml")
    doc = etree.fromstring(response.data)
    if not SCHEMA.validate(doc):
        pytest.fail(f"invalid VOSI document: {SCHEMA.error_log}\n{response.data!r}")
    assert etree.QName(doc).localname == root
    return doc


def availability(client, service="sleep", **kwargs) -> tuple[bool, list[str]]:
    doc = vosi(client.get(f"/{service}/availability", **kwargs), "availability")
    available = doc.findtext(f"{{{AVAILABILITY}}}available")
    return available == "true", [n.text for n in doc.iterfind(f"{{{AVAILABILITY}}}note")]


def capabilities(client, service="sleep", **kwargs) -> dict[str, etree._Element]:
    doc = vosi(client.get(f"/{service}/capabilities", **kwargs), "capabilities")
    return {cap.get("standardID"): cap for cap in doc.iterfind("capability")}


def access_url(capability) -> tuple[str, str]:
    url = capability.find("interface/accessURL")
    return url.text, url.get("use")


# -- availability ----------------------------------------------------------------------

def test_a_running_service_is_available_with_a_note(client):
    available, notes = availability(client)
    assert available
    assert notes == ["the database answers and the executor runs"]


def test_a_service_whose_database_does_not_answer_is_unavailable(client, api, monkeypatch):
    unreachable = sa.create_engine("sqlite:////nonexistent-directory/uws.sqlite3")
    monkeypatch.setattr(api.store, "engine", unreachable)
    available, notes = availability(client)
    assert not available
    assert any("database does not answer" in n for n in notes)


def test_a_service_whose_executor_has_stopped_is_unavailable(client, api):
    api.executor.stop()
    available, notes = availability(client)
    assert not available
    assert notes == ["the executor has stopped"]


def test_a_front_end_leaving_execution_to_workers_is_available(idle):
    client, _ = idle
    assert availability(client)[0]


# -- capabilities ----------------------------------------------------------------------

def test_capabilities_name_uws_1_1_at_the_job_list(client):
    uws = capabilities(client)[UWS_STANDARD]
    assert access_url(uws) == ("http://localhost/sleep", "base")
    assert uws.find("interface").get(XSI_TYPE) == "vs:ParamHTTP"


def test_capabilities_name_the_vosi_endpoints_themselves(client):
    caps = capabilities(client)
    assert access_url(caps["ivo://ivoa.net/std/VOSI#capabilities"]) == \
        ("http://localhost/sleep/capabilities", "full")
    assert access_url(caps["ivo://ivoa.net/std/VOSI#availability"]) == \
        ("http://localhost/sleep/availability", "full")


def test_capabilities_describe_the_service(client, api):
    uws = capabilities(client, "checksum")[UWS_STANDARD]
    assert uws.findtext("description") == api.service("checksum").description


def test_capabilities_use_the_public_url_behind_a_proxy(tmp_path, db_url):
    app = create_app(make_config(tmp_path, db_url, executor="none",
                                 public_url="https://uws.example.org/jobs/"))
    try:
        uws = capabilities(app.test_client())[UWS_STANDARD]
        assert access_url(uws) == ("https://uws.example.org/jobs/sleep", "base")
    finally:
        shutdown(app)


# -- who may read them, and what else is refused ------------------------------------------

@pytest.fixture
def closed(tmp_path, db_url):
    """A client of a server whose "sleep" service refuses anonymous callers."""
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.auth = AuthConfig(modes=("basic",), users={
        "alice": generate_password_hash(USERS["alice"], method=FAST_HASH)})
    cfg.services["sleep"] = dataclasses.replace(cfg.services["sleep"], anonymous=False)
    app = create_app(cfg)
    yield app.test_client()
    shutdown(app)


def test_vosi_is_readable_without_credentials_where_jobs_need_them(closed):
    assert closed.get("/sleep").status_code == 401
    assert availability(closed)[0]
    assert UWS_STANDARD in capabilities(closed)


def test_vosi_is_readable_with_credentials_too(closed):
    assert UWS_STANDARD in capabilities(closed, headers=basic("alice"))


@pytest.mark.parametrize("resource", ["availability", "capabilities"])
def test_vosi_of_an_unknown_service_is_404(client, resource):
    assert client.get(f"/nope/{resource}").status_code == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
@pytest.mark.parametrize("resource", ["availability", "capabilities"])
def test_vosi_answers_405_to_anything_but_get(client, resource, method):
    r = client.open(f"/sleep/{resource}", method=method)
    assert r.status_code == 405
    assert set(r.headers["Allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


def test_the_vosi_schemas_are_installed_with_the_package():
    names = {p.name for p in schemas_dir().iterdir()}
    assert {"VOSIAvailability-v1.0.xsd", "VOSICapabilities-v1.0.xsd", "VOResource-v1.1.xsd",
            "VODataService-v1.3.xsd", "STC-stub.xsd", "README"} <= names
