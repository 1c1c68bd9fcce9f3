"""Judge a file of solutions against a file of problems.

    python -m microcoder_jax.judge --problems P.jsonl --solutions S.jsonl --out R.jsonl \\
        [--workers N] [--timeout S] [--reward NAME]

S.jsonl rows are {"question_id", "code"} or {"question_id", "response"} (the program is then
extracted from the model response); several rows may share a question; other keys are ignored.
R.jsonl gets one row per solution, in input order, written as results arrive, so an interrupted run
keeps everything judged so far. A row that cannot be judged (bad JSON, unknown question_id) gets
the verdict `judge_error` instead of stopping the run.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import time

from microcoder_jax.data.jsonl import BadLine, read_jsonl
from microcoder_jax.judge.extract import extract_code
from microcoder_jax.judge import rewards
from microcoder_jax.judge.program import VERDICTS, JudgeResult, judge_error
from microcoder_jax.judge.pool import JudgePool
from microcoder_jax.data.problems import load_problems


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m microcoder_jax.judge", description=(__doc__ or "").split("\n")[0])
    p.add_argument(
        "--problems", required=True, help="JSONL, JSON or Parquet rows: LiveCodeBench, APPS/TACO or our own schema"
    )
    p.add_argument("--solutions", required=True, help="JSONL rows: question_id and code or response")
    p.add_argument("--out", required=True, help="JSONL results, one per solution, in input order")
    p.add_argument("--workers", type=int, default=None, help="fork servers (default: one per core)")
    p.add_argument("--timeout", type=float, default=6.0, help="CPU seconds per test (default 6)")
    p.add_argument(
        "--memory-mb",
        type=int,
        default=1024,
        help="memory limit per program: resident memory where the judge has cgroups, else address space (default 1024)",
    )
    p.add_argument(
        "--reward",
        choices=sorted(rewards.REWARDS),
        default="all",
        help="the reward written per row (judge/rewards.py): all = 1 iff every test passes (judging stops "
        "at the first failure), fraction = share of tests passed (every test runs); fraction_runs and "
        "fraction_reads are shaped rewards (their docstrings)",
    )
    p.add_argument("--skip-malformed", action="store_true", help="skip malformed problem rows")
    return p.parse_args(argv)


def _read_solutions(path: str, problems: dict) -> list[tuple]:
    """(problem, code, row, None) per good row; (problem or None, None, row, reason) per bad one."""
    rows = []
    for line_no, row in read_jsonl(path):
        if isinstance(row, BadLine):
            rows.append((None, None, {}, f"line {line_no + 1}: invalid JSON ({row.error})"))
            continue
        if not isinstance(row, dict):
            rows.append((None, None, {}, f"line {line_no + 1}: not a JSON object"))
            continue
        qid = str(row.get("question_id"))
        problem = problems.get(qid)
        if problem is None:
            rows.append((None, None, row, f"line {line_no + 1}: unknown question_id {qid!r}"))
        elif "code" in row:
            rows.append((problem, row["code"], row, None))
        elif "response" in row:
            rows.append((problem, extract_code(row["response"]), row, None))
        else:
            rows.append((problem, None, row, f"line {line_no + 1}: neither 'code' nor 'response'"))
    return rows


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def main(argv=None) -> int:
    args = _parse_args(argv)
    for name in ("solutions", "problems"):  # checked before anything is opened for writing
        if _same_file(args.out, getattr(args, name)):
            print(
                f"error: --out {args.out} is the --{name} file: it would be overwritten; "
                "write the results somewhere else",
                file=sys.stderr,
            )
            return 2
    for name in ("problems", "solutions"):
        path = getattr(args, name)
        if not os.path.exists(path) or os.path.isdir(path):
            what = "a directory, not a file" if os.path.isdir(path) else "no such file"
            print(f"error: --{name} {path}: {what}", file=sys.stderr)
            return 2
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        print(f"error: --out {args.out}: no such directory {folder}; create it or write elsewhere", file=sys.stderr)
        return 2
    try:
        problems = {p.question_id: p for p in load_problems(args.problems, skip_malformed=args.skip_malformed)}
        rows = _read_solutions(args.solutions, problems)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    todo = [i for i, (_, _, _, err) in enumerate(rows) if err is None]
    results: dict[int, JudgeResult] = {
        i: judge_error(problem, err) for i, (problem, _, _, err) in enumerate(rows) if err is not None
    }
    start = time.monotonic()
    # Programs must not read the expected outputs from the problem file, nor the results (which
    # quote expected tokens): the results file exists first, so that the servers can hide it.
    with (
        open(args.out, "w", encoding="utf-8") as out,
        JudgePool(
            args.workers, timeout=args.timeout, memory_mb=args.memory_mb, hide=[args.problems, args.solutions, args.out]
        ) as pool,
    ):
        reward = rewards.lookup(args.reward)
        handle = pool.submit([rows[i][0] for i in todo], [rows[i][1] for i in todo], every_test=reward.every_test)
        written = _write_ready(out, rows, results, 0, reward)
        progress = _progress(len(rows))
        progress.update(len(results))
        for j, result in handle.as_completed():
            results[todo[j]] = result
            progress.update(1)
            written = _write_ready(out, rows, results, written, reward)
        progress.close()
    _summary(rows, results, time.monotonic() - start, reward, pool.workers)
    print(f"results: {args.out} ({len(rows)} rows, one per solution, in input order)")
    return 0


def _value(reward, row: tuple, result: JudgeResult) -> float:
    """The row's reward (NaN for a judge_error); the response text is the row's response, else its code."""
    problem, code, record, _ = row
    return reward(problem, str(record.get("response", code or "")), result)


def _write_ready(out, rows, results, written: int, reward) -> int:
    """Write every result whose turn has come (input order), flushing so nothing is lost."""
    while written < len(rows) and written in results:
        problem, _, row, _ = rows[written]
        result = results[written]
        qid = problem.question_id if problem is not None else row.get("question_id")
        value = _value(reward, rows[written], result)  # NaN for a judge_error: no reward, written as null
        record = {
            "index": written,
            "question_id": qid,
            **result.to_json(),
            "reward": None if math.isnan(value) else value,
        }
        out.write(json.dumps(record) + "\n")
        written += 1
    out.flush()
    return written


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="prog", file=sys.stderr, disable=None, dynamic_ncols=True)


def _summary(rows, results: dict, seconds: float, reward, workers: int) -> None:
    n = len(results)
    counts = collections.Counter(r.verdict for r in results.values())
    values = (_value(reward, rows[i], r) for i, r in results.items())
    judged = [v for v in values if not math.isnan(v)]  # judge errors: no reward
    mean_reward = sum(judged) / len(judged) if judged else 0.0
    lines = [
        f"{'programs':<16}{n:>10}",
        f"{'pass rate':<16}{(counts['passed'] / n if n else 0):>10.4f}",
        f"{'mean reward':<16}{mean_reward:>10.4f}  ({reward.name}; judge errors left out)",
        *(f"{'  ' + v:<16}{counts[v]:>10}" for v in VERDICTS if counts[v]),
        f"{'programs/s':<16}{n / seconds if seconds else 0:>10.1f}  ({workers} workers, {seconds:.1f} s)",
    ]
    print("\n".join(lines))
