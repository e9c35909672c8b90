"""Every text a request brings is valid Unicode, or the answer is 400 naming where it was:
form values and names (form-encoded and multipart), multipart filenames, JSON strings
(whose ``\\uXXXX`` escapes can give lone surrogates), CSV, text bodies, the path, the
query and the proxy's owner header.  Nothing of it ever makes a 500, and an error
message quoting it can always be encoded.

Property tests (hypothesis) post bodies holding lone surrogates, NUL, overlong and
invalid UTF-8 to every route that takes a body (uws.web.app's blueprints: job creation,
a job's POST, its phase, executionduration, destruction and parameters, a parameter's
PUT, batch creation from JSON, CSV and multipart CSV, a batch's POST, holds).

SQLite only (BACKENDS): what is tested is the parsing, which answers before the
database is asked.  Where a text reached PostgreSQL, which cannot store NUL, both
databases are tested: an owner in the query (test_events), in the proxy's header
(test_identity).
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import re
from urllib.parse import quote, quote_from_bytes, unquote_to_bytes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import Phase as HPhase
from hypothesis import strategies as st

from uws.auth import AuthConfig
from uws.web.app import create_app, shutdown

from conftest import LiveServer, ValidatingClient, make_config

#: one database is enough here (parsing, answered before the store is asked; where a text
#: reached PostgreSQL, test_events and test_identity run on both; tests/README.rst)
BACKENDS = ("sqlite",)

ADMIN = {"X-Remote-User": "root"}
SETTINGS = dict(deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow],
                phases=(HPhase.explicit, HPhase.reuse, HPhase.generate))  # no slow shrinking


def examples(n: int):
    return settings(max_examples=n, **SETTINGS)


@dataclasses.dataclass
class Site:
    app: object
    client: ValidatingClient
    job: str        # a sleep job of root's
    batch: str      # a batch of root's

    def post(self, path: str, body: bytes, content_type: str, method: str = "POST"):
        return self.client.open(path.format(job=self.job, batch=self.batch), method=method,
                                data=body, content_type=content_type, headers=ADMIN)


@pytest.fixture
def site(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.auth = AuthConfig(modes=("header",), admins=frozenset({"root"}),
                          trusted_proxies=frozenset({"127.0.0.1"}))
    sleep = cfg.services["sleep"]
    cfg.services = {**cfg.services,
                    "public": dataclasses.replace(sleep, name="public", callback_hosts=("*",))}
    app = create_app(cfg)
    app.test_client_class = ValidatingClient
    client = app.test_client()
    r = client.post("/sleep", data={"DURATION": "1"}, headers=ADMIN)
    assert r.status_code == 303
    job = r.headers["Location"].rsplit("/", 1)[1]
    r = client.post("/sleep/batches", data=b'[{"DURATION": "1"}]',
                    content_type="application/json", headers=ADMIN)
    assert r.status_code == 303
    yield Site(app, client, job, r.headers["Location"].rsplit("/", 1)[1])
    shutdown(app)


def utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def assert_answered(r, valid: bool) -> None:
    """Never a 500; a 400 for text that is not valid, with a message that says why."""
    assert r.status_code < 500, r.data[:300]
    if not valid:
        assert r.status_code == 400, (r.status_code, r.data[:300])
    if r.status_code >= 400:
        assert r.data.decode("utf-8").strip(), "an error says why"


# -- strategies ------------------------------------------------------------------------

#: bytes no UTF-8 decoder may take: a surrogate's encoding (CESU), overlong forms, bytes
#: that never start a character, a sequence cut short, one past U+10FFFF
INVALID_UTF8 = st.sampled_from([b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\xae", b"\xc0\x80",
                                b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xff", b"\xfe", b"\x80",
                                b"\xe2\x82", b"\xf4\x90\x80\x80"])
#: valid UTF-8, NUL and other control characters included
VALID_UTF8 = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6).map(str.encode)
CHUNK = st.one_of(INVALID_UTF8, VALID_UTF8, st.just(b"\x00"),
                  st.sampled_from([b"DURATION", b"MESSAGE", b"1", b"RUN"]))
TEXT = st.lists(CHUNK, max_size=3).map(b"".join)
#: what a job's or a batch's form may name (ACTION and METHOD would delete what the
#: next example posts to)
FORM_NAMES = st.one_of(st.sampled_from([b"DURATION", b"MESSAGE", b"PHASE", b"RUNID",
                                        b"EXECUTIONDURATION", b"DESTRUCTION", b"PRIORITY",
                                        b"OWNER", b"REASON"]), TEXT)
PAIRS = st.lists(st.tuples(FORM_NAMES, TEXT), min_size=1, max_size=3)

#: every route that takes a form body
FORM_ROUTES = ["/sleep", "/sleep/{job}", "/sleep/{job}/phase", "/sleep/{job}/executionduration",
               "/sleep/{job}/destruction", "/sleep/{job}/parameters", "/sleep/batches/{batch}",
               "/sleep/holds"]


# -- form-encoded ------------------------------------------------------------------------

@examples(60)
@given(route=st.sampled_from(FORM_ROUTES), pairs=PAIRS, escaped=st.booleans())
def test_a_form_encoded_body_of_any_bytes_is_text_or_400(site, route, pairs, escaped):
    if escaped:
        body = b"&".join(quote_from_bytes(n).encode() + b"=" + quote_from_bytes(v).encode()
                         for n, v in pairs)
    else:       # raw bytes, without the form's own delimiters
        pairs = [(re.sub(rb"[&=%+]", b"", n), re.sub(rb"[&=%+]", b"", v)) for n, v in pairs]
        body = b"&".join(n + b"=" + v for n, v in pairs)
    r = site.post(route, body, "application/x-www-form-urlencoded")
    assert_answered(r, all(utf8(n) and utf8(v) for n, v in pairs))


# -- multipart ---------------------------------------------------------------------------

def _disposition(name: bytes, filename: bytes | None, extended: bool) -> bytes:
    """A part's Content-Disposition: names quoted as they are, or RFC 2231-encoded."""
    def param(key: bytes, value: bytes) -> bytes:
        if extended:
            return b"; " + key + b"*=utf-8''" + quote_from_bytes(value, safe="").encode()
        return b'; ' + key + b'="' + re.sub(rb'["\\\r\n]', b"", value) + b'"'
    head = b"Content-Disposition: form-data" + param(b"name", name)
    return head + (param(b"filename", filename) if filename is not None else b"")


