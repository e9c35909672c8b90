"""The job list ``GET /{jobs}`` (UWS 1.1 §2.2.2.1) and our paging extension."""
from __future__ import annotations

import datetime as dt
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from lxml import etree

from uws.store.tables import job as job_table

from conftest import make_config
from uwshelp import HREF, NIL, NS, create_id, path_of

NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@pytest.fixture
def config(tmp_path, db_url):
    # Lists only: no executor, so a job a test moves by hand stays where it was put.
    return make_config(tmp_path, db_url, executor="none")


def get_list(client, *pairs, service="sleep"):
    """GET the job list with the query ``pairs``; the response."""
    query = f"?{urlencode(pairs)}" if pairs else ""
    return client.get(f"/{service}{query}")


def listed(client, *pairs) -> list[str]:
    """Ids of the jobs listed for the query ``pairs``, in document order."""
    r = get_list(client, *pairs)
    assert r.status_code == 200, r.data
    return [ref.get("id") for ref in etree.fromstring(r.data).findall("uws:jobref", NS)]


def abort(api, job_id: str) -> None:
    assert api.store.mark_aborted(job_id)


def archive(api, job_id: str) -> None:
    abort(api, job_id)
    assert api.store.archive(job_id)


def set_creation_time(api, job_id: str, when: dt.datetime) -> None:
    """Put a job at a known creation instant (naive UTC), for AFTER tests."""
    with api.store.engine.begin() as conn:
        conn.execute(job_table.update().where(job_table.c.id == job_id)
                     .values(creation_time=when))


def next_link(response) -> str | None:
    match = NEXT_LINK.search(response.headers.get("Link", ""))
    return match.group(1) if match else None


# -- the document -------------------------------------------------------------------

def test_empty_list_is_a_valid_jobs_document(client):
    r = client.get("/sleep")
    assert r.status_code == 200
    root = etree.fromstring(r.data)
    assert root.tag == "{%s}jobs" % NS["uws"]
    assert root.findall("uws:jobref", NS) == []


def test_list_declares_version_1_1(client):
    create_id(client)
    root = etree.fromstring(client.get("/sleep").data)
    assert root.get("version") == "1.1"


def test_list_is_served_as_xml(client):
    r = client.get("/sleep")
    assert r.mimetype in ("text/xml", "application/xml")


def test_jobref_links_to_the_absolute_job_url(client):
    job_id = create_id(client)
    ref = etree.fromstring(client.get("/sleep").data).find("uws:jobref", NS)
    assert ref.get("id") == job_id
    assert ref.get(HREF) == f"http://localhost/sleep/{job_id}"


def test_jobref_href_uses_the_host_the_client_addressed(client):
    job_id = create_id(client)
    r = client.get("/sleep", base_url="https://127.0.0.1:8443")
    ref = etree.fromstring(r.data).find("uws:jobref", NS)
    assert ref.get(HREF) == f"https://127.0.0.1:8443/sleep/{job_id}"


def test_jobref_shows_phase_runid_nil_owner_and_creation_time(client):
    job_id = create_id(client, RUNID="my run 1")
    job = etree.fromstring(client.get(f"/sleep/{job_id}").data)
    ref = etree.fromstring(client.get("/sleep").data).find("uws:jobref", NS)
    assert ref.findtext("uws:phase", namespaces=NS) == "PENDING"
    assert ref.findtext("uws:runId", namespaces=NS) == "my run 1"
    assert ref.find("uws:ownerId", NS).get(NIL) == "true"
    assert ref.findtext("uws:creationTime", namespaces=NS) == \
        job.findtext("uws:creationTime", namespaces=NS)


def test_jobref_carries_markup_characters_of_a_runid_as_text(client):
    run_id = 'a<b>&"c\' </uws:runId><x/>\ttab'
    create_id(client, RUNID=run_id)
    ref = etree.fromstring(client.get("/sleep?LAST=1").data).find("uws:jobref", NS)
    assert ref.findtext("uws:runId", namespaces=NS) == run_id
    assert ref.find("x") is None


def test_jobref_without_runid_has_no_runid_element(client):
    create_id(client)
    ref = etree.fromstring(client.get("/sleep").data).find("uws:jobref", NS)
    assert ref.find("uws:runId", NS) is None


