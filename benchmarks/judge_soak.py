"""The judge pool under sustained load: memory, descriptors, temporary files and throughput over time.

    nice python benchmarks/judge_soak.py [--runs 200000] [--workers 2] [--every 30]
        [--json docs/experiments_data/judge_soak.json] [--plot docs/judge_soak.png]

Judges a fixed mix of programs (passing, wrong, crashing, timing-out and flooding) on problems of
many tests in "fraction" mode (every test runs), until `--runs` program runs (tests) are done.
Every `--every` seconds it samples the judge's RSS, the fork servers' RSS, the judge's open
descriptors, the entries under the pool's temporary root and the runs per second since the last
sample; at the end it closes the pool and counts what is left there. Prints the table and a
verdict on the goals: flat memory and descriptors after warm-up (the first 20% of the runs), no
files left after close, throughput at the end within 10% of the start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from microcoder_jax.judge import JudgePool, Problem, TestCase

TESTS = 40  # tests per problem: every test is one program run
PROGRAMS = {  # name -> (code, share of the programs)
    "passing": ("a, b = map(int, input().split())\nprint(a + b)", 0.45),
    "wrong": ("a, b = map(int, input().split())\nprint(a - b)", 0.2),
    "crashing": ("a, b = map(int, input().split())\nprint(a // (b - b))", 0.2),
    "flooding": ("import sys\nwhile True:\n    sys.stdout.write('7' * 65536)", 0.1),
    "timing_out": ("while True:\n    pass", 0.05),
}
GOALS = {"memory_mib": 8.0, "fds": 0, "throughput": 0.10}  # growth allowed after warm-up


def problem(tests: int) -> Problem:
    return Problem("add", [TestCase(f"{i} {i + 1}\n", f"{2 * i + 1}\n") for i in range(tests)])


def mix(batch: int) -> list[str]:
    """`batch` programs in the fixed proportions, interleaved."""
    codes = []
    for code, share in PROGRAMS.values():
        codes += [code] * max(1, round(share * batch))
    return [codes[(i * 7) % len(codes)] for i in range(len(codes))]


def rss_mib(pid: int | str) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def entries(root: str) -> int:
    """Files and directories under the judge's temporary root that belong to the judge."""
    count = 0
    for name in os.listdir(root):
        if name.startswith("mcj-judge-"):
            count += 1
            for _, dirs, files in os.walk(os.path.join(root, name)):
                count += len(dirs) + len(files)
    return count