PARTS = st.lists(st.tuples(FORM_NAMES, st.one_of(st.none(), TEXT), TEXT, st.booleans()),
                 min_size=1, max_size=3)


@examples(60)
@given(route=st.sampled_from(["/sleep", "/sleep/{job}", "/sleep/{job}/parameters",
                              "/sleep/batches"]), parts=PARTS)
def test_a_multipart_body_of_any_names_filenames_and_values_is_text_or_400(site, route, parts):
    body = b"".join(b"--x\r\n" + _disposition(name, filename, extended) + b"\r\n\r\n" + value
                    + b"\r\n" for name, filename, value, extended in parts) + b"--x--\r\n"
    valid = True
    for name, filename, value, extended in parts:
        raw_name, raw_filename = name, filename
        if not extended:    # the quoted form loses what _disposition took out
            raw_name = re.sub(rb'["\\\r\n]', b"", name)
            raw_filename = None if filename is None else re.sub(rb'["\\\r\n]', b"", filename)
        # a file's content is bytes, but a batch's CSV file is text
        text_value = filename is None or route == "/sleep/batches"
        valid &= utf8(raw_name) and (raw_filename is None or utf8(raw_filename)) \
            and (not text_value or utf8(value))
    r = site.post(route, body, "multipart/form-data; boundary=x")
    assert_answered(r, valid)


# -- JSON --------------------------------------------------------------------------------

#: any text, lone surrogates included: json.dumps writes them as \\udXXX escapes
ANY_TEXT = st.one_of(st.text(st.characters(), max_size=5),
                     st.sampled_from(["DURATION", "1", "\ud800", "a\udfffb", "\x00"]))
JSON_VALUES = st.one_of(ANY_TEXT, st.integers(), st.booleans(), st.none(),
                        st.lists(ANY_TEXT, max_size=2))
ROWS = st.lists(st.dictionaries(ANY_TEXT, JSON_VALUES, max_size=3), min_size=1, max_size=3)
BATCHES = st.one_of(ROWS, st.fixed_dictionaries({"jobs": ROWS}, optional={
    "runId": ANY_TEXT, "phase": ANY_TEXT,
    "callback": ANY_TEXT.map(lambda host: f"http://{host}.example.org/")}))


