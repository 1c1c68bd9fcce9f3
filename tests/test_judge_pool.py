"""The judging pool end to end: real programs, every way of doing I/O, verdicts, reward modes."""

import json
import os
import sys
import threading

import pytest

from microcoder_jax.judge import JudgePool, Problem, TestCase
from microcoder_jax.judge.rewards import lookup
from microcoder_jax.judge.program import JudgeResult

SUM = Problem("sum", [TestCase("1 2\n3\n", "6\n"), TestCase("10 20\n30\n", "60\n"), TestCase("-5 5\n0\n", "0\n")])


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=2, timeout=1.0, memory_mb=256, output_limit_mb=1, wall_factor=2.0) as p:
        yield p


IO_STYLES = {
    "input": "a, b = map(int, input().split())\nc = int(input())\nprint(a + b + c)",
    "iterate_stdin": "import sys\ns = 0\nfor line in sys.stdin:\n    s += sum(map(int, line.split()))\nprint(s)",
    "open0": "print(sum(map(int, open(0).read().split())))",
    "buffer_readline": (
        "import sys\nr = sys.stdin.buffer.readline\na, b = map(int, r().split())\nprint(a + b + int(r()))"
    ),
    "os_read": (
        "import os\ndata = b''\nwhile chunk := os.read(0, 1):\n    data += chunk\nprint(sum(map(int, data.split())))"
    ),
    "stdout_buffer": (
        "import sys\nv = sum(map(int, sys.stdin.read().split()))\nsys.stdout.buffer.write(str(v).encode() + b'\\n')"
    ),
    "main_guard": (
        "def main():\n    print(sum(map(int, open(0).read().split())))\n\nif __name__ == '__main__':\n    main()"
    ),
    "top_level_global": "global total\ntotal = sum(map(int, open(0).read().split()))\nprint(total)",
    "joined_thread": (
        "import sys, threading\nthreading.stack_size(1 << 26)\nsys.setrecursionlimit(10 ** 6)\n"
        "def go():\n    print(sum(map(int, sys.stdin.read().split())))\n"
        "t = threading.Thread(target=go)\nt.start()\nt.join()"
    ),
    "exit_after_print": "print(sum(map(int, open(0).read().split())))\nexit()",
    "sys_exit_0_after_print": "import sys\nprint(sum(map(int, sys.stdin.read().split())))\nsys.exit(0)",
    "os_write_and_os_exit": (
        "import os, sys\nos.write(1, str(sum(map(int, sys.stdin.read().split()))).encode())\nos._exit(0)"
    ),
    "fast_io": (
        "import sys, io, os\ninput = io.BytesIO(os.read(0, os.fstat(0).st_size or 1 << 16)).readline\n"
        "a, b = map(int, input().split())\nout = io.StringIO()\nout.write(str(a + b + int(input())))\n"
        "sys.stdout.write(out.getvalue())"
    ),
    "deep_recursion": (
        "import sys\nsys.setrecursionlimit(200000)\n"
        "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"
        "assert f(100000) == 100000\nprint(sum(map(int, sys.stdin.read().split())))"
    ),
}


def test_every_ordinary_way_of_reading_and_writing_works(pool):
    names = list(IO_STYLES)
    results = pool.judge([SUM] * len(names), [IO_STYLES[n] for n in names])
    failed = {n: r for n, r in zip(names, results) if not r.passed}
    assert not failed
    assert all(r.tests_passed == r.tests_total == 3 and r.cpu_time > 0 for r in results)


VERDICT_CASES = {
    "wrong_answer": ("print(6)", "test 1: token 1: expected '60', got '6'", 1),
    "runtime_error": ("print(1 // 0)", "ZeroDivisionError", 0),
    "compile_error": ("def f(:\n  pass", "SyntaxError", 0),
    "timeout": ("while True:\n    pass", "CPU time", 0),
    "memory_limit": ("x = []\nwhile True:\n    x.append(bytearray(1 << 20))", "memory limit", 0),
    "sys_exit_before_print": ("import sys\nsys.exit(0)\nprint(6)", "expected 1 tokens, got 0", 0),
    "exit_code": ("print(6)\nexit(3)", "exit code 3", 0),
    "huge_output": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "output limit", 0),
    "sleeping": ("import time\ntime.sleep(30)", "wall-clock", 0),
    "no_code": (None, "no program", 0),
}
EXPECTED_VERDICT = {
    "sys_exit_before_print": "wrong_answer",
    "exit_code": "runtime_error",
    "huge_output": "runtime_error",
    "sleeping": "timeout",
}


