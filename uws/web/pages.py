"""HTML pages: rendering with the Jinja2 templates, and the filters they use.

Every page extends ``base.html``; values are escaped by Jinja's autoescaping.
"""
from __future__ import annotations

import datetime as dt
from urllib.parse import urlsplit

from flask import Flask, Response, render_template, request, url_for
from werkzeug.http import HTTP_STATUS_CODES

from ..domain.errors import UWSError
from ..domain.model import is_job_id
from ..domain.phases import Phase
from ..domain.timeutil import format_time
from ..render.xml import Links
from . import forms, identity, listpage
from .http import base_url, job_url, jobs_api
from .jobview import JobView

HTML_TYPE = "text/html; charset=utf-8"


def render(template: str, status: int = 200, **context) -> Response:
    body = render_template(template, **context)
    return Response(body, status=status, content_type=HTML_TYPE, headers={"Vary": "Accept"})


def index_page() -> Response:
    """The services, each with its links and its caller's job counts (from the
    counters: one grouped read whatever the number of jobs)."""
    api = jobs_api()
    caller = identity.current_caller()
    counts: dict[str, dict[Phase, int]] = {}
    for (service, _, phase), n in api.store.job_counts(None, caller.scope).items():
        by_phase = counts.setdefault(service, {})
        by_phase[phase] = by_phase.get(phase, 0) + n
    return render("index.html", services=api.config.services.values(), counts=counts,
                  whose=_whose(caller, bool(api.config.auth.modes)), admin=caller.admin,
                  busy=BUSY, archived=Phase.ARCHIVED)


#: The phases the services page counts apart (the total is of every phase but ARCHIVED).
BUSY = (Phase.EXECUTING, Phase.QUEUED, Phase.HELD)


def _whose(caller, authenticated: bool) -> str:
    """Whose jobs the counts are, said for the services page."""
    if caller.admin:
        return "all owners' jobs"
    if caller.owner:
        return "your jobs"
    return "anonymous jobs" if authenticated else "jobs"


def job_page(job, caller, values=None, errors=None, status: int = 200) -> Response:
    """The job's page; its parameter form shows ``values`` (by upper-case name, over the
    job's own) and ``errors`` when a change was refused."""
    view = JobView(job, Links(job_url(job.service, job.id)))
    svc = jobs_api().service(job.service)
    shown = {**view.parameter_values(), **(values or {})}
    return render("job.html", status=status, view=view, fields=forms.fields(svc, shown, errors),
                  service=svc, admin=caller.admin, errors=errors or {})


def confirm_delete_job(job) -> Response:
    """Delete job X? [Delete] [Cancel]: a step a person takes before a deletion."""
    url = job_url(job.service, job.id)
    name = job.run_id if job.run_id else job.id[:12]
    return render("confirm.html", what="job", name=name, service=job.service, target=url,
                  here=f"{url}/delete",
                  consequence="Its results and uploaded files are deleted with it.")


def deleted_notice() -> str | None:
    """The ID a list page's ``deleted`` query names, if it is one: the notice shows it
    (escaped by the template; anything but an ID is never echoed)."""
    value = request.args.get("deleted", "")
    return value if is_job_id(value) else None


def service_page(service: str, caller, values=None, errors=None, status: int = 200) -> Response:
    """The job list of ``service`` with its creation form (showing ``values``/``errors``)."""
    api = jobs_api()
    svc = api.service(service)
    page, refs = listpage.load(api, service, f"{base_url()}{service}", caller)
    return render("service.html", status=status, service=svc, page=page, jobs=refs,
                  progress=_progress_of(api, service, refs, caller),
                  priorities=api.priorities(service, [ref.id for ref in refs], caller),
                  fields=forms.fields(svc, values, errors), values=values or {},
                  errors=errors or {}, deleted=deleted_notice())


def _progress_of(api, service: str, refs, caller) -> dict:
    """Percent and message of the executing jobs of a page (few: one read each)."""
    out = {}
    for ref in refs:
        if ref.phase is Phase.EXECUTING:
            try:
                job = api.get(service, ref.id, caller)
            except UWSError:
                continue
            out[ref.id] = (job.progress or 0.0, job.progress_message or "")
    return out


def error_page(status: int, message: str) -> Response:
    """A problem explained to a person, with a way back to where they came from."""
    title = f"{HTTP_STATUS_CODES.get(status, 'Error')} ({status})"
    referrer = request.referrer or ""
    back = referrer if referrer.startswith(base_url()) else base_url()
    return render("error.html", status=status, code=status, title=title, message=message,
                  back=back)


# -- filters -----------------------------------------------------------------------

def utc_text(value: dt.datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def local_input(value: dt.datetime | None) -> str:
    """A datetime-local input's value (UTC, to the second)."""
    return "" if value is None else value.isoformat(timespec="seconds")


def filesize(size: int | None) -> str:
    """A size for people: ``1534`` -> ``1.5 kB``."""
    if size is None:
        return "unknown size"
    if size < 1000:
        return f"{size} bytes"
    amount = float(size)
    for unit in ("kB", "MB", "GB"):
        amount /= 1000
        if amount < 1000 or unit == "GB":
            break
    return f"{amount:.1f} {unit}"


def seconds(value: float | None) -> str:
    """A duration for people: ``90`` -> ``1 min 30 s``."""
    if value is None:
        return ""
    total = int(round(value))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "",
             f"{secs} s" if secs or not (hours or minutes) else ""]
    return " ".join(p for p in parts if p)


def asset_url(name: str) -> str:
    """The path of a static file below the base URL (public_url's path behind a proxy)."""
    route = url_for("static_files.asset", name=name).removeprefix(request.script_root)
    return urlsplit(base_url()).path + route.lstrip("/")


def install(app: Flask) -> None:
    app.jinja_env.filters.update(iso=format_time, utc=utc_text, local_input=local_input,
                                 filesize=filesize, seconds=seconds)
    app.jinja_env.globals["asset"] = asset_url
    app.context_processor(lambda: {"base": base_url()})
