"""The layering the code relies on, read from the installed package's source.

Imports run only downward: the entry points (the app, the command line, the client)
import the adapters (storage, execution, rendering, HTTP, configuration), which import
the use cases, which import the domain; the domain imports nothing of uws outside
itself, and no module imports itself through others.  Every ``import`` and ``from ...
import`` of a file counts, inside functions and under ``if TYPE_CHECKING`` too.  So the
domain and the use cases can be used and tested without HTTP or SQL.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import uws

PACKAGE = Path(uws.__file__).resolve().parent

#: The layers, top first, and what each holds (modules and packages): a module may
#: import its own layer's modules and those of the layers below it.
LAYERS = {
    "entry points": ("uws", "uws.__main__", "uws.cli", "uws.web", "uws.client"),
    "adapters": ("uws.store", "uws.execution", "uws.render", "uws.http", "uws.config",
                 "uws.auth", "uws.resources", "uws.demo"),
    "use cases": ("uws.usecases", "uws.runner"),
    "domain": ("uws.domain",),
}
#: Modules held to less than their layer allows: what else of uws they may import.
ONLY = {
    "uws.runner": ("uws.domain",),      # the contract runners import: little, and fast
    "uws.demo": ("uws.runner",),        # a runner module, as a user writes one
}
FRAMEWORKS = ("flask", "sqlalchemy", "lxml", "waitress")


def _sources() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


SOURCES = _sources()


def _known(name: str) -> str | None:
    """The module of uws that importing ``name`` runs (its longest prefix that is one)."""
    while name and name not in SOURCES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    """The modules of uws that ``module``'s source imports."""
    path = SOURCES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                # a submodule (from uws.domain import model), or a name of ``base``
                targets.append(f"{base}.{alias.name}" if f"{base}.{alias.name}" in SOURCES
                               else base)
    return {found for t in targets if t.split(".")[0] == "uws" and (found := _known(t))} - {module}


GRAPH = {module: _imports(module) for module in SOURCES}


def _part(module: str) -> str | None:
    """The entry of LAYERS that holds ``module`` (the longest; "uws" holds only itself)."""
    parts = [p for names in LAYERS.values() for p in names
             if module == p or (p != "uws" and module.startswith(p + "."))]
    return max(parts, key=len, default=None)


def _layer(module: str) -> int:
    part = _part(module)
    return next(i for i, names in enumerate(LAYERS.values()) if part in names)


def _within(module: str, parts) -> bool:
    return any(module == p or module.startswith(p + ".") for p in parts)


def test_the_package_is_read_from_its_source():
    assert "uws.domain.model" in GRAPH and "uws.web.app" in GRAPH
    assert "uws.domain.phases" in GRAPH["uws.domain.model"]
    assert "uws.web.app" in GRAPH["uws"]      # create_app, imported inside the function


def test_every_module_is_in_a_layer():
    assert [m for m in sorted(SOURCES) if _part(m) is None] == []


def test_imports_run_only_downward():
    names = list(LAYERS)
    upward = [f"{module} ({names[_layer(module)]}) imports {target} ({names[_layer(target)]})"
              for module in sorted(GRAPH) for target in sorted(GRAPH[module])
              if _layer(target) < _layer(module)]
    assert upward == []


def test_the_domain_imports_nothing_of_uws_outside_itself():
    outside = [f"{module} imports {target}" for module in sorted(GRAPH)
               if _within(module, ["uws.domain"])
               for target in sorted(GRAPH[module]) if not _within(target, ["uws.domain"])]
    assert outside == []


@pytest.mark.parametrize("module", sorted(ONLY))
def test_held_to_less(module):
    others = sorted(t for m in GRAPH if _within(m, [module]) for t in GRAPH[m]
                    if not _within(t, [module, *ONLY[module]]))
    assert others == []


def test_no_module_imports_itself_through_others():
    """No circle: Tarjan's strongly connected components, each of one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert circles == []


def _modules_of(*packages: str) -> list[str]:
    found = list(packages)
    for name in packages:
        package = importlib.import_module(name)
        found += [m.name for m in pkgutil.walk_packages(package.__path__, name + ".")]
    return found


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_importing_the_domain_and_the_use_cases_loads_no(framework):
    modules = _modules_of("uws.domain", "uws.usecases")
    assert "uws.domain.model" in modules and "uws.usecases.jobs" in modules
    program = (f"import sys\nimport {', '.join(modules)}\n"
               f"print(sorted(m for m in sys.modules if m.split('.')[0] == {framework!r}))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
