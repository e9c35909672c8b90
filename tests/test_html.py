"""The browser interface through the Flask test client: pages, forms and negotiation.

Browsers ask with ``Accept: text/html`` first; everything else keeps getting XML.
"""
from __future__ import annotations

import io

import pytest
from lxml import html

from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config

#: one database is enough here (the pages' rendering; the store's side is in the protocol tests;
#: tests/README.rst)
BACKENDS = ("sqlite",)

HTML = {"Accept": "text/html"}
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
TYPED = {"typed": {
    "description": "Every parameter type",
    "runner": "uws.demo:sleep",
    "parameters": [
        {"name": "COUNT", "type": "integer", "default": 3, "min": 1, "max": 9,
         "description": "How many."},
        {"name": "RATIO", "type": "float", "description": "A fraction."},
        {"name": "VERBOSE", "type": "boolean", "default": True, "description": "Talk."},
        {"name": "MODE", "type": "enum", "choices": ["fast", "slow"], "default": "slow",
         "description": "Which way."},
        {"name": "WHEN", "type": "datetime", "description": "A moment."},
        {"name": "DATA", "type": "file", "required": True, "description": "The input."},
        {"name": "LABEL", "type": "string", "required": True, "description": "A name."},
    ]}}


def page(response, status=200):
    assert response.status_code == status, response.data[:500]
    assert response.content_type == "text/html; charset=utf-8"
    return html.fromstring(response.data)


def location(response) -> str:
    assert response.status_code == 303, response.data
    return response.headers["Location"].replace("http://localhost", "")


def create(client, **data) -> str:
    return location(client.post("/sleep", data=data))


def finish(client, path: str) -> None:
    for _ in range(30):
        if client.get(f"{path}/phase").text not in ("PENDING", "QUEUED", "EXECUTING"):
            return
        client.get(f"{path}?WAIT=5")
    pytest.fail(f"{path} did not finish")


@pytest.fixture
def typed(tmp_path, db_url):
    application = create_app(make_config(tmp_path, db_url, services=TYPED))
    application.test_client_class = ValidatingClient
    yield application.test_client()
    shutdown(application)


def inputs(doc, name: str):
    return doc.xpath(f'//form[contains(@class, "create")]//*[@name="{name}"]')


def field_error(doc, name: str) -> str:
    return " ".join(doc.xpath(f'//div[@data-field="{name}"]//p[@class="field-error"]//text()'))


# -- pages -------------------------------------------------------------------------

def test_root_lists_each_service_with_its_description(client):
    doc = page(client.get("/", headers=HTML))
    cards = doc.xpath('//ul[@class="services"]/li')
    assert [c.xpath("string(.//h2)").strip() for c in cards] == ["sleep", "checksum"]
    assert "Sleeps for DURATION seconds" in cards[0].text_content()
    assert cards[0].xpath(".//h2/a/@href") == ["http://localhost/sleep"]


def test_service_page_has_the_creation_form_and_the_job_list(client):
    create(client, RUNID="first")
    doc = page(client.get("/sleep", headers=HTML))
    assert doc.xpath('//form[contains(@class, "create")]/@action') == ["http://localhost/sleep"]
    assert doc.xpath('//table[@class="joblist"]//a/text()') == ["first"]


def test_job_page_shows_every_uws_field(client):
    path = create(client, RUNID="mine", DURATION="5")
    doc = page(client.get(path, headers=HTML))
    labels = doc.xpath("//dl[@class='fields']/dt/text()")
    assert labels == ["Job ID", "Run ID", "Owner", "Phase", "Quote", "Created", "Started",
                      "Ended", "Execution duration", "Destruction", "Priority"]
    assert doc.xpath("string(//dl/dd[1])") == path.rsplit("/", 1)[1]
    assert doc.xpath("//table[@class='params']//th/text()") == ["DURATION", "FAIL", "MESSAGE"]