def test_list_shows_every_job_of_the_service_only(client):
    mine = {create_id(client), create_id(client)}
    other = client.post("/checksum", data={"FILE": "http://example.org/x"})
    assert other.status_code == 303
    assert set(listed(client)) == mine


def test_jobref_phase_follows_the_job(client, api):
    job_id = create_id(client)
    abort(api, job_id)
    ref = etree.fromstring(client.get("/sleep").data).find("uws:jobref", NS)
    assert ref.findtext("uws:phase", namespaces=NS) == "ABORTED"


# -- ARCHIVED -------------------------------------------------------------------------

def test_archived_jobs_are_hidden_by_default(client, api):
    kept, archived = create_id(client), create_id(client)
    archive(api, archived)
    assert listed(client) == [kept]


def test_last_does_not_count_archived_jobs(client, api):
    kept = create_id(client)
    archive(api, create_id(client))          # the newest job, but ARCHIVED
    assert listed(client, ("LAST", "1")) == [kept]


def test_phase_archived_lists_only_archived_jobs(client, api):
    create_id(client)
    archived = create_id(client)
    archive(api, archived)
    assert listed(client, ("PHASE", "ARCHIVED")) == [archived]


def test_archived_job_is_still_readable(client, api):
    job_id = create_id(client)
    archive(api, job_id)
    r = client.get(f"/sleep/{job_id}")
    assert r.status_code == 200
    assert etree.fromstring(r.data).findtext("uws:phase", namespaces=NS) == "ARCHIVED"


# -- PHASE ----------------------------------------------------------------------------

def test_phase_filter_lists_only_that_phase(client, api):
    pending = create_id(client)
    aborted = create_id(client)
    abort(api, aborted)
    assert listed(client, ("PHASE", "PENDING")) == [pending]
    assert listed(client, ("PHASE", "ABORTED")) == [aborted]


def test_phase_filter_with_no_match_gives_an_empty_list(client):
    create_id(client)
    assert listed(client, ("PHASE", "EXECUTING")) == []


def test_repeated_phase_lists_the_union(client, api):
    pending = create_id(client)
    aborted = create_id(client)
    abort(api, aborted)
    archived = create_id(client)
    archive(api, archived)
    assert set(listed(client, ("PHASE", "PENDING"), ("PHASE", "ABORTED"))) == {pending, aborted}
    assert set(listed(client, ("PHASE", "PENDING"), ("PHASE", "ARCHIVED"))) == {pending, archived}


# -- AFTER ----------------------------------------------------------------------------

OLD = dt.datetime(2020, 1, 1, 0, 0, 0)
NEW = dt.datetime(2020, 1, 2, 0, 0, 0)


@pytest.fixture
def old_and_new(client, api):
    old, new = create_id(client), create_id(client)
    set_creation_time(api, old, OLD)
    set_creation_time(api, new, NEW)
    return old, new


@pytest.mark.parametrize("after", [
    "2020-01-01T12:00:00Z",
    "2020-01-01T12:00:00.000Z",
    "2020-01-01T12:00:00.000000Z",      # pyvo
    "2020-01-01T12:00:00",              # uws-client: no zone means UTC
    "2020-01-01T13:00:00+01:00",
])
def test_after_lists_jobs_created_after_the_instant(client, old_and_new, after):
    old, new = old_and_new
    assert listed(client, ("AFTER", after)) == [new]


@pytest.mark.parametrize("after, expected", [
    ("2019", "both"), ("2020", "new"),              # a year: its first instant
    ("2019-12", "both"), ("2020-01", "new"),        # a month
    ("20200101", "new"), ("20200101T1200Z", "new"),  # the basic format
    ("2020-001", "new"), ("2021", "none"),          # an ordinal date
])
def test_after_accepts_reduced_precision_as_the_start_of_that_period(client, old_and_new,
                                                                      after, expected):
    old, new = old_and_new
    wanted = {"both": [new, old], "new": [new], "none": []}[expected]
    assert listed(client, ("AFTER", after)) == wanted


def test_after_is_strict(client, old_and_new):
    old, new = old_and_new
    assert listed(client, ("AFTER", "2020-01-02T00:00:00.000Z")) == []
    assert listed(client, ("AFTER", "2020-01-01T23:59:59.999Z")) == [new]


def test_after_uses_creation_time_not_start_time(client, api, old_and_new):
    old, new = old_and_new
    assert api.store.mark_queued(old)
    assert api.store.mark_executing(old)      # startTime is now, long after NEW
    assert listed(client, ("AFTER", "2020-01-01T12:00:00Z")) == [new]


