"""The suite's watch on its own time (a pytest plugin, loaded by conftest.py).

At the end of a run it prints the slowest tests (setup, call and teardown together)
and each file's total, in seconds and in CPU seconds (the test's process and the
children it reaped: servers, jobs, commands); and it fails the run when one test took
longer than ``LIMIT_S``, unless that test is marked ``over_a_minute`` with the reason
it must.  Under pytest-xdist the controller judges, from the reports its workers send.
"""
from __future__ import annotations

import collections
import resource
import time

import pytest

LIMIT_S = 60.0
SLOWEST = 20
MARK = "over_a_minute"


#: Modules whose tests last longest (servers and workers as processes, a browser,
#: hypothesis), run first after those marked MARK, so that the parallel run does not
#: end waiting on one of them: pytest-xdist's "load" hands the first tests out in
#: turn, the rest to whichever process is free.  Only the order changes.
FIRST = ("test_distributed", "test_recovery", "test_properties", "test_batch_browser",
         "test_browser_holds", "test_browser", "test_connections", "test_xml_documents",
         "test_migrations", "test_packaging", "test_hardening")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: (MARK not in item.keywords,
                                 rank.get(getattr(item.module, "__name__", ""), len(FIRST))))


def _cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each phase's report carries the CPU it took (measured from the end of the
    previous phase's report, so nothing between them is lost)."""
    report = yield
    now = _cpu()
    report.user_properties.append(("cpu", now - item.stash.get(_STARTED, now)))
    item.stash[_STARTED] = now
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem) -> None:
    item.stash[_STARTED] = _cpu()


class Durations:
    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.cpu: collections.Counter[str] = collections.Counter()
        self.excused: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        self.cpu[report.nodeid] += dict(report.user_properties).get("cpu", 0.0)
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
        write(f"{len(self.seconds)} tests, {sum(self.seconds.values()):.1f} s and "
              f"{sum(self.cpu.values()):.1f} CPU s in all")
        write(f"the {SLOWEST} slowest (s, CPU s):")
        for nodeid, s in self.seconds.most_common(SLOWEST):
            excused = f"  ({MARK})" if nodeid in self.excused else ""
            write(f"  {s:7.2f} {self.cpu[nodeid]:7.2f}  {nodeid}{excused}")
        files: collections.Counter[str] = collections.Counter()
        files_cpu: collections.Counter[str] = collections.Counter()
        for nodeid, s in self.seconds.items():
            files[nodeid.split("::", 1)[0]] += s
            files_cpu[nodeid.split("::", 1)[0]] += self.cpu[nodeid]
        write("by file (s, CPU s):")
        for name, s in files.most_common():
            write(f"  {s:7.1f} {files_cpu[name]:7.1f}  {name}")
        for nodeid, s in self.too_slow():
            write(f"FAILED (over {LIMIT_S:.0f} s): {nodeid} took {s:.1f} s; make it faster, "
                  f"or mark it {MARK} with the reason it must take that long", red=True)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(reason): a test that may take over "
                            f"{LIMIT_S:.0f} s, and why")
    if not hasattr(config, "workerinput"):      # an xdist worker: its controller judges
        config.pluginmanager.register(Durations(), "uws-durations")
