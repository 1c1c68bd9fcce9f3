"""Judge one (problem, program) pair: run its tests through a fork server, compare, give a verdict.

The comparison happens here, in the judge's process, on plain data: the program's process never
sees an expected output, and nothing it returns is trusted beyond bytes and JSON.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import json
import signal
import tempfile
from typing import IO, Callable, Iterator

from microcoder_jax.judge import compare
from microcoder_jax.data.problems import Problem, TestCase
from microcoder_jax.judge.sandbox import EXIT_COMPILE, EXIT_MEMORY, EXIT_SETUP

VERDICTS = (
    "passed",
    "wrong_answer",
    "runtime_error",
    "timeout",
    "memory_limit",
    "compile_error",
    "no_code",
    "judge_error",
)

Run = Callable[[dict], dict]  # a fork-server round trip: request -> reply
# A call-based return value (its JSON text) longer than this is "output limit exceeded": parsed,
# 1 MiB of small integers costs the judge ~50 MiB for a moment; stdout is compared as it arrives.
RETURN_LIMIT = 1 << 20
# A checker problem's stdout is spooled as it arrives: in memory up to this, then in an unlinked
# temporary file, and streamed to the checker from there (capped like any stdout).
SPOOL_MEMORY = 1 << 20


@dataclasses.dataclass
class JudgeResult:
    """The judgement of one program. `first_failure` is a test index; `cpu_time` sums all tests run.
    Judged with `show_output`, `output` is the start of what the program gave on its first failing
    test (stdout, or a call-based return value as JSON) and `output_size` its whole size in bytes."""

    passed: bool
    verdict: str
    tests_passed: int
    tests_total: int
    first_failure: int | None = None
    reason: str = ""
    cpu_time: float = 0.0
    wall_time: float = 0.0
    output: str = ""
    output_size: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-test limits. `timeout` is CPU seconds; the wall-clock backstop is generous on purpose."""

    timeout: float = 6.0
    memory_mb: int = 1024
    output_limit_mb: int = 64
    wall_factor: float = 3.0

    def wall_timeout(self, timeout: float) -> float:
        return timeout * self.wall_factor + 1.0


def no_code(problem: Problem) -> JudgeResult:
    return JudgeResult(False, "no_code", 0, len(problem.tests), 0, "no program found in the response")


def judge_error(problem: Problem | None, reason: str) -> JudgeResult:
    total = len(problem.tests) if problem is not None else 0
    return JudgeResult(False, "judge_error", 0, total, None, reason[:500])


def judge(
    problem: Problem,
    code: str | None,
    run: Run,
    limits: Limits = Limits(),
    *,
    every_test: bool = False,
    run_checker: Run | None = None,
    show_output: int = 0,
) -> JudgeResult:
    """Run `code` on the tests of `problem` in order, stopping at the first failure unless
    `every_test` (what the reward reads decides: judge/rewards.py). `show_output`: keep the first
    that many characters of the first failing test's output (feedback shows them; 0: none)."""
    if not problem.tests:
        return judge_error(problem, "the problem has no tests")
    if code is None or not code.strip():
        return no_code(problem)
    timeout = float(problem.metadata.get("timeout") or limits.timeout)
    result = JudgeResult(True, "passed", 0, len(problem.tests))
    for index, test in enumerate(problem.tests):
        reply = run(_request(problem, test, code, limits, timeout, show_output))
        if reply.get("server_died"):
            return _server_died(problem, result, index, reply)
        if "error" in reply:
            return judge_error(problem, f"test {index}: {reply['error']}")
        result.cpu_time += reply["cpu"]
        result.wall_time += reply["wall"]
        try:
            verdict, reason = _test_verdict(problem, test, reply, timeout, limits, run_checker)
        except ValueError as e:  # the problem's own data is broken (e.g. expected is not JSON)
            return judge_error(problem, f"test {index}: {e}")
        finally:
            if isinstance(reply.get("stdout_sink"), _Spool):
                reply["stdout_sink"].close()
        if verdict == "passed":
            result.tests_passed += 1
            continue
        if result.passed:
            result.passed, result.verdict, result.first_failure = False, verdict, index
            result.reason = f"test {index}: {reason}"[:500]
            if show_output:
                result.output, result.output_size = _output(problem, test, reply, show_output)
        if not every_test or verdict == "compile_error":
            break
    return result


