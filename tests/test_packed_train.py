"""End to end with rl.packing on: the shortened demo learns, both passes on packed rows."""

import os

import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.rl import packing
from microcoder_jax.trainer import loop as train
from microcoder_jax.trainer.metrics import read_metrics

pytestmark = pytest.mark.slow  # one shortened demo run (~1-2 min on 2 idle cores)


def test_demo_learns_with_packing(tmp_path, monkeypatch):
    c = config_lib.demo_config()
    c.train.steps, c.train.progress, c.train.checkpoint_every = 30, False, 0
    c.rl.packing = True
    plans = []
    real_plan = packing.plan
    monkeypatch.setattr(packing, "plan", lambda *a, **k: plans.append(real_plan(*a, **k)) or plans[-1])
    train.train(c, str(tmp_path), log_fn=lambda *a: None)
    rows = read_metrics(os.path.join(tmp_path, "metrics.jsonl"))
    assert [r["step"] for r in rows] == list(range(1, 31))
    rewards = np.array([r["reward_mean"] for r in rows])
    first, last = rewards[:10].mean(), rewards[-10:].mean()
    assert first > 0.05 and last >= 1.6 * first, (first, last)
    assert len(plans) == 60  # each step packed its log-prob pass and its train step
    assert np.mean([packing.useful_fraction(p) for p in plans]) > 0.5
    assert all(np.isfinite(r["loss"]) for r in rows)
