"""The suite's xdist scheduling: whole files per worker, and a worker lost to a native crash costs one
rerun of the test it died in, never a hung run.

Why: workers died inside XLA's CPU compile (SIGSEGV or SIGABRT, at different tests, each passing
alone) when they reached Linux's cap on memory mappings; conftest.py now relieves that after every
file (microcoder_jax/trainer/map_limit.py), and this is the safety net. pytest-xdist 3.8.0's
`loadfile` scheduler deadlocks after such a crash: it re-queues every file the dead worker had finished as empty
work units, and hands a replacement a single test, which an xdist worker never starts before a
second one or a shutdown arrives (xdist issues 1323, 1327, 1378). This scheduler re-queues only the
dead worker's unfinished tests, keeps every worker fed, and reruns the crashed test once on the
fresh worker: its first crash is reported as a rerun (listed at the end of the run), a second crash
of the same test fails the run. tests/conftest.py imports the hooks; `-p xdist_crashes` loads them
elsewhere (tests/test_xdist_crashes.py).
"""

from __future__ import annotations

import os

import pytest
from xdist.scheduler import LoadFileScheduling

# Files whose tests start several JAX processes at once (a run beside its reference, two hosts and
# one). Two of them on different xdist workers starve each other and every test beside them on 2
# cores, so they share one work unit: one worker runs them in turn.
MULTI_PROCESS = ("test_train_multihost.py", "test_train_resume.py", "test_sharding.py")
RERUNS = 1  # a test may take a worker down this many times before the crash fails the run


class Scheduler(LoadFileScheduling):
    """--dist loadfile (the MULTI_PROCESS files one unit), with crash recovery that cannot hang."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.crashes: dict[str, int] = {}  # test id -> workers it took down

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return "multi-process files" if os.path.basename(path) in MULTI_PROCESS else path

    def remove_node(self, node):
        workload = self.assigned_work.pop(node)
        crashed = next((t for unit in workload.values() for t, done in unit.items() if not done), None)
        if crashed is None:  # a clean shutdown: nothing was left to run
            return None
        # Scheduling waits for the replacement's collection (xdist starts one unless restarts ran out)
        self.registered_collections.pop(node, None)
        self.crashes[crashed] = self.crashes.get(crashed, 0) + 1
        if self.crashes[crashed] > RERUNS:
            for unit in workload.values():  # its failure is final: never start it again
                if crashed in unit:
                    unit[crashed] = True
        for scope, unit in workload.items():  # only what is left to run goes back, at the front
            if not all(unit.values()):
                self.workqueue[scope] = unit
                self.workqueue.move_to_end(scope, last=False)
        for other in self.nodes:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node) -> None:
        """Top the node up to at least three pending tests (a worker only starts a test once it
        holds the next one or a shutdown), then send the shutdown when the queue is empty."""
        if node.shutting_down or node not in self.registered_collections:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    return Scheduler(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """A test's first crash is a rerun, not a failure."""
    crashes = getattr(sched, "crashes", {}).get(crashitem, 0)
    if 0 < crashes <= RERUNS:
        report.outcome = "rerun"
        report.longrepr = f"{report.longrepr}; rerun on a fresh worker"


def pytest_report_teststatus(report, config):
    """The rerun outcome is counted apart and shown as R."""
    if getattr(report, "outcome", None) == "rerun":
        return "rerun", "R", "RERUN"
    return None


def pytest_terminal_summary(terminalreporter):
    """Name every test that took a worker down."""
    reruns = terminalreporter.stats.get("rerun", [])
    if reruns:
        terminalreporter.write_sep("=", f"workers lost to a crash: each test rerun up to {RERUNS} time(s)")
        for rep in reruns:
            terminalreporter.write_line(f"RERUN {rep.nodeid}: {rep.longrepr}")