def soak(runs: int, workers: int, every: float, tests: int = TESTS, timeout: float = 0.05, log=print) -> dict:
    """Judge the mix until `runs` tests have run; the samples and what was left after close."""
    root = tempfile.mkdtemp(prefix="judge-soak-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    codes = mix(20)
    prob = problem(tests)
    samples, done, verdicts = [], 0, {}
    pool = JudgePool(workers=workers, timeout=timeout, memory_mb=256, output_limit_mb=1, wall_factor=4.0, tmpdir=root)
    try:
        t0 = last_t = time.perf_counter()
        last_done = 0
        handle = pool.submit([prob] * len(codes), codes, every_test=True)
        while done < runs:
            nxt = pool.submit([prob] * len(codes), codes, every_test=True)  # keep the pool busy
            for r in handle.result():
                done += r.tests_total
                verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
            handle = nxt
            now = time.perf_counter()
            if now - last_t >= every or done >= runs:
                servers = pool.server_pids + [
                    s._proc.pid for s in pool._checkers if s is not None and s._proc is not None
                ]
                row = {
                    "t_s": round(now - t0, 1),
                    "runs": done,
                    "runs_per_s": round((done - last_done) / (now - last_t), 1),
                    "judge_rss_mib": round(rss_mib("self"), 1),
                    "servers_rss_mib": round(sum(rss_mib(p) for p in servers), 1),
                    "fds": len(os.listdir("/proc/self/fd")),
                    "tmp_entries": entries(root),
                    "threads": len(os.listdir("/proc/self/task")),
                }
                samples.append(row)
                log(" ".join(f"{k}={v}" for k, v in row.items()))
                last_t, last_done = now, done
        handle.result()
    finally:
        pool.close()
    left = entries(root)
    try:
        os.rmdir(root)
    except OSError:
        pass
    return {
        "samples": samples,
        "left_after_close": left,
        "verdicts": verdicts,
        "workers": workers,
        "tests_per_program": tests,
        "timeout_s": timeout,
    }


def growth(result: dict, warmup: float = 0.2) -> dict:
    """Growth after warm-up (the first `warmup` of the runs), last tenth of the kept samples vs
    first tenth: memory as the max of each, descriptors and temp entries as the min (a sample
    also counts the pipes and work directories of the runs in flight; a leak raises the min);
    throughput end vs start, as a ratio of the means."""
    s = result["samples"]
    total = s[-1]["runs"]
    kept = [r for r in s if r["runs"] >= warmup * total] or s[-1:]
    k = max(1, len(kept) // 10)
    head, tail = kept[:k], kept[-k:]

    def g(key):  # noqa: E306
        pick = max if key.endswith("mib") else min
        return pick(r[key] for r in tail) - pick(r[key] for r in head)

    rate = lambda rows: sum(r["runs_per_s"] for r in rows) / len(rows)  # noqa: E731
    return {
        "judge_rss_mib": g("judge_rss_mib"),
        "servers_rss_mib": g("servers_rss_mib"),
        "fds": g("fds"),
        "tmp_entries": g("tmp_entries"),
        "throughput_ratio": rate(tail) / rate(head) if rate(head) else float("nan"),
        "left_after_close": result["left_after_close"],
    }


def failures(g: dict) -> list[str]:
    """The goals a soak missed (empty: all met)."""
    bad = []
    for key in ("judge_rss_mib", "servers_rss_mib"):
        if g[key] > GOALS["memory_mib"]:
            bad.append(f"{key} grew {g[key]:.1f} MiB after warm-up")
    if g["fds"] > GOALS["fds"]:
        bad.append(f"open descriptors grew by {g['fds']}")
    if g["tmp_entries"] > 0 or g["left_after_close"]:
        bad.append(f"files under the temp root grew by {g['tmp_entries']}, {g['left_after_close']} left after close")
    if not abs(g["throughput_ratio"] - 1) <= GOALS["throughput"]:
        bad.append(f"throughput end/start {g['throughput_ratio']:.2f}")
    return bad


def table(result: dict, rows: int = 12) -> str:
    s = result["samples"]
    pick = sorted({round(i * (len(s) - 1) / (rows - 1)) for i in range(rows)}) if len(s) > rows else range(len(s))
    keys = ["t_s", "runs", "runs_per_s", "judge_rss_mib", "servers_rss_mib", "fds", "tmp_entries", "threads"]
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(str(s[i][k]) for k in keys) + " |" for i in pick]
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["samples"]
    x = [r["runs"] / 1000 for r in s]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(x, [r["judge_rss_mib"] for r in s], label="judge")
    axes[0].plot(x, [r["servers_rss_mib"] for r in s], label=f"{result['workers']} fork servers (sum)")
    axes[0].set(ylabel="RSS (MiB)", title="memory")
    axes[0].legend()
    axes[1].plot(x, [r["fds"] for r in s], label="judge's open fds")
    axes[1].plot(x, [r["tmp_entries"] for r in s], label="entries under the temp root")
    axes[1].set(title="descriptors and files")
    axes[1].legend()
    axes[2].plot(x, [r["runs_per_s"] for r in s])
    axes[2].set(ylabel="program runs / s", title="throughput")
    for ax in axes:
        ax.set_xlabel("program runs (thousands)")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--json", default=None, help="write the samples here")
    ap.add_argument("--plot", default=None, help="write the plot here (PNG)")
    args = ap.parse_args(argv)
    result = soak(args.runs, args.workers, args.every, log=lambda m: print(m, flush=True))
    g = growth(result)
    result["growth"] = g
    print(table(result))
    print(json.dumps({"verdicts": result["verdicts"], **g}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(result, args.plot)
    bad = failures(g)
    print("goals met" if not bad else "goals missed: " + "; ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
