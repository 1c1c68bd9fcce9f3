"""Per-step metrics: one JSON object per line in `<workdir>/metrics.jsonl`, TensorBoard scalars, tqdm.

The JSONL file is the record the plots and tests read. On resume, rows logged after the checkpoint
the run restarts from are dropped first, so each step appears once and the curves stay continuous.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Iterable

import numpy as np

# Shown in the progress bar, in this order (name in the record -> short label).
PROGRESS_KEYS = (("reward_mean", "reward"), ("pass_rate", "pass"), ("response_length_mean", "len"),
                 ("temperature", "T"), ("entropy", "ent"), ("grad_norm", "gnorm"))


# Step metrics stored under another name in the row: the step's reward_mean is after the
# truncation rule's shaping (soft overlong), the row's reward_mean is the judge's reward.
RENAMED_STEP_METRICS = {"reward_mean": "reward_shaped_mean", "entropy": "policy_entropy"}


def read_metrics(path: str) -> list[dict]:
    """All rows of a metrics.jsonl file (a torn last line from a killed run is ignored)."""
    from microcoder_jax.data.jsonl import read_jsonl

    return [row for _, row in read_jsonl(path, missing_ok=True) if isinstance(row, dict)]


def step_record(step_metrics: dict, rollout, div: dict, *, signal: str, temperature: float,
                next_temperature: float, times: dict, verdicts: dict, ds_stats: dict,
                generations: int, t_step: float) -> dict:
    """The metrics.jsonl row of one step, from the step's metrics and the Rollout it trained on."""
    m = step_metrics
    record = {
        "reward_mean": float(np.mean(rollout.rewards)),
        "pass_rate": float(np.mean(rollout.passed)),
        "response_length_mean": float(np.mean(rollout.response_lengths)),
        "truncation_rate": float(np.mean(rollout.truncated)),
        "masked_fraction": float(m.get("frac_masked", 0.0)) + float(m.get("frac_removed", 0.0)),
        "repetition_rate": float(m.get("frac_repeating", 0.0)),
        "diversity": div.get(signal, float("nan")),
        "temperature": temperature,
        "next_temperature": next_temperature,
        "entropy": div["entropy"],
        "clip_fraction": m.get("clip_frac"),
        "no_code_rate": float(np.mean(rollout.no_code)),
        "time_sample_s": times["sample"],
        "time_judge_s": times["judge"],
        "time_judge_wait_s": times["judge_wait"],
        "time_train_s": times["train"],
        "time_step_s": time.perf_counter() - t_step,
        "generations": generations,
    }
    for k, v in m.items():
        record.setdefault(RENAMED_STEP_METRICS.get(k, k), v)
    record.update({f"div/{k}": v for k, v in div.items()})
    total = max(sum(verdicts.values()), 1)
    record.update({f"verdict/{k}": v / total for k, v in verdicts.items()})
    record.update(ds_stats)
    record["rows"] = len(rollout.rewards)
    return record


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