def _strings(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, list):
        for item in doc:
            yield from _strings(item)
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield key
            yield from _strings(value)


def _unicode(text: str) -> bool:
    return not re.search("[\ud800-\udfff]", text)


@examples(60)
@given(doc=BATCHES, spliced=st.one_of(st.none(), INVALID_UTF8))
def test_a_json_batch_of_any_strings_is_text_or_400(site, doc, spliced):
    """The ``public`` service takes callbacks to any host: a callback's name is judged
    (IDNA) only once it is valid Unicode."""
    body = json.dumps(doc).encode()
    if spliced is not None:     # raw bytes inside the first string
        at = body.index(b'"') + 1 if b'"' in body else 0
        body = body[:at] + spliced + body[at:]
    valid = spliced is None and all(_unicode(s) for s in _strings(doc))
    r = site.post("/public/batches", body, "application/json")
    assert_answered(r, valid)


# -- CSV and text bodies -------------------------------------------------------------------

@examples(40)
@given(header=TEXT, row=TEXT, multipart=st.booleans())
def test_a_csv_batch_of_any_bytes_is_text_or_400(site, header, row, multipart):
    csv = b"DURATION," + header + b"\r\n1," + row + b"\r\n"
    if multipart:
        body = (b'--x\r\nContent-Disposition: form-data; name="file"; filename="b.csv"\r\n\r\n'
                + csv + b"\r\n--x--\r\n")
        r = site.post("/sleep/batches", body, "multipart/form-data; boundary=x")
    else:
        r = site.post("/sleep/batches", csv, "text/csv")
    assert_answered(r, utf8(header) and utf8(row))


@examples(40)
@given(value=TEXT, name=st.sampled_from(["MESSAGE", "DURATION", "RUNID", "NOSUCH"]))
def test_a_parameters_text_body_of_any_bytes_is_text_or_400(site, value, name):
    r = site.post(f"/sleep/{{job}}/parameters/{name}", value, "text/plain", method="PUT")
    assert_answered(r, utf8(value))


# -- path, query, header -------------------------------------------------------------------

@examples(60)
@given(raw=TEXT, where=st.sampled_from(["/sleep/{}", "/sleep/{{job}}/results/{}",
                                        "/sleep/{{job}}/parameters/{}", "/sleep?RUNID={}",
                                        "/sleep/events?owner={}", "/sleep?PHASE={}",
                                        "/sleep/batches?start={}", "/sleep/holds?x={}",
                                        "/sleep?{}=1"]))
def test_a_path_or_query_of_any_bytes_is_text_or_400(site, raw, where):
    path, _, query = where.format(quote_from_bytes(raw, safe="")).partition("?")
    # werkzeug's test client would replace what is not UTF-8 in the path: the path's
    # bytes as a server hands them over (latin-1 text, percent-decoded)
    r = site.client.get(path.format(job=site.job), query_string=query, headers=ADMIN,
                        environ_overrides={"PATH_INFO": _wsgi_path(path.format(job=site.job))})
    assert_answered(r, utf8(raw) and not ("?" in where and _control(raw)))


def _control(raw: bytes) -> bool:
    """Whether ``raw`` holds a character no XML document can carry (but tab, LF, CR)."""
    return any(c < 32 and c not in (9, 10, 13) for c in raw)


def _wsgi_path(path: str) -> str:
    return unquote_to_bytes(path).decode("latin-1")


@examples(40)
@given(raw=TEXT)
def test_an_owner_header_of_any_bytes_is_text_or_400(site, raw):
    raw = re.sub(rb"[\r\n]", b"", raw)      # no client can send these in a header
    owner = raw.decode("latin-1")           # the bytes as WSGI hands them over
    r = site.client.get("/sleep", headers={"X-Remote-User": owner})
    assert_answered(r, not raw.strip() or utf8(raw) and not _control(raw))


# -- each finding ---------------------------------------------------------------------------

