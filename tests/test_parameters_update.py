"""Updating parameters while PENDING (UWS 1.1 §2.1.11, §2.2.3; DALI 1.1 §3.1).

Three ways to update, as real clients do: POST {job}/parameters (pyvo, taplint),
POST {job} (uws-client ``job set``) and PUT {job}/parameters/{name}.
"""
from __future__ import annotations

import io

import pytest

from uws.domain.model import Parameter

from uwshelp import (
    ACTIVE,
    NS,
    assert_303_to_job,
    create,
    job_id,
    job_xml,
    path_of,
    run_to_end,
    wait_while,
)


def params_of(client, path: str) -> list[tuple[str, str]]:
    """(id, value) of every <uws:parameter> of the job, in order."""
    return [(p.get("id"), p.text or "")
            for p in job_xml(client, path).findall("uws:parameters/uws:parameter", NS)]


def values_named(client, path: str, name: str) -> list[str]:
    """Every value shown for ``name`` (matched case-insensitively)."""
    return [v for k, v in params_of(client, path) if k.upper() == name.upper()]


def update(client, path: str, how: str, name: str, value: str):
    """Update one parameter by one of the three routes; the response."""
    if how == "POST parameters":
        return client.post(f"{path}/parameters", data={name: value})
    if how == "POST job":
        return client.post(path, data={name: value})
    if how == "PUT parameter":
        return client.put(f"{path}/parameters/{name}", data=value.encode(),
                          content_type="text/plain")
    raise ValueError(how)


HOW = ["POST parameters", "POST job", "PUT parameter"]


# -- while PENDING ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", HOW)
def test_pending_job_parameter_can_be_updated(client, how):
    path = create(client, DURATION="1")
    assert_303_to_job(update(client, path, how, "DURATION", "2.5"), path)
    assert values_named(client, path, "DURATION") == ["2.5"]


@pytest.mark.parametrize("how", HOW)
def test_single_valued_parameter_is_replaced_not_duplicated(client, how):
    path = create(client, MESSAGE="first")
    update(client, path, how, "MESSAGE", "second")
    update(client, path, how, "MESSAGE", "third")
    assert values_named(client, path, "MESSAGE") == ["third"]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("name", ["message", "Message"])
def test_update_with_a_different_case_name_replaces_the_parameter(client, how, name):
    path = create(client, MESSAGE="first")
    assert_303_to_job(update(client, path, how, name, "second"), path)
    assert values_named(client, path, "MESSAGE") == ["second"]


@pytest.mark.parametrize("how", HOW)
def test_update_keeps_the_other_parameters(client, how):
    path = create(client, DURATION="3", MESSAGE="hi")
    update(client, path, how, "MESSAGE", "there")
    shown = dict(params_of(client, path))
    assert shown == {"DURATION": "3", "FAIL": "false", "MESSAGE": "there"}


@pytest.mark.parametrize("how", HOW)
def test_update_keeps_the_value_exactly(client, how):
    path = create(client)
    update(client, path, how, "MESSAGE", "  spaced <&> ü  ")
    assert values_named(client, path, "MESSAGE") == ["  spaced <&> ü  "]


def test_several_parameters_can_be_updated_in_one_post(client):
    path = create(client)
    r = client.post(f"{path}/parameters", data={"DURATION": "4", "MESSAGE": "x"})
    assert_303_to_job(r, path)
    shown = dict(params_of(client, path))
    assert (shown["DURATION"], shown["MESSAGE"]) == ("4", "x")


def test_updated_value_is_what_runs(client):
    path = create(client, DURATION="30")
    update(client, path, "POST parameters", "DURATION", "0")
    assert run_to_end(client, path) == "COMPLETED"


