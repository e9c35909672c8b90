"""Where the installed templates and schemas are (package data), or the
repository's folders when running from a source checkout."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def _folder(package: str, repo_dir: str) -> Path:
    try:
        path = Path(str(resources.files(package)))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return _REPO / repo_dir


def templates_dir() -> Path:
    return _folder("uws.templates", "templates")


def schemas_dir() -> Path:
    return _folder("uws.schemas", "schemas")


def uws_schema_path() -> Path:
    return schemas_dir() / "UWS-v1.1.xsd"
