"""The browser pages' forms through the Flask test client: deleting after a confirmation
page, the notice of what was deleted, and a refused change of parameters shown on the
job's page next to its field (see tests/test_browser_pages.py for them in Chromium)."""
from __future__ import annotations

import pytest

from test_html import HTML, create, finish, location, page
from uws.usecases.batches import BatchControl

#: one database is enough here: tests/test_delete.py and tests/test_batches.py cover the
#: store's side of deleting
BACKENDS = ("sqlite",)


def exists(client, path: str) -> bool:
    status = client.get(path).status_code
    assert status in (200, 404)
    return status == 200


@pytest.fixture
def batch(app):
    rows = [[("DURATION", "0")], [("DURATION", "0")]]
    batch_id = app.extensions["uws_batches"].create("sleep", rows, BatchControl(run_id="pair"))
    return f"/sleep/batches/{batch_id}"


# -- confirming a deletion ---------------------------------------------------------------

def test_the_job_pages_delete_button_asks_for_the_confirmation_page(client):
    path = create(client, RUNID="doomed")
    doc = page(client.get(path, headers=HTML))
    form = doc.xpath("//div[@class='actions']/form[.//button[text()='Delete']]")[0]
    assert (form.get("method"), form.get("action")) == ("get", f"http://localhost{path}/delete")


def test_the_job_confirmation_page_names_the_job_and_posts_method_delete(client):
    path = create(client, RUNID="doomed")
    doc = page(client.get(f"{path}/delete"))
    assert doc.xpath("string(//h1)").split() == ["Delete", "job", "doomed?"]
    form = doc.xpath("//*[@data-role='confirm']//form")[0]
    assert (form.get("method"), form.get("action")) == ("post", f"http://localhost{path}")
    assert {i.get("name"): i.get("value") for i in form.xpath(".//input")} == {"METHOD": "DELETE"}
    assert doc.xpath("//*[@data-role='confirm']//a[text()='Cancel']/@href") == [
        f"http://localhost{path}"]


def test_showing_the_job_confirmation_page_deletes_nothing(client):
    path = create(client)
    page(client.get(f"{path}/delete"))
    assert exists(client, path)


def test_the_job_confirmation_page_of_no_such_job_answers_404(client):
    assert client.get(f"/sleep/{'0' * 32}/delete", headers=HTML).status_code == 404


def test_the_confirmed_deletion_lands_on_the_list_saying_which_job(client):
    path = create(client)
    job_id = path.rsplit("/", 1)[1]
    r = client.post(path, data={"METHOD": "DELETE"}, headers=HTML)
    assert location(r) == f"/sleep?deleted={job_id}"
    doc = page(client.get(location(r), headers=HTML))
    assert doc.xpath("string(//*[@data-role='deleted'])") == f"Job {job_id} was deleted."
    assert not exists(client, path)


def test_an_api_client_deleting_a_job_is_sent_to_the_list_as_before(client):
    path = create(client)
    r = client.post(path, data={"ACTION": "DELETE"})
    assert r.status_code == 303
    assert "deleted=" not in r.headers["Location"]
    r = client.delete(create(client))
    assert r.status_code == 303
    assert "deleted=" not in r.headers["Location"]


@pytest.mark.parametrize("value", ['<script>alert(1)</script>', '"><b>x</b>',
                                   "0123456789abcdef0123456789abcdeX", "x" * 200])
def test_a_deleted_notice_shows_only_a_job_id_never_other_text(client, value):
    r = client.get("/sleep", query_string={"deleted": value}, headers=HTML)
    doc = page(r)
    assert doc.xpath("//*[@data-role='deleted']") == []
    assert b"<script>alert" not in r.data and b"<b>x</b>" not in r.data


def test_the_batch_pages_delete_button_asks_for_the_confirmation_page(client, batch):
    doc = page(client.get(batch, headers=HTML))
    form = doc.xpath("//div[@class='actions']/form[.//button[text()='Delete']]")[0]
    assert (form.get("method"), form.get("action")) == ("get", f"http://localhost{batch}/delete")


def test_the_batch_confirmation_page_names_the_batch_and_posts_method_delete(client, batch):
    doc = page(client.get(f"{batch}/delete"))
    assert doc.xpath("string(//h1)").split() == ["Delete", "batch", "pair?"]
    assert "2 jobs" in doc.xpath("string(//*[@data-role='confirm']//p)")
    form = doc.xpath("//*[@data-role='confirm']//form")[0]
    assert (form.get("method"), form.get("action")) == ("post", f"http://localhost{batch}")
    assert {i.get("name"): i.get("value") for i in form.xpath(".//input")} == {"METHOD": "DELETE"}
    assert exists(client, batch)


