"""The job, parameters and results documents, written as text, are the bytes lxml
writes for the same tree (tests/lxml_documents.py) and valid UWS 1.1, whatever the
job holds: markup characters, line ends, non-ASCII text, characters XML cannot carry
in what a job wrote, every optional part present or absent.  A job list shows each
jobref as given, whatever its text, and is valid UWS 1.1."""
from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

import lxml_documents as reference
from uws.domain.model import Delivery, ErrorSummary, Job, JobRef, Parameter, Result, fits_xml, xml_text
from uws.domain.phases import Phase
from uws.domain.timeutil import format_time
from uws.render import xml as xmlr

from conftest import assert_valid_uws

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678000)
LINKS = xmlr.Links("http://example.org/uws/sleep/0123456789abcdef0123456789abcdef")

#: What a client sent (names, ids): XML characters only, markup and line ends included.
xml_safe = st.text(st.sampled_from("aZ09 &<>\"'\r\n\t]]>é€𝄞\x85\u2028"), min_size=1, max_size=12)
#: What a job wrote: anything, characters XML cannot carry included (they are dropped).
anything = st.text(max_size=12)
times = st.none() | st.datetimes(min_value=dt.datetime(1, 1, 1),
                                 max_value=dt.datetime(2100, 1, 1))
errors = st.builds(ErrorSummary, type=st.sampled_from(("fatal", "transient")),
                   message=anything, detail=st.none() | anything)
parameters = st.builds(Parameter, name=xml_safe, value=anything, by_reference=st.booleans())
results = st.builds(Result, id=xml_safe.filter(fits_xml), path=st.just("out"),
                    mime_type=st.sampled_from(("text/plain", 'text/x; a="<&>"')),
                    size=st.none() | st.integers(0, 2**40))
deliveries = st.builds(Delivery, url=anything, state=st.sampled_from(("waiting", "delivered")),
                       attempts=st.integers(0, 9), status=st.none() | st.integers(100, 599),
                       error=st.none() | anything, delivered=times)
jobs = st.builds(
    Job, id=st.just("0123456789abcdef0123456789abcdef"), service=st.just("sleep"),
    owner=st.just("") | xml_safe, phase=st.sampled_from(Phase),
    creation_time=st.datetimes(min_value=dt.datetime(1, 1, 1),
                               max_value=dt.datetime(2100, 1, 1)),
    execution_duration=st.integers(0, 10**6), destruction=times,
    run_id=st.none() | anything, quote=times, start_time=times, end_time=times,
    error=st.none() | errors, progress=st.none() | st.floats(0, 100),
    progress_message=st.none() | anything, parameters=st.lists(parameters, max_size=3),
    results=st.lists(results, max_size=3), priority=st.integers(-5, 5), start_after=times,
    past_errors=st.lists(errors, max_size=2), held=st.none() | anything,
    callback=st.none() | deliveries)


@settings(max_examples=150, deadline=None)
@given(jobs)
def test_the_job_document_is_what_lxml_writes(job):
    assert xmlr.job_document(job, LINKS, NOW) == reference.job_document(job, LINKS, NOW)


@settings(max_examples=100, deadline=None)
@given(jobs)
def test_the_parameters_and_results_documents_are_what_lxml_writes(job):
    assert xmlr.parameters_document(job, LINKS) == reference.parameters_document(job, LINKS)
    assert xmlr.results_document(job, LINKS) == reference.results_document(job, LINKS)


@settings(max_examples=100, deadline=None)
@given(jobs)
def test_every_job_document_is_valid_uws(job):
    assert_valid_uws(xmlr.job_document(job, LINKS, NOW))


#: Ids as the store makes them (hex), or with markup; times of any year (4 digits).
refs = st.builds(JobRef, id=st.text("0123456789abcdef&'", min_size=1, max_size=32),
                 phase=st.sampled_from(Phase), run_id=st.none() | anything,
                 owner=st.just("") | anything,
                 creation_time=st.datetimes(min_value=dt.datetime(1, 1, 1)))
NS = {"uws": xmlr.UWS_NS, "xlink": xmlr.XLINK_NS, "xsi": xmlr.XSI_NS}


@settings(max_examples=200, deadline=None)
@given(st.lists(refs, max_size=30), st.sampled_from(("http://h/sleep", 'http://h/a&b"c')),
       st.integers(1, 10))
def test_a_job_list_shows_each_jobref_as_given(given_refs, list_url, flush_every):
    body = b"".join(xmlr.job_list(given_refs, list_url, flush_every))
    shown = assert_valid_uws(body).findall("uws:jobref", NS)
    assert len(shown) == len(given_refs)
    for el, ref in zip(shown, given_refs):
        assert el.get("id") == ref.id
        assert el.get(f"{{{xmlr.XLINK_NS}}}href") == f"{list_url}/{ref.id}"
        assert el.findtext("uws:phase", namespaces=NS) == ref.phase.value
        assert el.findtext("uws:runId", namespaces=NS) == (
            None if ref.run_id is None else xml_text(ref.run_id))
        owner = el.find("uws:ownerId", NS)
        if ref.owner:
            assert (owner.text or "") == xml_text(ref.owner)
        else:
            assert owner.get(f"{{{xmlr.XSI_NS}}}nil") == "true"
        assert el.findtext("uws:creationTime", namespaces=NS) == format_time(ref.creation_time)


def test_a_list_read_again_shows_each_job_as_it_is_now():
    before = JobRef("0123456789abcdef0123456789abcdef", Phase.QUEUED, None, "", NOW)
    after = before._replace(phase=Phase.COMPLETED, run_id="renamed")
    for ref in (before, after, before, after):
        body = b"".join(xmlr.job_list([ref], "http://h/sleep"))
        shown = assert_valid_uws(body).find("uws:jobref", NS)
        assert shown.findtext("uws:phase", namespaces=NS) == ref.phase.value
        assert shown.findtext("uws:runId", namespaces=NS) == ref.run_id


@settings(max_examples=100, deadline=None)
@given(st.lists(refs, max_size=10), st.sampled_from(("http://h/sleep", 'http://h/a&b"c')))
def test_a_list_read_again_is_the_same_document(given_refs, list_url):
    first = b"".join(xmlr.job_list(given_refs, list_url))
    again = b"".join(xmlr.job_list(given_refs, list_url))
    prefix = xmlr._escape(list_url) + "/"
    assert first == again
    assert "".join(xmlr._jobref(ref, prefix) for ref in given_refs).encode() in again


def test_the_jobrefs_remembered_for_lists_stay_within_their_bound():
    many = [JobRef(f"{n:032x}", Phase.PENDING, None, "", NOW)
            for n in range(xmlr.JOBREFS_KEPT + 500)]
    body = b"".join(xmlr.job_list(many, "http://h/sleep"))
    assert len(assert_valid_uws(body).findall("uws:jobref", NS)) == len(many)
    assert 0 < len(xmlr._written_jobrefs) <= xmlr.JOBREFS_KEPT


def test_a_jobref_with_a_long_runid_is_written_but_not_remembered():
    ref = JobRef("0123456789abcdef0123456789abcdef", Phase.PENDING, "&𝄞" * 400, "", NOW)
    body = b"".join(xmlr.job_list([ref], "http://h/sleep"))
    assert assert_valid_uws(body).findtext("uws:jobref/uws:runId", namespaces=NS) == ref.run_id
    assert (ref, "http://h/sleep/") not in xmlr._written_jobrefs
