"""The runner contract service authors import (uws.runner), and that the server's
own context keeps to it."""
from __future__ import annotations

import inspect

import pytest

from uws import demo
from uws.execution.child import ChildContext
from uws.runner import Context, LocalContext


def test_the_servers_context_offers_every_method_of_the_documented_one():
    documented = {n for n, _ in inspect.getmembers(Context, inspect.isfunction)
                  if not n.startswith("_")}
    assert documented == {"progress", "add_result", "upload_path", "open_parameter", "fetch"}
    for name in documented:
        assert (inspect.signature(getattr(ChildContext, name)).parameters.keys()
                == inspect.signature(getattr(Context, name)).parameters.keys()), name


def test_a_runner_can_be_tested_with_a_local_context(tmp_path):
    data = tmp_path / "in.bin"
    data.write_bytes(b"hello")
    ctx = LocalContext(tmp_path, uploads={"FILE": data})
    demo.checksum({"FILE": "param:FILE", "ALGORITHM": "md5"}, ctx)
    (name, filename, _), = ctx.results
    assert name == "checksum" and (tmp_path / filename).read_text().startswith(
        "5d41402abc4b2a76b9719d911017c592")


def test_a_local_context_refuses_results_the_server_would_refuse(tmp_path):
    ctx = LocalContext(tmp_path)
    with pytest.raises(ValueError, match="no spaces"):
        ctx.add_result("a b", "file.txt")
    with pytest.raises(ValueError, match="MIME type"):
        ctx.add_result("a", "file.txt", "not a type")
