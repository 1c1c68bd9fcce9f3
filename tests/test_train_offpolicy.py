"""End to end, train.off_policy_steps = 1 on a shortened demo (one uninterrupted run shared by the
module): staleness is logged and never exceeds k, a second run of the same seed is identical
(thread timing cannot change a result), and a run stopped by SIGTERM while a batch is in flight
resumes to the same final params and rows (the batch is neither lost nor trained twice)."""

import os
import signal

import jax
import numpy as np
import pytest

from microcoder_jax.trainer import loop as train
from microcoder_jax.trainer import preemption
from microcoder_jax.trainer.pipeline import INFLIGHT_DIR
from short_demo import short_demo, untimed_rows

pytestmark = pytest.mark.slow  # three ~1-minute demo runs on 2 cores
STEPS = 4


def demo(**overrides):
    return short_demo(STEPS, **{"train.off_policy_steps": 1, "rl.is_correction": "tis", **overrides})


rows = untimed_rows


def run(workdir, **overrides):
    return train.train(demo(**overrides), str(workdir), log_fn=lambda *a: None)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("k1")
    return workdir, run(workdir).params


def assert_same_params(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_staleness_is_logged_and_bounded_by_k(first):
    got = rows(first[0])
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert [r["staleness"] for r in got] == [0, 1, 1, 1]  # batches 0 and 1 both sampled by version 0
    assert all(np.isfinite(r["sampler_logprob_gap"]) and "is_weight_mean" in r for r in got)


def test_same_seed_same_run(first, tmp_path):
    params = run(tmp_path).params
    assert rows(tmp_path) == rows(first[0])
    assert_same_params(params, first[1])


def test_sigterm_with_a_batch_in_flight_resumes_exactly(first, tmp_path):
    def on_step(step, record):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the guard checkpoints step 2 and stops

    with pytest.raises(preemption.Preempted):
        train.train(demo(), str(tmp_path), log_fn=lambda *a: None, on_step=on_step)
    saved = os.listdir(os.path.join(tmp_path, INFLIGHT_DIR, "step_00000002"))
    assert sorted(saved) == ["batch_00000002.json", "batch_00000002.npz"]  # sampled by version 1
    params = run(tmp_path).params
    assert rows(tmp_path) == rows(first[0])
    assert_same_params(params, first[1])


def test_dapo_refills_and_the_temperature_schedule_under_k1(tmp_path):
    """DAPO's refill loop fills each step's batch and the scheduler's decision after batch t
    applies to batch t + 1, with batches sampled a step ahead."""
    run(
        tmp_path,
        **{
            "rl.dynamic_sampling": True,
            "train.max_refills": 2,
            "temperature.policy": "staged",
            "temperature.schedule": ((0, 1.0), (2, 1.4)),
        },
    )
    got = rows(tmp_path)
    assert [r["temperature"] for r in got] == [1.0, 1.0, 1.4, 1.4]
    assert [r["next_temperature"] for r in got] == [1.0, 1.4, 1.4, 1.4]
    assert all(r["generations"] >= 1 and r["ds_generations"] == r["generations"] for r in got)
    assert [r["staleness"] for r in got] == [0, 1, 1, 1]
