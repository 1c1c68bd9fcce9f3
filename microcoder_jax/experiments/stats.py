"""Paired differences between arms, seed by seed, with a Student-t interval of their mean."""

from __future__ import annotations

import math

import numpy as np


def interval(d) -> dict:
    """Mean, sign counts and a 95% Student-t interval of the mean of paired differences `d`, one a
    seed (the interval is None below 2 seeds)."""
    from scipy import stats as scipy_stats

    d = np.asarray(d, float)
    out: dict = {"seeds": len(d), "positive": int((d > 0).sum()), "negative": int((d < 0).sum())}
    out["mean"] = float(d.mean()) if len(d) else float("nan")
    out["ci95"] = None
    if len(d) >= 2:
        half = float(scipy_stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
        out["ci95"] = [out["mean"] - half, out["mean"] + half]
    return out


def paired(summary: dict, arm: str, baseline: str, quantity: str, part: str = "end") -> dict:
    """`arm` minus `baseline` in one quantity, seed by seed (the same seed: the same warm start and
    prompts): how many seeds the difference is positive / negative in, its mean, and a 95%
    Student-t confidence interval of the mean difference (None below 2 seeds)."""
    a, b = summary["arms"][arm]["seeds"], summary["arms"][baseline]["seeds"]
    both = sorted(set(a) & set(b), key=int)
    return interval([a[s][part][quantity] - b[s][part][quantity] for s in both])


def comparisons(summary: dict, columns, pairs=()) -> dict:
    """Every arm against the first (the baseline), then each (arm, baseline) of `pairs`, paired by
    seed, in each of `columns` (end values)."""
    names = list(summary["arms"])
    wanted = [(arm, names[0]) for arm in names[1:]] + [p for p in pairs if p[1] != names[0]]
    return {f"{arm} - {base}": {c: paired(summary, arm, base, c) for c in columns} for arm, base in wanted}
