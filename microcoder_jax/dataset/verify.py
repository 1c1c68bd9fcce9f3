"""Verify: a problem's reference solutions must pass its own tests under our judge.

A reference that fails means broken tests (wrong expected outputs, a lost checker, a time limit our
judge cannot meet) or a broken reference; either way the problem would hand the policy wrong
rewards, so it is dropped (or only flagged, by config). Problems without references are kept
unverified unless the config requires one.

Verdicts are appended to a cache file as they arrive, keyed by a digest of everything that decides
them (program, tests, entry point, checker, tolerance, limits), so an interrupted or re-configured
verify judges only what it has not judged before.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import NamedTuple, Sequence

from microcoder_jax.data.jsonl import read_jsonl
from microcoder_jax.dataset.process import solutions_of
from microcoder_jax.data.problems import Problem

log = logging.getLogger(__name__)


class Verdict(NamedTuple):
    """What verify keeps of a JudgeResult."""

    passed: bool
    verdict: str
    reason: str
    first_failure: int | None


def verdict_key(problem: Problem, code: str, limits: tuple) -> str:
    """Digest of the inputs that decide a verdict; equal keys give equal verdicts."""
    spec = [
        code,
        [(t.input, t.output, t.kind) for t in problem.tests],
        problem.func_name,
        problem.checker,
        problem.float_tolerance,
        problem.metadata.get("timeout"),
        list(limits),
    ]
    if problem.metadata.get("stdin_harness"):  # (absent from older keys, so their cache stays valid)
        spec.append(problem.metadata["stdin_harness"])
    return hashlib.sha1(json.dumps(spec).encode()).hexdigest()


def _load_cache(path: str | None) -> dict[str, Verdict]:
    cache: dict[str, Verdict] = {}
    if path:
        for _, row in read_jsonl(path, missing_ok=True):
            try:
                cache[row["key"]] = Verdict(*row["verdict"])
            except (KeyError, TypeError):
                continue  # a line cut by a crash (BadLine) or not ours
    return cache


def judge_references(
    problems: Sequence[Problem],
    max_references: int,
    pool,
    *,
    cache_path: str | None = None,
    limits: tuple = (),
    chunk: int = 512,
) -> list[list[Verdict]]:
    """Verdicts of up to `max_references` reference solutions of each problem (in order), judging
    only the pairs missing from the cache and appending their verdicts to it chunk by chunk."""
    cache = _load_cache(cache_path)
    pairs = [
        (i, code, verdict_key(p, code, limits))
        for i, p in enumerate(problems)
        for code in solutions_of(p)[:max_references]
    ]
    todo = [pair for pair in pairs if pair[2] not in cache]
    if len(todo) < len(pairs):
        log.info("verify: %d of %d verdicts cached", len(pairs) - len(todo), len(pairs))
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        judged = pool.judge([problems[i] for i, _, _ in part], [code for _, code, _ in part])
        fresh = {
            key: Verdict(r.passed, r.verdict, str(r.reason)[:500], r.first_failure)
            for (_, _, key), r in zip(part, judged)
        }
        cache.update(fresh)
        if cache_path:
            with open(cache_path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps({"key": k, "verdict": list(v)}) + "\n" for k, v in fresh.items())
        log.info("verified %d/%d reference solutions", start + len(part), len(todo))
    results: list[list[Verdict]] = [[] for _ in problems]
    for i, _, key in pairs:
        results[i].append(cache[key])
    return results


def verify_problems(
    problems: Sequence[Problem], cfg, pool, *, cache_path: str | None = None, limits: tuple = ()
) -> tuple[list[Problem], dict[str, int], list[dict]]:
    """Judge the references and apply the policy in `cfg` (the config's `verify` block).

    Sets `metadata["verified"]` to True (passed), False (failed) or None (no reference).
    Returns (kept problems, counts, one failure record per failed problem).
    """
    counts = {"verified": 0, "failed": 0, "no_reference": 0, "dropped": 0}
    kept, failures = [], []
    verdicts = judge_references(problems, cfg.max_references, pool, cache_path=cache_path, limits=limits)
    for problem, results in zip(problems, verdicts):
        if not results:
            problem.metadata["verified"] = None
            counts["no_reference"] += 1
            if cfg.require_reference:
                counts["dropped"] += 1
                continue
            kept.append(problem)
            continue
        passed = [r.passed for r in results]
        ok = all(passed) if cfg.require == "all" else any(passed)
        problem.metadata["verified"] = ok
        problem.metadata["references_passed"] = f"{sum(passed)}/{len(passed)}"
        if ok:
            counts["verified"] += 1
            kept.append(problem)
            continue
        counts["failed"] += 1
        first = next(r for r in results if not r.passed)
        failures.append({"question_id": problem.question_id, **first._asdict()})
        if cfg.on_failure == "drop":
            counts["dropped"] += 1
        else:
            kept.append(problem)
    return kept, counts, failures
