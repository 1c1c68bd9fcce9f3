"""Judging throughput: the fork-server pool against one fresh `python3` per test, same batch.

    python benchmarks/judge_throughput.py [--programs 200] [--workers N]

The batch is small correct and wrong programs (stdin and call-based) over 5 tests each; both
designs stop a program at its first failing test and must agree on every verdict. Prints a table:
programs/s, tests/s and cost per test per worker (wall time x workers / tests run), what the
pool's sandbox was granted (`pool.isolation`), and the targets: per-test overhead <= 5 ms CPU,
throughput >= 10x one fresh python per test. Then the overhead with and without the syscall
filter and the per-program network namespace, and a flood row: the judge's peak RSS and CPU
for one program printing 60 MiB of two-letter tokens (`--before REV` measures a git revision
too, e.g. one from before streaming comparison).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

from microcoder_jax.judge import JudgePool, Problem, TestCase
from microcoder_jax.judge.compare import compare_stdout

# (name, input generator, reference, correct program, wrong program)
TASKS = [
    (
        "sum",
        lambda r: " ".join(str(r.randint(-99, 99)) for _ in range(r.randint(1, 20))),
        lambda s: str(sum(map(int, s.split()))),
        "print(sum(map(int, input().split())))",
        "print(sum(map(int, input().split())) + 1)",
    ),
    (
        "max",
        lambda r: " ".join(str(r.randint(-99, 99)) for _ in range(r.randint(1, 20))),
        lambda s: str(max(map(int, s.split()))),
        "import sys\nprint(max(map(int, sys.stdin.read().split())))",
        "import sys\nprint(min(map(int, sys.stdin.read().split())))",
    ),
    (
        "reverse",
        lambda r: "".join(r.choice("abcde") for _ in range(r.randint(1, 30))),
        lambda s: s[::-1],
        "print(open(0).read().strip()[::-1])",
        "print(open(0).read().strip())",
    ),
    (
        "fib",
        lambda r: str(r.randint(1, 500)),
        lambda s: str(_fib(int(s))),
        "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, (a + b) % 1000000007\nprint(a)",
        "n = int(input())\na, b = 0, 1\nfor _ in range(n - 1):\n    a, b = b, (a + b) % 1000000007\nprint(a)",
    ),
    (
        "sort",
        lambda r: " ".join(str(r.randint(0, 999)) for _ in range(r.randint(1, 50))),
        lambda s: " ".join(map(str, sorted(map(int, s.split())))),
        "import sys\nxs = sorted(map(int, sys.stdin.buffer.read().split()))\nsys.stdout.write(' '.join(map(str, xs)))",
        "import sys\nxs = list(map(int, sys.stdin.buffer.read().split()))\nprint(*xs)",
    ),
]


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % 1000000007
    return a


def make_batch(n_programs: int, tests_per_problem: int = 5, seed: int = 0):
    rng = random.Random(seed)
    problems = []
    for name, gen, ref, _, _ in TASKS:
        inputs = [gen(rng) for _ in range(tests_per_problem)]
        problems.append(Problem(name, [TestCase(i + "\n", ref(i) + "\n") for i in inputs]))
    pairs = []
    for k in range(n_programs):
        p = k % len(TASKS)
        pairs.append((problems[p], TASKS[p][3] if rng.random() < 0.6 else TASKS[p][4]))
    return [p for p, _ in pairs], [c for _, c in pairs]


def naive_judge(problems, codes, workers: int, timeout: float):
    """One fresh python3 per test, no sandbox; the design the pool replaces."""
    tmp = tempfile.mkdtemp(prefix="naive-")

    def judge_one(k):
        path = os.path.join(tmp, f"p{k}.py")
        with open(path, "w") as f:
            f.write(codes[k])
        passed, ran = True, 0
        for test in problems[k].tests:
            ran += 1
            try:
                proc = subprocess.run(
                    [sys.executable, path],
                    input=test.input.encode(),
                    capture_output=True,
                    timeout=timeout * 3 + 1,
                    cwd=tmp,
                )
            except subprocess.TimeoutExpired:
                passed = False
                break
            if proc.returncode != 0 or not compare_stdout(test.output, proc.stdout.decode(errors="replace"))[0]:
                passed = False
                break
        return passed, ran

    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        out = list(ex.map(judge_one, range(len(codes))))
    return [p for p, _ in out], sum(r for _, r in out)


def _cpu_of(pid: int) -> float:
    """CPU seconds of a process and its reaped children (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _server_processes(pool) -> list[int]:
    """The fork servers: the processes the pool started and the PID-namespace init under each."""
    pids = list(pool.server_pids)
    for pid in pool.server_pids:
        try:
            pids += [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
        except OSError:
            pass
    return pids


def pool_judge(problems, codes, workers: int, timeout: float, **options):
    """Verdicts, tests run, wall s, judge CPU s (all processes), and the same for a do-nothing batch."""
    with JudgePool(workers, timeout=timeout, **options) as pool:
        pool.judge(problems[:workers], codes[:workers])  # servers are up and warm, as in training
        servers = _server_processes(pool)

        def measured(ps, cs):
            cpu0 = time.process_time() + sum(map(_cpu_of, servers))
            start = time.perf_counter()
            results = pool.judge(ps, cs)
            wall = time.perf_counter() - start
            return results, wall, time.process_time() + sum(map(_cpu_of, servers)) - cpu0

        results, wall, cpu = measured(problems, codes)
        echo = Problem("echo", [TestCase(f"{i}\n", f"{i}\n") for i in range(5)])
        idle, idle_wall, idle_cpu = measured([echo] * len(codes), ["print(input())"] * len(codes))
        assert all(r.passed for r in idle)
        iso = pool.isolation
    ran = sum(r.tests_passed + (r.first_failure is not None) for r in results)
    return [r.passed for r in results], ran, wall, cpu, (idle_wall, idle_cpu, 5 * len(codes)), iso


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--before", help="a git revision whose flood row to print too")
    args = ap.parse_args(argv)
    problems, codes = make_batch(args.programs)

    fast, fast_ran, fast_wall, fast_cpu, (idle_wall, idle_cpu, idle_ran), iso = pool_judge(
        problems, codes, args.workers, args.timeout
    )
    cpu0 = time.process_time() + _children_cpu()
    start = time.perf_counter()
    slow, slow_ran = naive_judge(problems, codes, args.workers, args.timeout)
    slow_wall = time.perf_counter() - start
    slow_cpu = time.process_time() + _children_cpu() - cpu0
    assert fast == slow, "the two designs disagree on some verdicts"
    assert fast_ran == slow_ran

    n, w = len(codes), args.workers
    print(
        f"{n} programs ({sum(fast)} correct), {fast_ran} tests run, {w} workers, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"sandbox: {iso}")
    header = (
        f"{'design':<27}{'wall s':>7}{'programs/s':>11}{'tests/s':>9}{'CPU ms/prog':>12}"
        f"{'CPU ms/test':>12}{'wall ms/test':>13}"
    )
    print(header)
    print("-" * len(header))
    rows = [
        ("fork-server pool", fast_wall, fast_cpu, n, fast_ran),
        ("fresh python3 per test", slow_wall, slow_cpu, n, fast_ran),
        ("pool, print(input()) only", idle_wall, idle_cpu, n, idle_ran),
    ]
    for name, wall, cpu, progs, tests in rows:
        print(
            f"{name:<27}{wall:>7.2f}{progs / wall:>11.1f}{tests / wall:>9.1f}{cpu / progs * 1e3:>12.2f}"
            f"{cpu / tests * 1e3:>12.2f}{wall * w / tests * 1e3:>13.2f}"
        )
    print(
        f"speed-up {slow_wall / fast_wall:.1f}x (wall), {slow_cpu / fast_cpu:.1f}x (CPU). CPU counts every "
        f"process of the judge (pool threads, fork servers, programs); wall ms/test = wall x workers / "
        f"tests. The last row, a program that does nothing, is the per-test overhead."
    )
    overhead = idle_cpu / idle_ran * 1e3
    print(
        f"targets: per-test overhead {overhead:.2f} ms CPU (<= 5: {'met' if overhead <= 5 else 'MISSED'}); "
        f"throughput {slow_wall / fast_wall:.1f}x one fresh python per test "
        f"(>= 10: {'met' if slow_wall / fast_wall >= 10 else 'MISSED'})"
    )

    print("per-test overhead (print(input()) only, CPU ms/test of every process of the judge):")
    for label, options in (
        ("no filter, no per-program netns", {"seccomp": False, "program_net_ns": False}),
        ("filter only", {"program_net_ns": False}),
        ("per-program netns only", {"seccomp": False}),
        ("filter + per-program netns", {}),
    ):
        *_, (_, cpu, ran), granted = pool_judge(problems[:40], codes[:40], w, args.timeout, **options)
        print(
            f"  {label:<34}{cpu / ran * 1e3:>7.2f} ms  (seccomp {granted['seccomp']}, "
            f"program_net_ns {granted['program_net_ns']})"
        )
    print(f"flood: one program printing 60 MiB of 'ab ' tokens against expected '6' ({w} workers idle)")
    for label, tree in [("this tree", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))] + (
        [(f"--before {args.before}", _tree_at(args.before))] if args.before else []
    ):
        print(f"  {label:<34}{_flood_row(tree)}")


FLOOD = """
import json, resource, sys
from microcoder_jax.judge import JudgePool, Problem, TestCase
mib = lambda key: int(open('/proc/self/status').read().split(key + ':')[1].split()[0]) >> 10
six = Problem('six', [TestCase('', '6\\n')])
with JudgePool(1, timeout=10.0, memory_mb=1024, output_limit_mb=64) as pool:
    pool.judge([six], ['print(6)'])
    open('/proc/self/clear_refs', 'w').write('5')
    base, r0 = mib('VmRSS'), resource.getrusage(resource.RUSAGE_SELF)
    result = pool.judge([six], ["import sys\\nsys.stdout.write('ab ' * (20 << 20))"])[0]
    r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps([mib('VmHWM') - base, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  result.verdict]))
"""


def _flood_row(tree: str) -> str:
    """The judge's peak RSS above its baseline and its CPU for the flood, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", FLOOD], env=env, capture_output=True, text=True, cwd=tree, timeout=600)
    if out.returncode != 0:
        return f"failed: {out.stderr.strip().splitlines()[-1:]}"
    peak, cpu, verdict = __import__("json").loads(out.stdout.splitlines()[-1])
    return f"judge peak RSS +{peak} MiB, judge CPU {cpu:.2f} s, verdict {verdict}"


def _tree_at(rev: str) -> str:
    """The package as of git revision `rev`, unpacked into a temporary directory."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tmp = tempfile.mkdtemp(prefix="mcj-before-")
    archive = subprocess.run(
        ["git", "-C", root, "archive", rev, "microcoder_jax"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    return tmp


if __name__ == "__main__":
    main()
