"""Faults the judge did not cause: fork servers killed from outside (os.kill, as the OOM killer or an
operator would) are replaced and the test retried, with a bound; past it the verdict is
judge_error, never the program's runtime_error."""

import contextlib
import os
import signal
import threading
import time

import pytest

from microcoder_jax.judge import JudgePool, Problem, TestCase
from microcoder_jax.judge import channel
from microcoder_jax.judge import pool as pool_lib
from microcoder_jax.judge.program import judge

SUM = Problem("sum", [TestCase("1 2\n", "3\n"), TestCase("10 20\n", "30\n")])
SLOW_SUM = "import time\ntime.sleep(0.6)\na, b = map(int, input().split())\nprint(a + b)"
FAST_SUM = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=1, timeout=2.0, memory_mb=256, output_limit_mb=1, server_retries=2) as p:
        yield p


@contextlib.contextmanager
def killing(pool, monkeypatch, times: int, target: str = "server"):
    """Kill the (one) fork server of `pool` with SIGKILL from another thread 0.2 s into each of
    the next `times` programs (which sleep 0.6 s), as the OOM killer or an operator would: the
    server proper, PID 1 of its namespace ("server"), or its whole process group with the
    process the pool started ("group"). Yields the pids the pool started."""
    killed: list[int] = []
    real = channel.run_program

    def run_program(sock, request):
        if len(killed) < times:
            pid = pool._servers[0]._proc.pid
            inner = (_children(pid) or [pid])[0]
            kill = (os.kill, (inner, signal.SIGKILL)) if target == "server" else (os.killpg, (pid, signal.SIGKILL))
            threading.Timer(0.2, kill[0], kill[1]).start()
            killed.append(pid)
        return real(sock, request)

    monkeypatch.setattr(channel, "run_program", run_program)
    try:
        yield killed
    finally:
        monkeypatch.undo()
        time.sleep(0.3)  # the last timer has fired


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.mark.parametrize("target", ["server", "group"])
def test_a_server_killed_during_a_run_is_replaced_and_the_test_retried(pool, monkeypatch, target):
    deaths = pool.server_deaths
    with killing(pool, monkeypatch, times=1, target=target) as killed:
        result = pool.judge([SUM], [SLOW_SUM])[0]
    assert len(killed) == 1 and killed[0] not in pool.server_pids
    assert result.verdict == "passed" and result.tests_passed == 2, result
    assert pool.server_deaths == deaths + 1
    assert pool.judge([SUM], [FAST_SUM])[0].passed  # the fresh server keeps serving


def test_past_the_retry_bound_the_verdict_is_judge_error_not_the_programs(pool, monkeypatch):
    deaths = pool.server_deaths
    with killing(pool, monkeypatch, times=3) as killed:  # the first try and both retries
        result = pool.judge([SUM], [SLOW_SUM])[0]
    assert len(killed) == 3
    assert result.verdict == "judge_error" and not result.passed, result
    assert "died under it 3 times" in result.reason and result.reason.count("killed by SIGKILL") == 3
    assert "not the program's doing" in result.reason
    assert pool.server_deaths == deaths + 3
    assert pool.judge([SUM], [FAST_SUM])[0].passed  # and the pool goes on


def test_a_server_killed_between_programs_costs_no_retry(pool):
    deaths = pool.server_deaths
    os.kill(pool.server_pids[0], signal.SIGKILL)
    time.sleep(0.2)
    assert pool.judge([SUM], [FAST_SUM])[0].passed
    assert pool.server_deaths == deaths  # replaced before the program ran, not under it


def test_no_server_killed_from_outside_leaves_files_or_groups(tmp_path, monkeypatch):
    with JudgePool(workers=1, timeout=2.0, memory_mb=256, tmpdir=str(tmp_path), server_retries=0) as p:
        groups = p.isolation["cgroup_dirs"]
        with killing(p, monkeypatch, times=1):
            assert p.judge([SUM], [SLOW_SUM])[0].verdict == "judge_error"
        assert p.judge([SUM], [FAST_SUM])[0].passed
    assert os.listdir(tmp_path) == []
    assert not any(os.path.exists(g) for g in groups)


def test_the_program_is_blamed_only_where_it_could_have_signalled_its_server():
    assert not pool_lib._blame({"pid_ns": True, "uid": None})
    assert not pool_lib._blame({"pid_ns": False, "uid": 1_000_000_000})
    assert pool_lib._blame({"pid_ns": False, "uid": None})
    died = {"server_died": ["pid 7 killed by SIGKILL"] * 3}
    assert judge(SUM, FAST_SUM, lambda req: {**died, "program_blamed": False}).verdict == "judge_error"
    blamed = judge(SUM, FAST_SUM, lambda req: {**died, "program_blamed": True})
    assert blamed.verdict == "runtime_error" and "the program killed" in blamed.reason


def test_server_retries_must_not_be_negative():
    with pytest.raises(ValueError, match="server_retries"):
        JudgePool(workers=1, server_retries=-1)