def test_the_confirmed_batch_deletion_lands_on_the_list_saying_which_batch(client, batch):
    batch_id = batch.rsplit("/", 1)[1]
    r = client.post(batch, data={"METHOD": "DELETE"}, headers=HTML)
    assert location(r) == f"/sleep/batches?deleted={batch_id}"
    doc = page(client.get(location(r), headers=HTML))
    assert doc.xpath("string(//*[@data-role='deleted'])") == f"Batch {batch_id} was deleted."
    assert not exists(client, batch)


def test_an_api_client_deleting_a_batch_is_sent_to_the_list_as_before(client, batch):
    r = client.delete(batch)
    assert r.status_code == 303
    assert r.headers["Location"] == "http://localhost/sleep/batches"


def test_the_batch_confirmation_page_of_no_such_batch_answers_404(client):
    assert client.get(f"/sleep/batches/{'0' * 32}/delete", headers=HTML).status_code == 404


# -- changing parameters ---------------------------------------------------------------------

def field_error(doc, name: str) -> str:
    return doc.xpath(f"string(//details[contains(@class, 'edit')]//div[@data-field='{name}']"
                     "//p[@class='field-error'])")


def edit_input(doc, name: str):
    return doc.xpath(f"//details[contains(@class, 'edit')]//*[@name='{name}']")


def test_a_refused_change_shows_the_job_page_with_the_error_beside_the_field(client):
    path = create(client, DURATION="1", MESSAGE="before")
    r = client.post(f"{path}/parameters", headers=HTML,
                    data={"DURATION": "abc", "FAIL": "false", "MESSAGE": "after"})
    doc = page(r, status=400)
    assert doc.xpath("//article[contains(@class, 'job')]")
    assert "DURATION" not in field_error(doc, "DURATION") and field_error(doc, "DURATION")
    assert field_error(doc, "MESSAGE") == ""
    assert doc.xpath("//details[contains(@class, 'edit')]")[0].get("open") is not None
    assert doc.xpath("//details[contains(@class, 'edit')]//p[@role='alert']")


def test_a_refused_change_keeps_the_values_sent(client):
    path = create(client, DURATION="1", MESSAGE="before")
    r = client.post(f"{path}/parameters", headers=HTML,
                    data={"DURATION": "abc", "FAIL": ["false", "true"], "MESSAGE": "after"})
    doc = page(r, status=400)
    assert edit_input(doc, "DURATION")[0].get("value") == "abc"
    assert edit_input(doc, "MESSAGE")[0].get("value") == "after"
    assert edit_input(doc, "FAIL")[1].get("checked") is not None


def test_a_refused_change_changes_nothing(client):
    path = create(client, DURATION="1", MESSAGE="before")
    r = client.post(f"{path}/parameters", headers=HTML,
                    data={"DURATION": "-1", "MESSAGE": "after"})
    page(r, status=400)
    assert client.get(f"{path}/parameters/MESSAGE").text == "before"


def test_an_accepted_change_from_the_form_goes_back_to_the_job(client):
    path = create(client, DURATION="1")
    r = client.post(f"{path}/parameters", headers=HTML,
                    data={"DURATION": "2", "FAIL": "false", "MESSAGE": "after"})
    assert location(r) == path
    assert client.get(f"{path}/parameters/MESSAGE").text == "after"


def test_a_change_to_a_finished_job_from_the_form_still_answers_403(client):
    path = create(client, DURATION="0", PHASE="RUN")
    finish(client, path)
    r = client.post(f"{path}/parameters", headers=HTML, data={"DURATION": "abc"})
    assert r.status_code == 403


def test_an_api_client_still_gets_a_plain_400(client):
    path = create(client, DURATION="1")
    r = client.post(f"{path}/parameters", data={"DURATION": "abc"})
    assert r.status_code == 400
    assert b"<article" not in r.data


# -- a finished job's progress text ----------------------------------------------------------

def test_a_completed_sleep_job_says_what_it_did(client):
    path = create(client, DURATION="0.2", PHASE="RUN")
    finish(client, path)
    doc = page(client.get(path, headers=HTML))
    assert doc.xpath("string(//*[@data-role='message'])") == "slept 0.2 s"


@pytest.mark.parametrize("phase", ["ABORTED", "ERROR", "COMPLETED"])
def test_a_finished_jobs_report_below_100_percent_is_shown_as_the_last_one(api, phase):
    import dataclasses

    from uws.domain.phases import Phase
    from uws.render.xml import Links
    from uws.usecases.jobs import Control
    from uws.web.jobview import JobView
    job = api.get("sleep", api.create("sleep", [("DURATION", "3")], {}, Control()))
    ended = dataclasses.replace(job, phase=Phase(phase), progress=97.0,
                                progress_message="slept 2.9 of 3 s")
    view = JobView(ended, Links("http://localhost/sleep/x"))
    assert view.progress_message == "(last reported at 97%: slept 2.9 of 3 s)"
    running = dataclasses.replace(ended, phase=Phase.EXECUTING)
    assert JobView(running, Links("http://localhost/sleep/x")).progress_message \
        == "slept 2.9 of 3 s"