def _server_died(problem: Problem, result: JudgeResult, index: int, reply: dict) -> JudgeResult:
    """Every fresh server died under this test: the program's runtime_error only where it could
    have killed its server itself (pool._blame), else judge_error (not the program's doing)."""
    deaths = reply["server_died"]
    deaths = deaths if isinstance(deaths, list) else []
    if reply.get("program_blamed"):
        return JudgeResult(
            False,
            "runtime_error",
            result.tests_passed,
            len(problem.tests),
            index,
            f"test {index}: the program killed the judge's fork server ({'; '.join(deaths)})"[:500],
            result.cpu_time,
            result.wall_time,
        )
    return judge_error(
        problem,
        f"test {index}: the judge's fork server died under it {len(deaths)} "
        f"times ({'; '.join(deaths)}); not the program's doing",
    )


def _output(problem: Problem, test: TestCase, reply: dict, keep: int) -> tuple[str, int]:
    """(the first `keep` characters of a test's output, its whole size in UTF-8 bytes): stdout, or
    a call-based test's return value as JSON; an assert test has none."""
    if problem.call_based:
        result = _status(reply).get("result") if test.kind != "assert" else None
        return (result[:keep], len(result.encode("utf-8", errors="replace"))) if isinstance(result, str) else ("", 0)
    head = reply.get("stdout", b"")[: 4 * keep]  # at most 4 bytes a character
    return head.decode("utf-8", errors="replace")[:keep], int(reply.get("stdout_size", len(head)))


def _request(problem: Problem, test: TestCase, code: str, limits: Limits, timeout: float, show_output: int = 0) -> dict:
    call = problem.call_based
    return {
        "mode": ("assert" if test.kind == "assert" else "call") if call else "stdin",
        "harness": problem.metadata.get("stdin_harness") or "plain",  # problems.STDIN_HARNESSES
        "code": code,
        "input": test.input if call else test.input.encode(),
        "func_name": problem.func_name,
        "timeout": timeout,
        "wall_timeout": limits.wall_timeout(timeout),
        "memory_mb": limits.memory_mb,
        "output_limit": limits.output_limit_mb << 20,
        "return_limit": min(RETURN_LIMIT, limits.output_limit_mb << 20),
        # the status line holds the return value escaped once more: at most twice as long
        "status_limit": 2 * min(RETURN_LIMIT, limits.output_limit_mb << 20) + (64 << 10),
        "stdout_keep": 4 * show_output,  # bytes kept beside the streamed comparison
        # stdin tests are compared as the bytes arrive; a checker's are spooled for it
        "stdout_sink": None
        if call
        else _Spool
        if problem.checker is not None
        else functools.partial(
            compare.StdoutMatcher,
            test.output,
            tolerance=problem.float_tolerance,
            case_sensitive=problem.metadata.get("case_sensitive", True),
        ),
    }


def _status(reply: dict) -> dict:
    """The child's status line: untrusted, so only a well-formed dict counts."""
    try:
        status = json.loads(reply["status"])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return status if isinstance(status, dict) else {}