def test_run_id_is_escaped_everywhere(client):
    path = create(client, RUNID="<script>alert(1)</script>")
    for url in (path, "/sleep"):
        body = client.get(url, headers=HTML).get_data(as_text=True)
        assert "<script>alert(1)" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_pages_carry_no_inline_script_or_style(client):
    path = create(client)
    for url in ("/", "/sleep", path):
        doc = page(client.get(url, headers=HTML))
        assert doc.xpath("//script[not(@src)] | //style | //*[@style]") == []
        assert doc.xpath("//script/@src") == ["/_static/uws.js"]


def test_pages_name_an_inline_icon_so_browsers_ask_for_no_favicon(client):
    # Without one, every browser visit costs a /favicon.ico request answered 404.
    path = create(client)
    for url in ("/", "/sleep", path):
        doc = page(client.get(url, headers=HTML))
        assert doc.xpath("//head/link[@rel='icon']/@href") == ["data:,"]


def test_times_are_utc_time_elements(client):
    path = create(client)
    doc = page(client.get(path, headers=HTML))
    created = doc.xpath("//dl/dd[6]/time")[0]
    assert created.get("datetime").endswith("Z")
    assert created.text.endswith(" UTC")


def test_static_files_are_served_with_their_types(client):
    assert client.get("/_static/uws.css").content_type.startswith("text/css")
    assert client.get("/_static/uws.js").content_type.startswith("text/javascript")
    assert client.get("/_static/base.html").status_code == 404


# -- negotiation -------------------------------------------------------------------

def test_xml_is_served_without_an_accept_header(client):
    path = create(client)
    assert client.get(path).content_type == "text/xml; charset=utf-8"
    assert client.get("/sleep").content_type == "text/xml; charset=utf-8"
    assert client.get("/").content_type == "text/plain; charset=utf-8"


def test_xml_is_served_when_xml_ranks_above_html(client):
    headers = {"Accept": "application/xml, text/html;q=0.9"}
    assert client.get(create(client), headers=headers).content_type == "text/xml; charset=utf-8"


def test_a_real_browser_accept_header_gets_html(client):
    assert client.get("/sleep", headers=BROWSER).content_type == "text/html; charset=utf-8"


@pytest.mark.parametrize("accept", [
    "text/html, image/gif, image/jpeg, */*; q=0.2",       # Java 17 HttpURLConnection
    "text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2",  # older JDKs
])
def test_java_clients_default_accept_gets_xml(client, accept):
    """STILTS and TOPCAT send no Accept of their own: the JDK's default ranks
    text/html first, yet they parse the answer as UWS XML."""
    path = create(client)
    for url in (path, "/sleep"):
        r = client.get(url, headers={"Accept": accept})
        assert r.content_type == "text/xml; charset=utf-8", url


def test_a_range_refused_with_q_0_does_not_count(client):
    accept = "text/html, application/xhtml+xml;q=0, */*;q=0.2"
    assert client.get("/sleep", headers={"Accept": accept}).content_type == \
        "text/xml; charset=utf-8"


def test_a_client_naming_only_html_gets_html(client):
    assert client.get("/sleep", headers=HTML).content_type == "text/html; charset=utf-8"


def test_errors_are_pages_for_browsers_and_text_for_clients(client):
    missing = "/sleep/" + "0" * 32
    doc = page(client.get(missing, headers=HTML), status=404)
    assert "no job" in doc.xpath("string(//p[@class='message'])")
    assert client.get(missing).content_type == "text/plain; charset=utf-8"


@pytest.mark.parametrize("accept", [BROWSER, {}])
@pytest.mark.parametrize("host", ["a..b", "xn--a", "a" * 64, "", ":8700"])
def test_an_unusable_host_header_answers_400_in_text(live_server, host, accept):
    import requests  # over real HTTP: werkzeug's test client itself fails on such hosts
    r = requests.get(f"{live_server.url}/sleep", headers={**accept, "Host": host}, timeout=10)
    assert r.status_code == 400
    assert r.headers["Content-Type"] == "text/plain; charset=utf-8"


