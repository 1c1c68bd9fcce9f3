"""Picking rows out of a run's metrics.jsonl: the RL steps', the evaluations', one metric per step."""

from __future__ import annotations

import math

import numpy as np


def training_rows(rows) -> list[dict]:
    """The RL steps' rows of a metrics.jsonl (without the evaluations' rows)."""
    return [r for r in rows if "reward_mean" in r]


def eval_rows(rows) -> list[dict]:
    """The evaluations' rows of a metrics.jsonl, in step order."""
    return sorted((r for r in rows if "eval_pass@1" in r), key=lambda r: r["step"])


def series(rows, key) -> np.ndarray:
    """A metric per step (NaN where missing)."""
    out = [r.get(key) for r in rows]
    return np.array([v if isinstance(v, (int, float)) and math.isfinite(v) else np.nan for v in out], float)