def create_checksum(client, content: bytes) -> str:
    r = client.post("/checksum", data={"FILE": (io.BytesIO(content), "a.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def assert_holds_one_file(client, path: str, r, content: bytes) -> None:
    """``r`` answered 303 to the job, which now holds one FILE: ``content``."""
    assert_303_to_job(r, path)
    assert len(values_named(client, path, "FILE")) == 1
    assert client.get(f"{path}/parameters/FILE").data == content


def test_uploaded_file_can_be_replaced_by_a_new_upload(client):
    path = create_checksum(client, b"first content")
    r = client.post(f"{path}/parameters", data={"FILE": (io.BytesIO(b"second"), "b.bin")},
                    content_type="multipart/form-data")
    assert_holds_one_file(client, path, r, b"second")


def test_uploaded_file_can_be_replaced_by_a_put_of_its_bytes(client):
    path = create_checksum(client, b"first content")
    r = client.put(f"{path}/parameters/FILE", data=b"\x00put bytes\xff",
                   content_type="application/octet-stream")
    assert_holds_one_file(client, path, r, b"\x00put bytes\xff")


def test_uploaded_file_can_be_replaced_by_a_url(client):
    path = create_checksum(client, b"first content")
    r = client.post(f"{path}/parameters", data={"FILE": "https://example.org/f.bin"})
    assert_303_to_job(r, path)
    assert values_named(client, path, "FILE") == ["https://example.org/f.bin"]


def test_runid_can_be_updated_while_pending(client):
    """taplint POSTs runId=… to /parameters and reads it back (case-insensitively)."""
    path = create(client, RUNID="TAPLINT-001")
    assert_303_to_job(client.post(f"{path}/parameters", data={"runId": "TAPLINT-002"}), path)
    job = job_xml(client, path)
    assert job.findtext("uws:runId", namespaces=NS) == "TAPLINT-002"
    assert len([k for k, _ in params_of(client, path) if k.upper() == "RUNID"]) <= 1


# -- refused updates --------------------------------------------------------------------------

@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("started", ["QUEUED", "EXECUTING"])
def test_update_after_run_answers_403_and_changes_nothing(idle, how, started):
    client, api = idle
    path = create(client, MESSAGE="before")
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    if started == "EXECUTING":
        assert api.store.mark_executing(job_id(path))
    assert update(client, path, how, "MESSAGE", "after").status_code == 403
    assert values_named(client, path, "MESSAGE") == ["before"]
    assert job_xml(client, path).findtext("uws:phase", namespaces=NS) == started


@pytest.mark.parametrize("how", HOW)
def test_update_of_a_completed_job_answers_403(client, how):
    path = create(client, DURATION="0", MESSAGE="before")
    client.post(f"{path}/phase", data={"PHASE": "RUN"})
    assert wait_while(client, path, ACTIVE) == "COMPLETED"
    assert update(client, path, how, "MESSAGE", "after").status_code == 403
    assert values_named(client, path, "MESSAGE") == ["before"]


@pytest.mark.parametrize("how", HOW)
def test_update_of_an_aborted_job_answers_403(client, how):
    path = create(client, MESSAGE="before")
    client.post(f"{path}/phase", data={"PHASE": "ABORT"})
    assert update(client, path, how, "MESSAGE", "after").status_code == 403
    assert values_named(client, path, "MESSAGE") == ["before"]


@pytest.mark.parametrize("how", HOW)
def test_unknown_parameter_answers_400(client, how):
    path = create(client)
    before = params_of(client, path)
    r = update(client, path, how, "COLOUR", "red")
    assert r.status_code == 400
    assert b"COLOUR" in r.data
    assert params_of(client, path) == before


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("name,value", [("DURATION", "abc"), ("DURATION", "-1"),
                                        ("FAIL", "maybe")])
def test_bad_value_answers_400_and_changes_nothing(client, how, name, value):
    path = create(client, DURATION="1")
    before = params_of(client, path)
    r = update(client, path, how, name, value)
    assert r.status_code == 400
    assert name.encode() in r.data
    assert params_of(client, path) == before


def test_one_bad_value_in_a_post_changes_nothing(client):
    path = create(client, DURATION="1", MESSAGE="before")
    before = params_of(client, path)
    r = client.post(f"{path}/parameters", data={"MESSAGE": "after", "DURATION": "abc"})
    assert r.status_code == 400
    assert params_of(client, path) == before


@pytest.mark.parametrize("query, body", [
    ("", {"MESSAGE": "after", "RUNID": "after", "PHASE": "BOGUS"}),
    ("?PHASE=RUN&PHASE=ABORT", {"MESSAGE": "after"}),
])
def test_a_post_to_the_job_with_a_bad_phase_changes_nothing(client, query, body):
    path = create(client, DURATION="1", MESSAGE="before", RUNID="before")
    before = job_xml(client, path)
    r = client.post(f"{path}{query}", data=body)
    assert r.status_code == 400
    after = job_xml(client, path)
    assert params_of(client, path) == [(p.get("id"), p.text or "") for p in
                                       before.findall("uws:parameters/uws:parameter", NS)]
    assert after.findtext("uws:runId", namespaces=NS) == "before"
    assert after.findtext("uws:phase", namespaces=NS) == "PENDING"


def test_update_of_an_unknown_job_answers_404(client):
    r = client.post("/sleep/0123456789abcdef0123456789abcdef/parameters", data={"DURATION": "1"})
    assert r.status_code == 404


# -- a deletion or a start during the change ---------------------------------------------

@pytest.fixture
def uploads_job(client, api):
    """(client, api, path, its folder) of a checksum job holding one upload."""
    path = create_checksum(client, b"first content")
    return client, api, path, api.files.job_dir(job_id(path))


def replace_file(client, path: str):
    return client.put(f"{path}/parameters/FILE", data=b"second",
                      content_type="application/octet-stream")


def delete_around(monkeypatch, api, path: str, where, name: str, after: bool = False) -> None:
    """Make the step ``where.name`` of a change delete the job just before it runs (or,
    with ``after``, just after): a DELETE landing at that point of the change."""
    step = getattr(where, name)

    def racing(*args, **kwargs):
        if not after:
            api.delete("checksum", job_id(path))
        done = step(*args, **kwargs)
        if after:
            api.delete("checksum", job_id(path))
        return done
    monkeypatch.setattr(where, name, racing)


def test_a_deletion_before_an_upload_is_staged_answers_404_and_leaves_no_folder(
        uploads_job, monkeypatch):
    client, api, path, folder = uploads_job
    delete_around(monkeypatch, api, path, api.uploads, "stage")    # staging makes it again
    assert replace_file(client, path).status_code == 404
    assert not folder.exists()


def test_a_deletion_right_after_an_upload_change_leaves_no_folder(uploads_job, monkeypatch):
    client, api, path, folder = uploads_job
    delete_around(monkeypatch, api, path, api.store, "set_parameters", after=True)
    assert replace_file(client, path).status_code == 303    # changed, then deleted
    assert client.get(path).status_code == 404
    assert not folder.exists()


def test_a_deletion_while_an_upload_is_staged_answers_404_not_500(uploads_job, monkeypatch):
    client, api, path, folder = uploads_job
    delete_around(monkeypatch, api, path, api.uploads, "size")    # the staged file goes too
    assert replace_file(client, path).status_code == 404
    assert not folder.exists()


def test_the_new_file_is_in_place_before_the_change_is_committed(uploads_job, monkeypatch):
    """A RUN waits for the change's lock: the job must not start with the old file."""
    client, api, path, folder = uploads_job
    change = api.store.set_parameters
    seen = []

    def watched(*args, then=None, **kwargs):
        def install_then_look():
            then()      # the file, and what other connections see of the change so far
            committed = api.store.get_job(job_id(path), "checksum", None).run_id
            seen.append(((folder / "uploads" / "FILE").read_bytes(), committed))
        return change(*args, then=install_then_look, **kwargs)
    monkeypatch.setattr(api.store, "set_parameters", watched)
    r = client.post(f"{path}/parameters", data={"FILE": (io.BytesIO(b"second"), "b.bin"),
                                                "RUNID": "changed"},
                    content_type="multipart/form-data")
    assert r.status_code == 303
    assert seen == [(b"second", None)]      # in place while the change was not committed
    assert api.store.get_job(job_id(path), "checksum", None).run_id == "changed"


def test_a_failure_to_install_an_upload_changes_nothing(uploads_job):
    """What runs before the commit fails: the parameters stay as they were."""
    client, api, path, _ = uploads_job
    before = params_of(client, path)

    def failing():
        raise OSError("disk full")
    with pytest.raises(OSError):
        api.store.set_parameters(job_id(path), {"ALGORITHM"}, [Parameter("ALGORITHM", "md5")],
                                 then=failing)
    assert params_of(client, path) == before