# -- the creation form -------------------------------------------------------------

def test_form_inputs_match_the_declared_types(typed):
    doc = page(typed.get("/typed", headers=HTML))
    assert [i.get("type") for i in inputs(doc, "COUNT")] == ["number"]
    assert inputs(doc, "COUNT")[0].get("step") == "1"
    assert inputs(doc, "RATIO")[0].get("step") == "any"
    assert [i.get("type") for i in inputs(doc, "VERBOSE")] == ["hidden", "checkbox"]
    assert inputs(doc, "MODE")[0].tag == "select"
    assert inputs(doc, "MODE")[0].xpath("option/text()") == ["fast", "slow"]
    assert inputs(doc, "WHEN")[0].get("type") == "datetime-local"
    assert [i.get("type") for i in inputs(doc, "DATA")] == ["file", "url"]
    assert inputs(doc, "LABEL")[0].get("type") == "text"


def test_form_shows_defaults_ranges_and_descriptions(typed):
    doc = page(typed.get("/typed", headers=HTML))
    count = inputs(doc, "COUNT")[0]
    assert (count.get("value"), count.get("min"), count.get("max")) == ("3", "1", "9")
    assert inputs(doc, "VERBOSE")[1].get("checked") is not None
    assert inputs(doc, "MODE")[0].xpath("option[@selected]/text()") == ["slow"]
    assert "How many." in doc.xpath("string(//div[@data-field='COUNT']//p[@class='help'])")


def test_form_marks_required_parameters(typed):
    doc = page(typed.get("/typed", headers=HTML))
    required = doc.xpath("//div[@data-field][.//abbr[@class='required']]/@data-field")
    assert required == ["DATA", "LABEL"]
    assert inputs(doc, "LABEL")[0].get("required") is not None


def test_form_has_create_and_run_and_create_buttons(client):
    doc = page(client.get("/sleep", headers=HTML))
    buttons = doc.xpath("//form[contains(@class, 'create')]//button")
    assert [(b.get("name"), b.get("value"), b.text) for b in buttons] == [
        ("PHASE", "RUN", "Create and run"), (None, None, "Create")]


def test_bad_value_answers_400_with_the_error_next_to_its_field(client):
    r = client.post("/sleep", data={"DURATION": "soon", "MESSAGE": "kept"}, headers=HTML)
    doc = page(r, status=400)
    assert "not a number" in field_error(doc, "DURATION")
    assert field_error(doc, "MESSAGE") == ""


def test_bad_values_are_kept_in_the_form(client):
    r = client.post("/sleep", data={"duration": "soon", "MESSAGE": "kept <b>", "FAIL": ["false", "true"],
                                    "RUNID": "my run"}, headers=HTML)
    doc = page(r, status=400)
    assert inputs(doc, "DURATION")[0].get("value") == "soon"
    assert inputs(doc, "MESSAGE")[0].get("value") == "kept <b>"
    assert inputs(doc, "FAIL")[1].get("checked") is not None
    assert inputs(doc, "RUNID")[0].get("value") == "my run"


def test_every_bad_field_is_reported_at_once(typed):
    r = typed.post("/typed", data={"COUNT": "12", "RATIO": "x", "LABEL": "a"}, headers=HTML)
    doc = page(r, status=400)
    assert "at most 9" in field_error(doc, "COUNT")
    assert "not a number" in field_error(doc, "RATIO")


def test_missing_required_file_is_reported_next_to_it(typed):
    doc = page(typed.post("/typed", data={"LABEL": "a", "DATA": ""}, headers=HTML), status=400)
    assert field_error(doc, "DATA") == "is required"


def test_a_chosen_file_dropped_by_another_fields_error_is_pointed_out(typed):
    r = typed.post("/typed", headers=HTML, content_type="multipart/form-data", data={
        "COUNT": "12", "LABEL": "x", "DATA": (io.BytesIO(b"abc"), "a.txt")})
    doc = page(r, status=400)
    assert "not kept" in field_error(doc, "DATA")
    assert "Choose the file again" in doc.xpath("string(//div[@data-field='DATA']//p[@class='help'])")