def _test_verdict(problem, test, reply, timeout, limits, run_checker) -> tuple[str, str]:
    status = _status(reply)
    code, sig = reply["exit_code"], reply["signal"]
    if reply["killed"] == "output" and reply.get("overflow") == "status":
        return "runtime_error", f"output limit exceeded (return value over {_return_mb(limits)} MiB)"
    if reply["killed"] == "output":
        return "runtime_error", f"output limit exceeded ({limits.output_limit_mb} MiB)"
    if status.get("status") == "output_limit":
        return "runtime_error", f"output limit exceeded (return value over {_return_mb(limits)} MiB)"
    if code == EXIT_COMPILE and status.get("status") == "compile_error":
        return "compile_error", str(status.get("error", ""))
    if test.kind == "assert" and status.get("status") == "test_error":
        raise ValueError(f"the assert test code fails by itself: {status.get('error', '')}")
    # The server's own CPU measurement (every process of the test, from its cgroup where there is
    # one); RLIMIT_CPU's SIGXCPU is a backstop set above the limit.
    if reply["killed"] == "cpu" or reply["cpu"] > timeout or sig == signal.SIGXCPU:
        return "timeout", f"CPU time limit {timeout:g} s exceeded"
    if reply["killed"] == "wall":
        return "timeout", f"wall-clock limit {limits.wall_timeout(timeout):.1f} s"
    if reply.get("oom") or code == EXIT_MEMORY or status.get("status") == "memory_limit":
        return "memory_limit", f"memory limit {limits.memory_mb} MiB"
    if code == EXIT_SETUP:
        return "runtime_error", "the sandbox could not start the program"
    if sig is not None:
        return "runtime_error", f"killed by {_signal_name(sig)}"
    if code != 0:
        return "runtime_error", str(status.get("error") or f"exit code {code}")
    tolerance = problem.float_tolerance
    if test.kind == "assert":  # check(candidate) ran in the program's process: see docs/datasets.md
        result = status.get("result")
        if status.get("status") != "ok" or not isinstance(result, list) or not result:
            return "runtime_error", "no verdict from the assert test"
        return ("passed", "") if result == ["pass"] else ("wrong_answer", f"assert test: {result[-1]}"[:300])
    if problem.call_based:
        result = status.get("result")
        if status.get("status") != "ok" or not isinstance(result, str):
            return "runtime_error", "no return value"
        actual = result
    elif problem.checker is not None:  # spooled as it arrived (channel.py)
        return _run_checker(problem, test, reply["stdout_sink"], run_checker)
    elif "stdout_sink" in reply:  # compared as it arrived (channel.py)
        ok, reason = reply["stdout_sink"]
        return ("passed", "") if ok else ("wrong_answer", reason)
    else:
        actual = reply["stdout"].decode("utf-8", errors="replace")
    if problem.checker is not None:
        return _run_checker(problem, test, actual, run_checker)
    if problem.call_based:
        ok, reason = compare.compare_return(test.output, actual, tolerance=tolerance)
    else:
        ok, reason = compare.compare_stdout(
            test.output, actual, tolerance=tolerance, case_sensitive=problem.metadata.get("case_sensitive", True)
        )
    return ("passed", "") if ok else ("wrong_answer", reason)


class _Spool:
    """A checker problem's stdout sink (channel.py): the bytes as they arrive, in memory up to
    SPOOL_MEMORY, then in an unlinked temporary file, read back by `CheckerInput`."""

    def __init__(self):
        self.file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)

    def feed(self, chunk: bytes) -> None:
        self.file.write(chunk)

    def finish(self) -> "_Spool":
        return self

    def close(self) -> None:
        self.file.close()


@dataclasses.dataclass
class CheckerInput:
    """The checker's stdin, the JSON of {"input", "expected", "output"}, as chunks: a spooled output
    is decoded (UTF-8, bad bytes replaced) and escaped a piece at a time, never whole. Each
    iteration starts over (a retry on a fresh server sends it again)."""

    test: TestCase
    output: "str | _Spool"
    chunk: int = 1 << 16

    def __iter__(self) -> Iterator[bytes]:
        yield json.dumps({"input": self.test.input, "expected": self.test.output})[:-1].encode() + b', "output": "'
        if isinstance(self.output, str):
            yield json.dumps(self.output)[1:-1].encode()
        else:
            self.output.file.seek(0)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            while data := self.output.file.read(self.chunk):
                yield json.dumps(decoder.decode(data))[1:-1].encode()
            yield json.dumps(decoder.decode(b"", final=True))[1:-1].encode()
        yield b'"}'


def _run_checker(problem, test, actual, run_checker) -> tuple[str, str]:
    """A problem's own checker, in its own sandbox (never the program's): check(input, expected, output)."""
    if run_checker is None:
        raise ValueError("problem has a checker but no checker runner was given")
    reply = run_checker(
        {
            "mode": "check",
            "code": problem.checker,
            "input": CheckerInput(test, actual),
            "func_name": None,
            "timeout": 10.0,
            "wall_timeout": 30.0,
            "memory_mb": 2048,
            "output_limit": 1 << 20,
        }
    )
    if reply.get("server_died"):
        raise ValueError(f"the checker's fork server died: {'; '.join(reply['server_died'])}")
    status = _status(reply) if "error" not in reply else {}
    result = status.get("result")
    if status.get("status") != "ok" or not isinstance(result, list) or len(result) != 2:
        raise ValueError(f"checker failed: {status.get('error') or reply.get('error') or 'no verdict'}")
    return ("passed", "") if result[0] is True else ("wrong_answer", f"checker: {result[1]}")


def _return_mb(limits: Limits) -> str:
    return f"{min(RETURN_LIMIT, limits.output_limit_mb << 20) / (1 << 20):g}"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
