"""The stylesheet and script of the HTML pages, at ``/_static/<name>``.

Service names start with a letter, so this path never shadows a job list.
Only the files listed here are served (they ship with the templates).
"""
from __future__ import annotations

from flask import Blueprint, send_from_directory

from ..domain.errors import NotFound
from ..resources import templates_dir

bp = Blueprint("static_files", __name__)
ASSETS = {"uws.css": "text/css", "uws.js": "text/javascript"}


@bp.route("/_static/<name>", methods=["GET"])
def asset(name: str):
    if name not in ASSETS:
        raise NotFound(f"no static file {name!r}")
    response = send_from_directory(templates_dir(), name, mimetype=ASSETS[name], max_age=300)
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