def test_bad_job_control_value_is_reported_next_to_it(client):
    r = client.post("/sleep", data={"EXECUTIONDURATION": "-5", "DESTRUCTION": "2000-01-01T00:00"},
                    headers=HTML)
    doc = page(r, status=400)
    assert "non-negative" in field_error(doc, "EXECUTIONDURATION")
    assert field_error(doc, "DESTRUCTION") == "must be in the future"


@pytest.mark.parametrize("run_id", ["r\x01s", "esc\x1b[0m", "x" * 1025])
def test_a_runid_the_api_refuses_is_refused_next_to_its_field(client, run_id):
    # the same rule as the API (uws.domain.model.check_run_id): a form adds no leniency
    r = client.post("/sleep", data={"DURATION": "1", "RUNID": run_id}, headers=HTML)
    doc = page(r, status=400)
    assert "no control characters" in field_error(doc, "RUNID")
    assert client.get("/sleep").data.count(b"<uws:jobref") == 0


def test_clients_still_get_plain_400_text(client):
    r = client.post("/sleep", data={"DURATION": "soon"})
    assert r.status_code == 400
    assert r.content_type == "text/plain; charset=utf-8"


def test_form_post_with_empty_fields_creates_the_job(typed):
    r = typed.post("/typed", headers=HTML, content_type="multipart/form-data", data={
        "COUNT": "", "RATIO": "", "VERBOSE": "false", "MODE": "fast", "WHEN": "",
        "DATA": [(io.BytesIO(b"abc"), "a.txt"), ""], "LABEL": "x", "RUNID": "",
        "EXECUTIONDURATION": "", "DESTRUCTION": ""})
    job = page(typed.get(location(r), headers=HTML))
    values = dict(zip(job.xpath("//table[@class='params']//th/text()"),
                      (td.text_content() for td in job.xpath("//table[@class='params']//td"))))
    assert values == {"VERBOSE": "false", "MODE": "fast", "DATA": "uploaded file",
                      "LABEL": "x", "COUNT": "3"}


def test_checked_checkbox_wins_over_its_hidden_false(client):
    path = create(client, FAIL="false")
    r = client.post("/sleep", data={"FAIL": ["false", "true"], "DURATION": "1"}, headers=HTML)
    doc = page(client.get(location(r), headers=HTML))
    assert "true" in doc.xpath("string(//table[@class='params']//tr[th='FAIL']/td)")
    assert "false" in page(client.get(path, headers=HTML)).xpath(
        "string(//table[@class='params']//tr[th='FAIL']/td)")


def test_create_and_run_button_queues_the_job(client):
    r = client.post("/sleep", data={"DURATION": "0", "PHASE": "RUN"}, headers=HTML)
    assert client.get(location(r) + "/phase").text != "PENDING"


# -- the job page ------------------------------------------------------------------

def test_pending_job_offers_run_abort_and_delete(client):
    doc = page(client.get(create(client), headers=HTML))
    shown = doc.xpath("//div[@class='actions']/form[not(@hidden)]//button/text()")
    assert shown == ["Run", "Abort", "Delete"]


def test_finished_job_offers_only_repeat_and_delete(client):
    path = create(client, DURATION="0", PHASE="RUN")
    finish(client, path)
    doc = page(client.get(path, headers=HTML))
    shown = doc.xpath("//div[@class='actions']/form[not(@hidden)]//button/text()")
    assert shown == ["Repeat", "Delete"]


def test_results_are_download_links_with_type_and_size(client):
    path = create(client, DURATION="0", PHASE="RUN")
    finish(client, path)
    doc = page(client.get(path, headers=HTML))
    link = doc.xpath("//ul[@class='results']//a")[0]
    assert link.get("href") == f"http://localhost{path}/results/result"
    assert link.get("download") is not None
    assert "text/plain" in link.getparent().text_content()
    assert "bytes" in link.getparent().text_content()