def test_a_lone_surrogate_in_a_batch_rows_parameter_name_answers_400_naming_it(site):
    r = site.post("/sleep/batches", b'[{"DURATION": "1"}, {"\\ud800": "1"}]',
                  "application/json")
    assert r.status_code == 400
    assert r.get_data(as_text=True) == ("row 2: a parameter name: not valid Unicode "
                                        "(a lone surrogate, \\ud800)\n")


@pytest.mark.parametrize("body, field", [
    (b'[{"MESSAGE": "a\\udfffb"}]', "row 1: MESSAGE"),
    (b'[{"MESSAGE": ["x", "\\ud800"]}]', "row 1: MESSAGE"),
    (b'{"jobs": [{"DURATION": "1"}], "runId": "\\ud800"}', "runId"),
    (b'{"jobs": [{"DURATION": "1"}], "phase": "RUN\\ud800"}', "phase"),
])
def test_a_lone_surrogate_in_a_batch_value_answers_400_naming_it(site, body, field):
    r = site.post("/sleep/batches", body, "application/json")
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith(f"{field}: not valid Unicode")


def test_a_lone_surrogate_in_a_batch_callback_host_answers_400(site):
    r = site.post("/public/batches",
                  b'{"jobs": [{"DURATION": "1"}], "callback": "http://\\ud800.example.org/"}',
                  "application/json")
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("callback: not valid Unicode")


def test_a_json_error_quoting_a_lone_surrogate_is_json(site):
    r = site.client.post("/sleep/batches", data=b'{"\\ud800": 1}',
                         content_type="application/json",
                         headers={**ADMIN, "Accept": "application/json"})
    assert r.status_code == 400
    assert r.get_json()["error"]["message"].startswith("\\ud800: not a key of a batch")


@pytest.mark.parametrize("path", ["/sleep/%ED%A0%80", "/sleep/%FF", "/%C0%AE%C0%AE/x"])
def test_a_path_that_is_not_utf8_answers_400(site, path):
    """Over HTTP: werkzeug's test client would replace the bytes with U+FFFD itself."""
    with LiveServer(site.app, threads=2) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.server.effective_port,
                                                timeout=30)
        connection.request("GET", path, headers=ADMIN)
        r = connection.getresponse()
        assert r.status == 400
        assert r.read() == b"the URL's path is not UTF-8 once percent-decoded\n"
        connection.close()


@pytest.mark.parametrize("query, field", [("owner=%FF", "owner"), ("owner=a%00b", "owner"),
                                          ("RUNID=%C0%80", "RUNID"), ("a%ED%A0%80=1", "a%ED%A0%80")])
def test_a_query_that_is_not_utf8_or_holds_a_control_character_answers_400(site, query, field):
    r = site.client.get(f"/sleep?{query}", headers=ADMIN)
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith(f"{field}: ")


@pytest.mark.parametrize("param", [b"name*=utf-8''%ED%A0%80", b"name*=utf-8''MESSAGE%FF",
                                   b'name="FILE"; filename*=utf-8\'\'%C0%AE.txt'])
def test_a_multipart_rfc2231_name_that_is_not_utf8_answers_400(site, param):
    body = b"--x\r\nContent-Disposition: form-data; " + param + b"\r\n\r\nv\r\n--x--\r\n"
    r = site.post("/sleep", body, "multipart/form-data; boundary=x")
    assert r.status_code == 400
    assert b"is not utf-8 once percent-decoded" in r.data


def test_a_multipart_rfc2231_name_in_utf8_is_decoded(site):
    body = (b"--x\r\nContent-Disposition: form-data; name*=utf-8''MESS%41GE\r\n\r\n"
            b"caf\xc3\xa9\r\n--x--\r\n")
    r = site.post("/sleep", body, "multipart/form-data; boundary=x")
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    assert site.client.get(f"{path}/parameters/MESSAGE", headers=ADMIN).data == "café".encode()


def test_a_message_quoting_a_control_character_shows_it_escaped(site):
    r = site.client.post("/sleep", data={"NO\x00SUCH": "1"}, headers=ADMIN)
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("NO\\x00SUCH: unknown parameter")


def test_a_query_value_in_utf8_is_still_taken(site):
    r = site.client.post(f"/sleep?MESSAGE={quote('café ☕')}", headers=ADMIN)
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    assert site.client.get(f"{path}/parameters/MESSAGE", headers=ADMIN).data == \
        "café ☕".encode()