def test_after_a_jobs_shown_creation_time_excludes_that_job(client):
    """A client polling for "jobs newer than the last one I saw" must not see it again."""
    first = create_id(client)
    shown = etree.fromstring(client.get(f"/sleep/{first}").data) \
        .findtext("uws:creationTime", namespaces=NS)
    assert first not in listed(client, ("AFTER", shown))


# -- LAST -----------------------------------------------------------------------------

def test_last_lists_the_n_newest_jobs_newest_first(client):
    created = [create_id(client) for _ in range(5)]
    assert listed(client, ("LAST", "3")) == [created[4], created[3], created[2]]


def test_last_larger_than_the_list_lists_everything(client):
    created = [create_id(client) for _ in range(3)]
    assert listed(client, ("LAST", "100")) == created[::-1]


def test_last_orders_by_creation_time(client, api):
    a, b, c = create_id(client), create_id(client), create_id(client)
    set_creation_time(api, a, NEW)
    set_creation_time(api, b, OLD)
    set_creation_time(api, c, dt.datetime(2020, 1, 1, 12))
    assert listed(client, ("LAST", "3")) == [a, c, b]


# -- filters together -----------------------------------------------------------------

def test_phase_and_last_are_anded(client, api):
    older_aborted = create_id(client)
    abort(api, older_aborted)
    newer_aborted = create_id(client)
    abort(api, newer_aborted)
    create_id(client)                                   # newest, but PENDING
    assert listed(client, ("PHASE", "ABORTED"), ("LAST", "1")) == [newer_aborted]


def test_phase_and_after_are_anded(client, api, old_and_new):
    old, new = old_and_new
    abort(api, old)
    abort(api, new)
    pending = create_id(client)
    assert listed(client, ("PHASE", "ABORTED"), ("AFTER", "2020-01-01T12:00:00Z")) == [new]
    assert listed(client, ("PHASE", "PENDING"), ("AFTER", "2020-01-01T12:00:00Z")) == [pending]


def test_after_and_last_are_anded(client, api, old_and_new):
    old, new = old_and_new
    newest = create_id(client)
    assert listed(client, ("AFTER", "2019-01-01T00:00:00Z"), ("LAST", "2")) == [newest, new]
    assert listed(client, ("AFTER", "2020-01-01T12:00:00Z"), ("LAST", "5")) == [newest, new]


# -- bad requests ---------------------------------------------------------------------