def test_uploaded_parameter_is_a_download_link(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"x"), "x.bin")},
                    content_type="multipart/form-data")
    path = location(r)
    doc = page(client.get(path, headers=HTML))
    assert doc.xpath("//table[@class='params']//tr[th='FILE']//a/@href") == [
        f"http://localhost{path}/parameters/FILE"]


def test_error_summary_and_detail_are_shown(client):
    path = create(client, DURATION="0", FAIL="true", MESSAGE="it broke", PHASE="RUN")
    finish(client, path)
    doc = page(client.get(path, headers=HTML))
    assert doc.xpath("string(//section[contains(@class,'job-error')]/p[@class='message'])") == "it broke"
    assert "RuntimeError" in doc.xpath("string(//section[contains(@class,'job-error')]//pre)")


def test_job_page_forms_post_to_the_uws_resources(client):
    path = create(client)
    doc = page(client.get(path, headers=HTML))
    actions = doc.xpath("//form/@action")
    base = f"http://localhost{path}"
    assert {f"{base}/phase", base, f"{base}/executionduration", f"{base}/destruction",
            f"{base}/parameters"} <= set(actions)


def test_browser_delete_redirects_to_the_whole_paged_list(client):
    # The LAST=100 that keeps a client's redirect cheap would hide older jobs from
    # a person; the HTML list is paged anyway.
    path = create(client)
    r = client.post(path, data={"ACTION": "DELETE"}, headers=HTML)
    assert location(r) == f"/sleep?deleted={path.rsplit('/', 1)[1]}"     # and no LAST
    page(client.get(location(r), headers=HTML))
    assert client.get(path).status_code == 404


def test_parameter_form_updates_a_pending_job(client):
    path = create(client, DURATION="1")
    r = client.post(f"{path}/parameters", headers=HTML,
                    data={"DURATION": "7", "FAIL": ["false", "true"], "MESSAGE": ""})
    assert location(r) == path
    doc = page(client.get(path, headers=HTML))
    assert doc.xpath("string(//table[@class='params']//tr[th='DURATION']/td)") == "7"


def test_forbidden_phase_change_is_an_error_page(client):
    path = create(client, DURATION="0", PHASE="RUN")
    finish(client, path)
    doc = page(client.post(f"{path}/phase", data={"PHASE": "RUN"}, headers=HTML), status=403)
    assert "cannot run" in doc.xpath("string(//p[@class='message'])")


# -- the job list ------------------------------------------------------------------

def test_list_pages_by_fifty_with_a_total(client, api):
    api.store.seed_jobs("sleep", 120)
    doc = page(client.get("/sleep", headers=HTML))
    assert len(doc.xpath("//table[@class='joblist']/tbody/tr")) == 50
    assert doc.xpath("string(//span[@data-role='range'])") == "1–50 of 120"
    assert doc.xpath("//a[@rel='next']/@href") == ["http://localhost/sleep?start=50"]
    assert doc.xpath("//a[@rel='prev']") == []


def test_last_list_page_links_back_and_not_on(client, api):
    api.store.seed_jobs("sleep", 120)
    doc = page(client.get("/sleep?start=100", headers=HTML))
    assert len(doc.xpath("//table[@class='joblist']/tbody/tr")) == 20
    assert doc.xpath("//a[@rel='prev']/@href") == ["http://localhost/sleep?start=50"]
    assert doc.xpath("//a[@rel='next']") == []


@pytest.mark.parametrize("query", [
    "PHASE=FOO", "AFTER=garbage", "LAST=0", "extend=0", "extend=10001", "start=-1",
    "start=100001", "cursor=not-a-cursor", "LAST=5&extend=10", "LAST=5&start=10",
])
def test_the_list_page_refuses_what_the_xml_list_refuses(client, query):
    xml_list, html_list = client.get(f"/sleep?{query}"), client.get(f"/sleep?{query}", headers=HTML)
    assert xml_list.status_code == html_list.status_code == 400
    assert xml_list.text.strip() in page(html_list, status=400).text_content()   # same message


