"""The code an interpreter at the head of a service's command runs: a placeholder
there would run a job's value as code, so the configuration check looks for it."""
from __future__ import annotations

import pytest

from uws.domain.interpreters import code_arguments


@pytest.mark.parametrize("command, code", [
    (["sh", "-c", "echo {A}"], "echo {A}"),
    (["/bin/bash", "-xc", "echo {A}", "bash", "{B}"], "echo {A}"),
    (["/usr/bin/env", "sh", "-c", "echo {A}"], "echo {A}"),
    (["env", "-i", "PATH=/bin", "dash", "-ec", "x"], "x"),
    (["busybox", "sh", "-c", "x"], "x"),
    (["python3", "-Ic", "print('{A}')"], "print('{A}')"),
    (["/usr/bin/python3.11", "-c", "{A}"], "{A}"),
    (["perl", "-ne", "print"], "print"),
    (["perl", "-E", "say 1"], "say 1"),
    (["ruby", "-e", "p 1"], "p 1"),
    (["node", "--eval", "1"], "1"),
    (["php", "-r", "echo 1;"], "echo 1;"),
    (["Rscript", "-e", "1"], "1"),
])
def test_the_code_an_interpreter_is_given_is_found(command, code):
    assert code_arguments(command) == [code]


@pytest.mark.parametrize("command", [
    ["python3", "/opt/tool/run.py", "-c", "{CONFIG}"],     # the script's own -c
    ["Rscript", "fit.R", "-r", "{RADIUS}"],
    ["perl", "mail.pl", "-e", "{CONFIG}"],
    ["sh", "script.sh", "-c", "{A}"],
    ["python3", "-m", "tool", "-c", "{A}"],
    ["sh", "-", "-c", "{A}"],                               # the script comes on stdin
    ["ruby", "-E", "utf-8", "tool.rb"],                     # ruby's -E is an encoding
    ["wc", "-c", "{F}"],                                    # no interpreter
    ["tar", "-xf", "{ARCHIVE}"],
])
def test_arguments_after_the_script_or_of_other_programs_are_not_code(command):
    assert code_arguments(command) == []