def test_verdicts(pool):
    names = [n for n in VERDICT_CASES if n != "memory_limit" or sys.platform.startswith("linux")]
    results = pool.judge([SUM] * len(names), [VERDICT_CASES[n][0] for n in names])
    for name, r in zip(names, results):
        _, reason, first_failure = VERDICT_CASES[name]
        assert (r.verdict, r.passed) == (EXPECTED_VERDICT.get(name, name), False), (name, r)
        # A CPU-bound loop on a crowded machine may meet the wall-clock backstop first.
        reasons = (reason, "wall-clock") if name == "timeout" else (reason,)
        assert any(x in r.reason for x in reasons) and r.first_failure == first_failure, (name, r)
        assert r.tests_passed == first_failure and r.tests_total == 3


def test_the_reward_decides_whether_judging_stops_early_or_runs_every_test(pool):
    code = "v = sum(map(int, open(0).read().split()))\nprint(v if v != 60 else 0)"
    every_test = {name: lookup(name).every_test for name in ("all", "fraction")}
    assert every_test == {"all": False, "fraction": True}
    early, full = (pool.judge([SUM], [code], every_test=every_test[m])[0] for m in ("all", "fraction"))
    assert (early.tests_passed, early.first_failure, early.verdict) == (1, 1, "wrong_answer")
    assert (full.tests_passed, full.first_failure, full.verdict) == (2, 1, "wrong_answer")
    assert lookup("all")(SUM, "", early) == 0.0 and lookup("fraction")(SUM, "", full) == pytest.approx(2 / 3)
    assert lookup("fraction")(SUM, "", JudgeResult(True, "passed", 3, 3)) == 1.0


ADD = Problem(
    "add",
    [
        TestCase("[1, 2]\n3", "[[1, 2], 3]", "functional"),
        TestCase("[]\n0", "[[], 0]", "functional"),
        TestCase("[0.5]\n1", "[[0.5], 1]", "functional"),
    ],
    func_name="pair",
)
CALL_CASES = {
    # A fresh Solution per test: state kept on the instance or the class does not leak across tests.
    "fresh_instance": (
        "class Solution:\n    calls = 0\n    def pair(self, a: List[int], b: int):\n"
        "        Solution.calls += 1\n        return (a, b * Solution.calls)",
        True,
    ),
    "tuple_and_float": (
        "class Solution:\n    def pair(self, a, b):\n"
        "        return tuple(x + 1e-9 if isinstance(x, float) else x for x in a), b",
        True,
    ),
    "int_as_float_is_wrong": ("class Solution:\n    def pair(self, a, b):\n        return [a, b + 1e-9]", False),
    "plain_function": ("def pair(a, b):\n    return [a, b]", True),
    "prints_are_ignored": (
        "class Solution:\n    def pair(self, a, b):\n        print('debug')\n        return [a, b]",
        True,
    ),
    "main_guard_not_run": (
        "class Solution:\n    def pair(self, a, b):\n        return [a, b]\nif __name__ == '__main__':\n    input()",
        True,
    ),
    "wrong": ("class Solution:\n    def pair(self, a, b):\n        return [b, a]", False),
    "always_equal": (
        "class Eq:\n    def __eq__(self, other):\n        return True\n"
        "class Solution:\n    def pair(self, a, b):\n        return Eq()",
        False,
    ),
    "list_subclass_eq": (
        "class L(list):\n    def __eq__(self, other):\n        return True\n"
        "class Solution:\n    def pair(self, a, b):\n        return L()",
        False,
    ),
    "returns_none": ("class Solution:\n    def pair(self, a, b):\n        pass", False),
    "missing_method": ("class Solution:\n    def other(self, a, b):\n        return [a, b]", False),
}


def test_call_based(pool):
    names = list(CALL_CASES)
    results = pool.judge([ADD] * len(names), [CALL_CASES[n][0] for n in names])
    for name, r in zip(names, results):
        assert r.passed == CALL_CASES[name][1], (name, r)
    assert results[names.index("missing_method")].verdict == "runtime_error"
    assert results[names.index("always_equal")].verdict == "wrong_answer"


