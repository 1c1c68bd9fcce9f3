"""Per-step metrics: one JSON object per line in `<workdir>/metrics.jsonl`, TensorBoard scalars, tqdm.

The JSONL file is the record the plots and tests read. On resume, rows logged after the checkpoint
the run restarts from are dropped first, so each step appears once and the curves stay continuous.
"""
from __future__ import annotations

import json
import math
import os
from typing import Iterable

import numpy as np

# Shown in the progress bar, in this order (name in the record -> short label).
PROGRESS_KEYS = (("reward_mean", "reward"), ("pass_rate", "pass"), ("response_length_mean", "len"),
                 ("temperature", "T"), ("entropy", "ent"), ("grad_norm", "gnorm"))


def read_metrics(path: str) -> list[dict]:
    """All rows of a metrics.jsonl file (a torn last line from a killed run is ignored)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _plain(value):
    """A JSON-ready float/int/str from numpy or jax scalars; NaN/Inf become strings JSON accepts."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(np.asarray(value))
    return value if math.isfinite(value) else repr(value)


class MetricsWriter:
    """Appends step records to metrics.jsonl and TensorBoard; only the writing process should hold one."""

    def __init__(self, workdir: str, *, resume_step: int | None = None, tensorboard: bool = True):
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, "metrics.jsonl")
        kept = [r for r in read_metrics(self.path)
                if resume_step is not None and r.get("step", math.inf) <= resume_step]
        with open(self.path, "w", encoding="utf-8") as f:  # rewrite: drop rows past the checkpoint
            f.writelines(json.dumps(r) + "\n" for r in kept)
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"),
                                     purge_step=None if resume_step is None else resume_step + 1)

    def write(self, step: int, metrics: dict) -> dict:
        """Record one step; returns the plain record written."""
        record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items() if k != "step"}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
        return record

    def write_text(self, step: int, tag: str, text: str) -> None:
        """A text event (temperature decisions, evaluation tables) in TensorBoard."""
        if self._tb is not None:
            self._tb.add_text(tag, text, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def progress_postfix(record: dict, keys: Iterable[tuple[str, str]] = PROGRESS_KEYS) -> dict:
    """The progress bar's key numbers from a step record."""
    out = {}
    for key, label in keys:
        value = record.get(key)
        if isinstance(value, (int, float)):
            out[label] = f"{value:.3g}"
    return out
