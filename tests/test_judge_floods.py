"""Output floods and neighbours: the judge compares as the bytes arrive, in bounded memory; one
program's flood never changes another's verdict; abstract sockets die with their program."""

import os
import socket
import sys
import uuid

import pytest

from microcoder_jax.judge import JudgePool, Problem, TestCase
from microcoder_jax.judge.compare import TOKEN_SLACK, StdoutMatcher

SIX = Problem("six", [TestCase("", "6\n")])
LINUX = sys.platform.startswith("linux")
FLOODS = {  # 60 MiB each, inside the 64 MiB stdout cap
    "two_letter_tokens": "import sys\nsys.stdout.write('ab ' * (20 << 20))",
    "invalid_utf8": "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ' * (20 << 20))",
    "right_then_tokens": "import sys\nsys.stdout.write('6 ' + 'ab ' * (20 << 20))",
    "one_huge_token": "import sys\nsys.stdout.write('6' * (60 << 20))",
}


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=2, timeout=2.0, memory_mb=512, output_limit_mb=64, wall_factor=2.0) as p:
        yield p


def _status_mib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(key + ":")).split()[1]) >> 10


def _processes_of(uids) -> list:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if uid in uids:
            found.append(pid)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's peak-RSS reset")
@pytest.mark.parametrize("name", sorted(FLOODS))
def test_a_60_mib_flood_costs_the_judge_little_memory(pool, name):
    pool.judge([SIX], ["print(6)"])  # warm
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM (the peak) to the current RSS
    base = _status_mib("VmRSS")
    (result,) = pool.judge([SIX], [FLOODS[name]])
    peak = _status_mib("VmHWM") - base
    assert result.verdict == "wrong_answer", result
    assert peak <= 64, f"the judge grew by {peak} MiB"
    assert _processes_of(set(pool.sandbox_uids)) == []
    if name == "right_then_tokens":
        assert result.reason == f"test 0: expected 1 tokens, got {1 + (20 << 20)}"
    if name == "one_huge_token":
        assert "over" in result.reason


def test_a_huge_return_value_is_an_output_limit(pool):
    problem = Problem("r", [TestCase("1", "[1]", "functional")], func_name="f")
    # 54 MiB of JSON; a string, so serialising it stays far inside the CPU limit on a busy machine
    # (a list of 18M ints took 2 s of CPU there and became a timeout)
    (result,) = pool.judge([problem], ["def f(x):\n    return '0' * (54 << 20)"])
    assert result.verdict == "runtime_error" and "return value over 1 MiB" in result.reason, result


def test_a_flooding_neighbour_never_changes_a_verdict(pool):
    # The correct program prints 4 MiB: its pipe must be drained while the other floods.
    lines = 1 << 19
    big = Problem("big", [TestCase("", "1234567\n" * lines)])
    good = f"import sys\nsys.stdout.write('1234567\\n' * {lines})"
    programs = [(SIX, FLOODS["two_letter_tokens"]), (big, good), (SIX, FLOODS["right_then_tokens"]), (big, good)]
    results = pool.judge([p for p, _ in programs], [c for _, c in programs])
    assert [r.verdict for r in results] == ["wrong_answer", "passed", "wrong_answer", "passed"], results


@pytest.mark.skipif(not LINUX, reason="abstract sockets are Linux")
def test_an_abstract_socket_kept_alive_by_a_descriptor_cycle_is_gone_next_test(pool):
    if not pool.isolation["program_net_ns"]:
        pytest.skip("no network namespace per program here")
    name = f"\0mcj-{uuid.uuid4().hex[:12]}"
    # A listening abstract socket sent (SCM_RIGHTS) into a socket pair that is itself in flight:
    # only the kernel's socket collector frees it, some time after the program is gone.
    holder = (
        "import socket\n"
        f"s = socket.socket(socket.AF_UNIX)\ns.bind({name!r})\ns.listen()\n"
        "a, b = socket.socketpair()\nsocket.send_fds(a, [b'x'], [s.fileno(), a.fileno(), b.fileno()])\n"
        "socket.send_fds(b, [b'y'], [a.fileno(), b.fileno()])\nprint(6)"
    )
    looker = (
        "import socket\nc = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    c.connect({name!r})\n    print('reached')\nexcept OSError:\n"
        f"    t = socket.socket(socket.AF_UNIX)\n    t.bind({name!r})\n    print(6)"
    )
    results = pool.judge([SIX, SIX, SIX], [holder, looker, looker])
    assert [r.verdict for r in results] == ["passed"] * 3, results
    with open("/proc/net/unix") as f:  # and not on the host's network namespace
        assert name[1:] not in f.read()
    c = socket.socket(socket.AF_UNIX)
    with pytest.raises(OSError):
        c.connect(name)


def test_matcher_agrees_whatever_the_chunking():
    expected = "1 2.5 abc\n" * 1000
    actual = ("1  2.5000001\tabc\r\n" * 1000).encode()
    for size in (1, 7, 4096, len(actual)):
        m = StdoutMatcher(expected)
        for i in range(0, len(actual), size):
            m.feed(actual[i : i + size])
        assert m.finish() == (True, "")
    m = StdoutMatcher(expected)
    m.feed(actual[:-5] + b"abd\r\n")
    ok, reason = m.finish()
    assert not ok and reason.startswith("token 3000:")


def test_matcher_holds_at_most_one_token_past_the_expected_one():
    m = StdoutMatcher("6\n")
    for _ in range(64):
        m.feed(b"6" * (1 << 20))
        assert len(m._tail) <= 1 + TOKEN_SLACK + (1 << 20)
    ok, reason = m.finish()
    assert not ok and "over" in reason