def test_show_output_keeps_the_start_of_the_first_failing_tests_output_and_its_size(pool):
    """Feedback shows what a program gave: stdout (streamed, only its start kept), a checker
    problem's spooled stdout, a call-based return value as JSON; an error names its line."""
    checker = Problem("split", [TestCase("5\n", "2 3\n")], checker="def check(i, e, o):\n    return o == e")
    stdin, huge, call, crash, check, off = pool.judge(
        [SUM, SUM, ADD, SUM, checker, SUM],
        [
            "a, b = map(int, input().split())\nc = int(input())\nprint(a + b + c + 1)",
            "print('y' * 300000)",
            "class Solution:\n    def pair(self, a, b):\n        return [b, a, 'é']",
            "xs = []\nprint('partial')\nprint(xs[3])",
            "print(4, 1)",
            "print(5)",
        ],
        show_output=20,
    )  # fmt: skip
    assert (stdin.verdict, stdin.output, stdin.output_size) == ("wrong_answer", "7\n", 2)
    assert huge.output == "y" * 20 and huge.output_size == 300001
    assert call.output == '[3, [1, 2], "\\u00e9"' and call.output_size == 21  # the JSON's `]` cut
    assert crash.verdict == "runtime_error" and crash.output == "partial\n"
    assert "IndexError" in crash.reason and "(line 3: print(xs[3]))" in crash.reason
    assert check.verdict == "wrong_answer" and check.output == "4 1\n"
    plain = pool.judge([SUM], ["print(5)"])[0]  # without show_output nothing is kept
    assert off.output == "5\n" and (plain.output, plain.output_size, plain.reason) == ("", 0, off.reason)


def test_custom_checker_accepts_any_valid_answer(pool):
    checker = (
        "def check(input, expected, output):\n    n = int(input)\n    xs = output.split()\n"
        "    return (len(xs) == 2 and sum(map(int, xs)) == n, 'not a split of n')"
    )
    problem = Problem("split", [TestCase("5\n", "2 3\n"), TestCase("4\n", "1 3\n")], checker=checker)
    results = pool.judge([problem] * 3, ["n = int(input())\nprint(n - 1, 1)", "print(0, 0)", "print(1 +)"])
    assert [r.verdict for r in results] == ["passed", "wrong_answer", "compile_error"]
    assert "not a split of n" in results[1].reason
    broken = Problem("broken", [TestCase("1", "1")], checker="def check(i, e, o):\n    return 1 / 0")
    assert pool.judge([broken], ["print(1)"])[0].verdict == "judge_error"


def test_float_tolerance_is_per_problem(pool):
    loose = Problem("pi", [TestCase("", "3.14159\n")], float_tolerance=1e-3)
    strict = Problem("pi", [TestCase("", "3.14159\n")])
    results = pool.judge([loose, strict, strict], ["print(3.1412)", "print(3.1412)", "print(3.141591)"])
    assert [r.passed for r in results] == [True, False, True]


def test_submit_returns_at_once_and_handles_overlap(pool):
    slow = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass\nprint(6)"
    first = pool.submit([SUM] * 2, [slow, IO_STYLES["input"]])
    second = pool.submit([SUM], [IO_STYLES["open0"]])
    assert not first.done()
    arrived = dict(second.as_completed())
    assert arrived[0].passed and second.done() and second.completed == 1
    results = first.result(timeout=60)
    assert [r.verdict for r in results] == ["wrong_answer", "passed"]
    assert pool.submit([], []).result() == []
    with pytest.raises(ValueError):
        pool.submit([SUM], [])


def test_bad_problem_data_is_a_judge_error_not_a_crash(pool):
    bad = Problem("bad", [TestCase("[1]\n", "not json", "functional")], func_name="f")
    results = pool.judge([bad, SUM], ["def f(x):\n    return x", IO_STYLES["input"]])
    assert results[0].verdict == "judge_error" and "not JSON" in results[0].reason
    assert results[1].passed
    assert pool.judge([Problem("empty", [])], ["print(1)"])[0].verdict == "judge_error"


def test_results_serialise(pool):
    (r,) = pool.judge([SUM], [IO_STYLES["input"]])
    row = json.loads(json.dumps(r.to_json()))
    assert row["verdict"] == "passed" and row["tests_total"] == 3


def test_pool_can_be_used_from_several_threads(pool):
    out = {}

    def go(i):
        out[i] = pool.judge([SUM], [IO_STYLES["input"]])[0].passed

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: True for i in range(4)}


def test_large_input_and_output_through_real_pipes(pool):
    n = 200_000
    problem = Problem("big", [TestCase(f"{n}\n" + "7 " * n + "\n", "\n".join(["7"] * n) + "\n")])
    code = "import sys\nn, *xs = sys.stdin.buffer.read().split()\nsys.stdout.write('\\n'.join(x.decode() for x in xs))"
    assert pool.judge([problem], [code])[0].passed


def test_close_answers_queued_jobs_and_stops_the_servers():
    pool = JudgePool(workers=1, timeout=1.0, memory_mb=256)
    pids = pool.server_pids
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass\nprint(6)"
    handle = pool.submit([SUM] * 6, [busy] * 6)
    pool.close()
    results = handle.result(timeout=30)
    assert "judge_error" in {r.verdict for r in results} and len(results) == 6
    assert all(r.reason == "the pool was closed before judging this" for r in results if r.verdict == "judge_error")
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(RuntimeError):
        pool.submit([SUM], ["print(6)"])