def test_list_page_with_last_shows_that_many_newest_on_one_page(client, api):
    api.store.seed_jobs("sleep", 120)
    doc = page(client.get("/sleep?LAST=70", headers=HTML))
    assert len(doc.xpath("//table[@class='joblist']/tbody/tr")) == 70
    assert doc.xpath("string(//span[@data-role='range'])") == "1–70 of 70"
    assert doc.xpath("//a[@rel='next']") == []


def test_list_page_follows_a_cursor_from_the_xml_list(client, api):
    api.store.seed_jobs("sleep", 30)
    link = client.get("/sleep?extend=10").headers["Link"]
    next_url = link[1:link.index(">")].replace("http://localhost", "")
    doc = page(client.get(next_url, headers=HTML))
    assert doc.xpath("string(//span[@data-role='range'])") == "1–10 of 20"


def test_list_is_newest_first(client):
    create(client, RUNID="a")
    create(client, RUNID="b")
    doc = page(client.get("/sleep", headers=HTML))
    assert doc.xpath("//table[@class='joblist']//td[@class='job-name']/a/text()") == ["b", "a"]


def test_list_shows_a_short_id_for_jobs_without_run_id(client):
    job_id = create(client).rsplit("/", 1)[1]
    link = page(client.get("/sleep", headers=HTML)).xpath("//td[@class='job-name']/a")[0]
    assert (link.text, link.get("title")) == (job_id[:12] + "…", job_id)


def test_phase_filter_links_select_a_phase(client):
    create(client, RUNID="waiting")
    finish(client, create(client, RUNID="done", DURATION="0", PHASE="RUN"))
    doc = page(client.get("/sleep", headers=HTML))
    href = doc.xpath("//nav[@class='filters']/a[text()='COMPLETED']/@href")[0]
    assert href == "http://localhost/sleep?PHASE=COMPLETED"
    filtered = page(client.get(href, headers=HTML))
    assert filtered.xpath("//td[@class='job-name']/a/text()") == ["done"]
    assert filtered.xpath("//nav[@class='filters']/a[@aria-current]/text()") == ["COMPLETED"]


def test_list_rows_show_phase_badge_owner_and_creation_time(client):
    create(client, RUNID="r")
    row = page(client.get("/sleep", headers=HTML)).xpath("//table[@class='joblist']/tbody/tr")[0]
    assert row.xpath("string(.//span[contains(@class,'badge')])") == "PENDING"
    assert "phase-pending" in row.xpath(".//span[contains(@class,'badge')]/@class")[0]
    assert "anonymous" in row.text_content()
    assert row.xpath(".//time/@datetime")[0].endswith("Z")


def test_executing_jobs_have_a_progress_bar_in_the_list(client):
    path = create(client, DURATION="30", PHASE="RUN")
    for _ in range(50):
        if client.get(f"{path}/phase").text == "EXECUTING":
            break
        client.get(f"{path}?WAIT=1&PHASE=QUEUED")
    row = page(client.get("/sleep", headers=HTML)).xpath("//table[@class='joblist']/tbody/tr")[0]
    assert row.xpath(".//progress[@max='100']")
    client.post(f"{path}/phase", data={"PHASE": "ABORT"})


@pytest.mark.parametrize("path", ["/", "/sleep", "/sleep?LAST=5"])
def test_negotiated_xml_and_text_say_they_vary_by_accept(client, path):
    assert client.get(path).headers.get("Vary") == "Accept"


def test_the_job_xml_says_it_varies_by_accept(client):
    job = client.post("/sleep", data={"DURATION": "0"}).headers["Location"]
    assert client.get(job.replace("http://localhost", "")).headers.get("Vary") == "Accept"
