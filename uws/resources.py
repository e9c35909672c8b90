"""Where the templates and schemas are: package data beside the installed
package (``uws/templates``, ``uws/schemas``), or the repository's top-level
folders when ``uws`` is imported from a source checkout."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent


def _folder(name: str) -> Path:
    # An installed package holds its data as plain directories beside its modules.
    # (importlib.resources.files() of the data folder is no help: setuptools
    # installs it as a namespace package, whose MultiplexedPath has no file path.)
    installed = _PACKAGE / name
    if installed.is_dir():
        return installed
    if (_CHECKOUT / "setup.cfg").is_file() and (_CHECKOUT / name).is_dir():
        return _CHECKOUT / name
    raise FileNotFoundError(f"the uws package data {name!r} is missing: "
                            f"neither {installed} nor a source checkout's {name}/ exists")


def templates_dir() -> Path:
    return _folder("templates")


def schemas_dir() -> Path:
    return _folder("schemas")


def uws_schema_path() -> Path:
    return schemas_dir() / "UWS-v1.1.xsd"
