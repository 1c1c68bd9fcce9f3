"""Verify: a problem's reference solutions must pass its own tests under our evaluator.

A reference that fails means broken tests (wrong expected outputs, a lost checker, a time limit our
judge cannot meet) or a broken reference; either way the problem would hand the policy wrong
rewards, so it is dropped (or only flagged, by config). Problems without references are kept
unverified unless the config requires one.
"""
from __future__ import annotations

import logging
from typing import Sequence

from microcoder_jax.data.pipeline.process import solutions_of
from microcoder_jax.evaluator.problems import Problem

log = logging.getLogger(__name__)


def judge_references(problems: Sequence[Problem], max_references: int, pool, chunk: int = 512) -> list[list]:
    """JudgeResults of up to `max_references` reference solutions of each problem (in order)."""
    pairs = [(i, code) for i, p in enumerate(problems) for code in solutions_of(p)[:max_references]]
    results: list[list] = [[] for _ in problems]
    for start in range(0, len(pairs), chunk):
        part = pairs[start : start + chunk]
        verdicts = pool.judge([problems[i] for i, _ in part], [code for _, code in part])
        for (i, _), result in zip(part, verdicts):
            results[i].append(result)
        log.info("verified %d/%d reference solutions", start + len(part), len(pairs))
    return results


def verify_problems(problems: Sequence[Problem], cfg, pool) -> tuple[list[Problem], dict[str, int], list[dict]]:
    """Judge the references and apply the policy in `cfg` (the config's `verify` block).

    Sets `metadata["verified"]` to True (passed), False (failed) or None (no reference).
    Returns (kept problems, counts, one failure record per failed problem).
    """
    counts = {"verified": 0, "failed": 0, "no_reference": 0, "dropped": 0}
    kept, failures = [], []
    for problem, results in zip(problems, judge_references(problems, cfg.max_references, pool)):
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
        failures.append({
            "question_id": problem.question_id,
            "verdict": getattr(first, "verdict", ""),
            "reason": str(getattr(first, "reason", ""))[:500],
            "first_failure": getattr(first, "first_failure", None),
        })
        if cfg.on_failure == "drop":
            counts["dropped"] += 1
        else:
            kept.append(problem)
    return kept, counts, failures
