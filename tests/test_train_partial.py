"""Partial rollouts end to end on a shortened demo (train.partial_rollouts, trainer/partial.py): the
batches carry rows across weight updates and log it, stale groups are dropped at the bound, and a
run stopped at a checkpoint resumes to the same rows and params (the groups waiting are saved,
never lost or trained twice). Plus the config rules and is_correction=auto (quick)."""

import os
import signal

import jax
import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.rl.config import RLConfig
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.trainer.config import TrainConfig
from microcoder_jax.trainer import loop as train
from microcoder_jax.trainer import preemption
from microcoder_jax.trainer.pipeline import INFLIGHT_DIR
from short_demo import short_demo, untimed_rows

STEPS = 5


def demo(**overrides):
    return short_demo(
        STEPS,
        **{
            "sampling.engine": "paged",
            "train.partial_rollouts": True,
            "train.checkpoint_every": 2,  # settles (and saves the waiting groups) at steps 2 and 4
            **overrides,
        },
    )


def run(workdir, **overrides):
    return train.train(demo(**overrides), str(workdir), log_fn=lambda *a: None)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("partial")
    return workdir, run(workdir).params


@pytest.mark.slow
def test_rows_carry_across_updates_and_are_logged(first):
    got = [r for r in untimed_rows(first[0]) if "reward_mean" in r]
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    for r in got:  # a batch made only of groups that finished while the session settled decodes nothing
        u = float(r["slot_utilisation"])  # NaN is written as a string
        assert (0.0 < u <= 1.0) if r["decode_steps"] else np.isnan(u)
        assert 0 <= r["token_age_max"] <= TrainConfig().max_staleness
        assert r["is_weight_mean"] > 0  # is_correction=auto: tis
    assert got[0]["token_age_max"] == 0  # the first batch: one version
    assert sum(r["groups_carried"] for r in got) > 0  # rows continued under newer weights
    assert any(r["stale_token_frac"] > 0 for r in got)
    # train.partial_recompute (the default): rows carried into a step prefill again with its weights
    # (none after a step that settled for its checkpoint)
    assert got[0]["recomputed_tokens"] == 0 and any(r["recomputed_tokens"] > 0 for r in got[1:])


@pytest.mark.slow
def test_stopped_at_a_checkpoint_resumes_exactly(first, tmp_path):
    def on_step(step, record):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the guard checkpoints step 2 and stops

    with pytest.raises(preemption.Preempted):
        train.train(demo(), str(tmp_path), log_fn=lambda *a: None, on_step=on_step)
    saved = os.listdir(os.path.join(tmp_path, INFLIGHT_DIR, "step_00000002"))
    assert sorted(saved) == ["carry.json", "carry.npz"]  # groups finished while the session settled
    params = run(tmp_path).params
    assert untimed_rows(tmp_path) == untimed_rows(first[0])
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(first[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_groups_older_than_the_bound_are_dropped_with_kv_kept(tmp_path):
    run(tmp_path, **{"train.max_staleness": 1, "train.checkpoint_every": 0, "train.partial_recompute": False})
    got = [r for r in untimed_rows(tmp_path) if "reward_mean" in r]
    assert all(r["token_age_max"] <= 1 for r in got)
    assert sum(r["groups_dropped_stale"] for r in got) > 0
    assert all(r["recomputed_tokens"] == 0 for r in got)  # KV kept: nothing prefilled again


def test_is_correction_auto_follows_staleness():
    assert RLConfig().is_correction == "none"  # synchronous: today's step, op for op
    assert make_rl_config(stale=True).is_correction == "tis"
    assert make_rl_config(stale=True, is_correction="none").is_correction == "none"  # asked for: kept
    off = {"train.partial_rollouts": False}
    for overrides in ({}, {**off, "train.off_policy_steps": 1}):  # the loop's block says stale
        assert config_lib.rl_config_of(demo(**overrides)).is_correction == "tis"
    assert config_lib.rl_config_of(demo(**off)).is_correction == "none"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"sampling.engine": "static"},
            r"train.partial_rollouts=True: needs the paged sampler .*sampling.engine=paged",
        ),
        (
            {"train.off_policy_steps": 1},
            r"train.off_policy_steps=1: train.partial_rollouts runs in the synchronous loop",
        ),
    ],
)
def test_partial_rollouts_config_rules(overrides, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(demo(**overrides))


@pytest.mark.slow
def test_dapo_drops_groups_without_signal_under_partial_rollouts(tmp_path):
    """DAPO's dynamic sampling with partial rollouts: a group whose rewards are all equal is left
    out (counted), at most train.max_refills batches' worth per step; then the batch is topped up
    with the next groups as they are (a run that solves nothing still makes progress)."""
    run(tmp_path, **{"rl.dynamic_sampling": True, "train.max_refills": 1, "train.checkpoint_every": 0})
    got = [r for r in untimed_rows(tmp_path) if "reward_mean" in r]
    assert len(got) == STEPS
    for r in got:
        assert 0 <= r["ds_groups_filtered"] <= 8 and 0 <= r["ds_topped_up"] <= 8  # 8 prompts a batch
        if r["ds_topped_up"] == 0:  # every group kept has some spread
            assert 0.0 < r["reward_mean"] < 1.0
    assert sum(r["ds_groups_filtered"] for r in got) > 0  # the short warm start leaves all-fail groups