@pytest.mark.parametrize("pairs", [
    [("PHASE", "FOO")],
    [("PHASE", "PENDING"), ("PHASE", "NOPE")],
    [("LAST", "0")],
    [("LAST", "-1")],
    [("LAST", "abc")],
    [("AFTER", "garbage")],
    [("AFTER", "")],
], ids=lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
def test_bad_filter_values_answer_400(client, pairs):
    create_id(client)
    assert get_list(client, *pairs).status_code == 400


@pytest.mark.parametrize("method", ["DELETE", "PUT"])
def test_list_does_not_allow_delete_or_put(client, method):
    job_id = create_id(client)
    r = client.open("/sleep", method=method)
    assert r.status_code == 405
    assert listed(client) == [job_id]


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS"])
def test_unknown_service_answers_404(client, method):
    assert client.open("/nosuchservice", method=method).status_code == 404


@pytest.mark.parametrize("path", ["/nosuchservice/batches", "/nosuchservice/events",
                                  "/nosuchservice/holds", "/nosuchservice/stats",
                                  "/nosuchservice/capabilities",
                                  "/nosuchservice/0123456789abcdef0123456789abcdef/phase"])
def test_any_method_under_an_unknown_service_answers_404(client, path):
    r = client.put(path)
    assert r.status_code == 404
    assert b"nosuchservice" in r.data


# -- paging (extension) ---------------------------------------------------------------

@pytest.fixture
def twenty_five(client):
    """25 jobs, newest first."""
    return [create_id(client) for _ in range(25)][::-1]


def walk_pages(client, first_url: str) -> list[list[str]]:
    pages, url = [], first_url
    while url is not None:
        r = client.get(path_of(url))
        assert r.status_code == 200, r.data
        pages.append([ref.get("id") for ref in
                      etree.fromstring(r.data).findall("uws:jobref", NS)])
        url = next_link(r)
        assert len(pages) < 20, "the next links never end"
    return pages


def test_extend_gives_a_page_of_that_many_newest_jobs(client, twenty_five):
    assert listed(client, ("extend", "10")) == twenty_five[:10]


def test_full_page_links_to_the_next_page(client, twenty_five):
    r = get_list(client, ("extend", "10"))
    link = next_link(r)
    assert link is not None
    assert link.startswith("http://localhost/sleep?")
    assert "cursor" in parse_qs(urlsplit(link).query)


def test_next_links_walk_every_job_exactly_once(client, twenty_five):
    pages = walk_pages(client, "http://localhost/sleep?extend=10")
    walked = [job_id for page in pages for job_id in page]
    assert [len(p) for p in pages[:3]] == [10, 10, 5]
    assert walked == twenty_five
    assert len(set(walked)) == len(walked)


def test_last_page_has_no_next_link(client, twenty_five):
    r = get_list(client, ("extend", "30"))
    assert len(etree.fromstring(r.data).findall("uws:jobref", NS)) == 25
    assert next_link(r) is None


def test_paging_is_exact_when_jobs_share_a_creation_time(client, api, twenty_five):
    for job_id in twenty_five:
        set_creation_time(api, job_id, OLD)
    pages = walk_pages(client, "http://localhost/sleep?extend=10")
    walked = [job_id for page in pages for job_id in page]
    assert sorted(walked) == sorted(twenty_five)
    assert len(walked) == 25


def test_paging_keeps_the_filters(client, api, twenty_five):
    aborted = twenty_five[::2]          # 13 jobs, newest first
    for job_id in aborted:
        abort(api, job_id)
    pages = walk_pages(client, "http://localhost/sleep?PHASE=ABORTED&extend=5")
    assert [job_id for page in pages for job_id in page] == aborted


def test_paging_keeps_the_after_filter(client, api, twenty_five):
    old = twenty_five[10:]
    for job_id in old:
        set_creation_time(api, job_id, OLD)
    pages = walk_pages(client, "http://localhost/sleep?AFTER=2020-06-01T00:00:00Z&extend=4")
    assert [job_id for page in pages for job_id in page] == twenty_five[:10]


def test_paging_skips_jobs_created_while_walking_without_repeating(client, twenty_five):
    r = get_list(client, ("extend", "10"))
    create_id(client)                       # newer than every job already listed
    rest = walk_pages(client, next_link(r))
    walked = [ref.get("id") for ref in etree.fromstring(r.data).findall("uws:jobref", NS)]
    walked += [job_id for page in rest for job_id in page]
    assert walked == twenty_five


def test_start_skips_that_many_jobs(client, twenty_five):
    assert listed(client, ("extend", "10"), ("start", "5")) == twenty_five[5:15]


def test_start_alone_skips_without_limiting(client, twenty_five):
    assert listed(client, ("start", "20")) == twenty_five[20:]


@pytest.mark.parametrize("pairs", [
    [("extend", "0")],
    [("extend", "abc")],
    [("start", "-1")],
    [("cursor", "not-a-cursor")],
    [("LAST", "5"), ("extend", "10")],
], ids=lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
def test_bad_paging_values_answer_400(client, pairs):
    assert get_list(client, *pairs).status_code == 400


# -- HEAD: the job count (extension) --------------------------------------------------

def test_head_counts_the_listed_jobs(client, api):
    for _ in range(3):
        create_id(client)
    archive(api, create_id(client))
    r = client.head("/sleep")
    assert r.status_code == 200
    assert r.data == b""
    assert int(r.headers["X-Job-Count"]) == len(listed(client)) == 3


def test_head_count_honours_the_filters(client, api, old_and_new):
    old, new = old_and_new
    abort(api, new)
    create_id(client)
    archive(api, create_id(client))
    for pairs in ([("PHASE", "ABORTED")], [("PHASE", "PENDING")], [("PHASE", "ARCHIVED")],
                  [("AFTER", "2020-01-01T12:00:00Z")],
                  [("PHASE", "PENDING"), ("PHASE", "ABORTED")]):
        r = client.head(f"/sleep?{urlencode(pairs)}")
        assert int(r.headers["X-Job-Count"]) == len(listed(client, *pairs)), pairs


def test_head_with_a_bad_filter_answers_400(client):
    assert client.head("/sleep?PHASE=FOO").status_code == 400
