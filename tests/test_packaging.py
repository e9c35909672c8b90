"""What users install: ``pip install .`` (not editable) ships the templates and the
schemas, and the installed ``uws serve`` (or gunicorn) started from any directory
serves the browser pages.

The wheel test builds from the checkout (it needs the checkout's files); every
other test in the suite runs against the installed package (see conftest.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests
from lxml import html

import uws

from conftest import CHECKOUT, free_port
from uwshelp import UWS_COMMAND, wait_for

#: What Chromium and Firefox send for a page.
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
UNKNOWN_JOB = "0123456789abcdef0123456789abcdef"


def test_wheel_contains_templates_schemas_and_the_uws_command(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path), str(CHECKOUT)], check=True, cwd=tmp_path)
    wheel, = tmp_path.glob("ivoa_uws_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "uws/schemas/UWS-v1.1.xsd" in names
    assert "uws/schemas/xlink.xsd" in names
    assert {f"uws/schemas/{name}" for name in (
        "VOSIAvailability-v1.0.xsd", "VOSICapabilities-v1.0.xsd", "VOResource-v1.1.xsd",
        "VODataService-v1.3.xsd", "STC-stub.xsd", "README")} <= set(names)
    assert "uws/templates/base.html" in names
    assert {"uws/templates/uws.css", "uws/templates/uws.js", "uws/templates/job.html"} <= set(names)
    assert {"uws/store/migrations/env.py", "uws/store/migrations/script.py.mako",
            "uws/store/migrations/versions/v0001_initial.py"} <= set(names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "uws = uws.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_suite_runs_against_the_installed_package_not_the_checkout():
    installed = Path(uws.__file__).resolve().parent
    assert CHECKOUT not in installed.parents, (
        f"uws was imported from {installed}: install it with pip install '.[test]' "
        "(not editable) and run pytest")
    from uws.resources import schemas_dir, templates_dir
    assert templates_dir() == installed / "templates"
    assert schemas_dir() == installed / "schemas"


def test_schema_is_the_official_uws_1_1():
    from uws.resources import uws_schema_path
    text = uws_schema_path().read_text()
    assert 'version="1.1-REC-20161024"' in text
    assert 'schemaLocation="xlink.xsd"' in text


def _up(url: str) -> bool:
    try:
        return requests.get(url + "/", timeout=5).status_code == 200
    except requests.RequestException:     # not listening yet, or still starting
        return False


@pytest.fixture(scope="module", params=["uws serve", "gunicorn"])
def installed(request, tmp_path_factory):
    """The installed server started from a directory unrelated to the checkout."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
    env["UWS_DATA_DIR"] = str(elsewhere / "data")
    if request.param == "uws serve":
        command = [UWS_COMMAND, "serve", "--port", str(port)]
    else:
        command = [GUNICORN, "--workers", "1", "--threads", "8", "--bind",
                   f"127.0.0.1:{port}", "uws:create_app()"]
    process = subprocess.Popen(command, cwd=elsewhere, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url) or process.poll() is not None, timeout=30, step=0.1)
        assert process.poll() is None, process.stderr.read().decode()
        yield url
    finally:
        process.terminate()
        process.wait(15)


def page(response, status: int = 200):
    assert response.status_code == status, response.text[:300]
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    return html.fromstring(response.content)


def test_the_services_page_lists_the_services(installed):
    doc = page(requests.get(installed + "/", headers=BROWSER))
    assert doc.findtext(".//h1") == "Services"
    assert {a.get("href") for a in doc.iterfind(".//ul[@class='services']//a")} >= {
        f"{installed}/sleep", f"{installed}/checksum"}


def test_a_service_page_shows_its_creation_form(installed):
    doc = page(requests.get(installed + "/sleep", headers=BROWSER))
    assert doc.get_element_by_id("new-DURATION").get("value") == "1"


def test_a_job_created_in_the_browser_has_its_page(installed):
    created = requests.post(installed + "/sleep", data={"DURATION": "0"}, headers=BROWSER,
                            allow_redirects=False)
    assert created.status_code == 303
    doc = page(requests.get(created.headers["Location"], headers=BROWSER))
    assert doc.find(".//article[@class='job']").get("data-phase") == "PENDING"


def test_an_unknown_job_is_a_404_page(installed):
    doc = page(requests.get(f"{installed}/sleep/{UNKNOWN_JOB}", headers=BROWSER), 404)
    assert "404" in doc.findtext(".//title")


def test_an_unknown_url_is_a_404_page(installed):
    page(requests.get(f"{installed}/sleep/{UNKNOWN_JOB}/no/such/thing", headers=BROWSER), 404)


@pytest.mark.parametrize("name, mimetype", [("uws.css", "text/css"),
                                            ("uws.js", "text/javascript")])
def test_the_stylesheet_and_script_are_served(installed, name, mimetype):
    r = requests.get(f"{installed}/_static/{name}")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(mimetype)
    assert r.content == (Path(uws.__file__).parent / "templates" / name).read_bytes()


def test_clients_other_than_browsers_still_get_uws_xml(installed):
    r = requests.get(installed + "/sleep")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/xml")
    assert b"<uws:jobs" in r.content
