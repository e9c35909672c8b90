"""The suite's watch on its own time (a pytest plugin, loaded by conftest.py).

At the end of a run it prints the slowest tests (setup, call and teardown together)
and each file's total; and it fails the run when one test took longer than
``LIMIT_S``, unless that test is marked ``over_a_minute`` with the reason it must.
Under pytest-xdist the controller judges, from the reports its workers send.
"""
from __future__ import annotations

import collections

import pytest

LIMIT_S = 60.0
SLOWEST = 20
MARK = "over_a_minute"


class Durations:
    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.excused: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if MARK in report.keywords:
            self.excused.add(report.nodeid)

    def too_slow(self) -> list[tuple[str, float]]:
        return [(nodeid, s) for nodeid, s in self.seconds.most_common()
                if s > LIMIT_S and nodeid not in self.excused]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.too_slow() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("test durations (setup + call + teardown)")
        write(f"{len(self.seconds)} tests, {sum(self.seconds.values()):.1f} s in all")
        write(f"the {SLOWEST} slowest:")
        for nodeid, s in self.seconds.most_common(SLOWEST):
            write(f"  {s:7.2f} s  {nodeid}{'  (' + MARK + ')' if nodeid in self.excused else ''}")
        files: collections.Counter[str] = collections.Counter()
        for nodeid, s in self.seconds.items():
            files[nodeid.split("::", 1)[0]] += s
        write("by file:")
        for name, s in files.most_common():
            write(f"  {s:7.1f} s  {name}")
        for nodeid, s in self.too_slow():
            write(f"FAILED (over {LIMIT_S:.0f} s): {nodeid} took {s:.1f} s; make it faster, "
                  f"or mark it {MARK} with the reason it must take that long", red=True)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(reason): a test that may take over "
                            f"{LIMIT_S:.0f} s, and why")
    if not hasattr(config, "workerinput"):      # an xdist worker: its controller judges
        config.pluginmanager.register(Durations(), "uws-durations")