def test_per_problem_timeout_overrides_the_pool_default(pool):
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\nprint(6)"
    tight = Problem("tight", [TestCase("", "6\n")], metadata={"timeout": 0.1})
    loose = Problem("loose", [TestCase("", "6\n")])
    results = pool.judge([tight, loose], [burn, burn])
    assert [r.verdict for r in results] == ["timeout", "passed"]


def test_livecodebench_rows_judge_end_to_end(pool):
    import base64
    import pickle
    import zlib

    private = [{"input": "[3, 1, 2]\n2", "output": "[1, 2]", "testtype": "functional"}]
    row = {
        "question_id": "3001",
        "platform": "leetcode",
        "metadata": json.dumps({"func_name": "smallest"}),
        "starter_code": "class Solution:\n    def smallest(self, nums: List[int], k: int) -> List[int]:\n",
        "public_test_cases": json.dumps([{"input": "[5, 4]\n1", "output": "[4]", "testtype": "functional"}]),
        "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode(),
    }
    problem = Problem.from_lcb_row(row)
    code = "class Solution:\n    def smallest(self, nums: List[int], k: int) -> List[int]:\n        return sorted(nums)[:k]"
    wrong = code.replace("[:k]", "[-k:]")
    assert [r.verdict for r in pool.judge([problem] * 2, [code, wrong])] == ["passed", "wrong_answer"]


def test_wire_format_round_trips_without_pickle():
    from microcoder_jax.judge import worker

    mine, theirs = worker.socketpair()
    r, w = os.pipe()
    msg = {"code": "print('\u00e9')", "n": 3, "x": None, "nested": {"a": [1, 2.5]}}
    worker.send_msg(mine, msg, [r])
    os.close(r)
    got, fds = worker.recv_msg(theirs, with_fds=True)
    assert got == msg and len(fds) == 1
    os.write(w, b"through")
    assert os.read(fds[0], 7) == b"through"  # the descriptor itself came across
    mine.close()
    assert worker.recv_msg(theirs) is None
    for fd in (w, fds[0]):
        os.close(fd)
    theirs.close()


def test_checker_output_is_streamed_and_capped():
    """A checker problem's stdout is spooled as it arrives and streamed to the checker: 8 MiB of
    two-byte characters reach it whole while the judge's Python heap stays under 4 MiB (holding
    it, its text and its JSON took ~60 MiB); past the cap it is an output limit, as without a checker."""
    import tracemalloc

    checker = (
        "def check(input, expected, output):\n"
        "    return (output == '\\u00e9' * (4 << 20) + '\\n', f'{len(output)} characters')"
    )
    problem = Problem("big", [TestCase("", "x")], checker=checker)
    with JudgePool(workers=1, timeout=10.0, memory_mb=512, output_limit_mb=16) as big:
        tracemalloc.start()
        try:
            (result,) = big.judge([problem], ["print('\\u00e9' * (4 << 20))"])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert result.verdict == "passed", result
        assert peak < 4 << 20, f"the judge held {peak / 2**20:.1f} MiB"
        (flood,) = big.judge([problem], ["print('x' * (17 << 20))"])
        assert flood.verdict == "runtime_error" and "output limit exceeded (16 MiB)" in flood.reason, flood


def test_checker_input_is_the_json_of_the_whole_output_however_it_is_cut():
    """Escaped piece by piece (multi-byte characters and bad bytes cut across pieces), the
    checker's input is the JSON of the output decoded whole, every time it is sent."""
    from microcoder_jax.judge.program import CheckerInput, _Spool

    data = ('a"b\\\n\t\u00e9\u4e2d\U0001f600\x00'.encode() + b"\xff\xc3") * 5000 + "\u00e9".encode()
    spool = _Spool()
    for i in range(0, len(data), 777):
        spool.feed(data[i : i + 777])
    test = TestCase("1 2\n", "3\n")
    want = json.dumps(
        {"input": test.input, "expected": test.output, "output": data.decode("utf-8", errors="replace")}
    ).encode()
    sent = CheckerInput(test, spool.finish(), chunk=1001)
    assert b"".join(sent) == want and b"".join(sent) == want  # a retry sends it again
    assert json.loads(b"".join(CheckerInput(test, "plain \u00e9"))) == {
        "input": "1 2\n",
        "expected": "3\n",
        "output": "plain \u00e9",
    }
    spool.close()
