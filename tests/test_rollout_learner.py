"""Rollout worker and learner apart (quick tier): the k-step off-policy pipeline's contract with
a stand-in worker (versions, staleness bound, determinism under thread timing, draining, in-flight
batches saved and restored), the step's Rollout reading, and the planner's batch from the type.
End to end (k = 0 equal to the synchronous loop, k = 1 deterministic, resume with a batch in
flight): tests/test_train_offpolicy.py."""

import dataclasses
import random
import threading
import time

import jax
import numpy as np
import pytest

from microcoder_jax.rl.batch import FIELDS, NAMES, Rollout, abstract, as_rollout
from microcoder_jax.sampling.temperature import Decision
from microcoder_jax.trainer.pipeline import Pipeline, load_inflight, prune_inflight, save_inflight
from microcoder_jax.trainer.step_batch import StepRollout
from microcoder_jax.trainer.worker import Produced, Sampled

N, S = 4, 6


def rollout(seed: int) -> Rollout:
    rng = np.random.default_rng(seed)
    return Rollout(
        tokens=rng.integers(0, 9, (N, S)).astype(np.int32),
        attention_mask=np.ones((N, S), np.int32),
        response_mask=np.ones((N, S), np.int32),
        response_lengths=np.full(N, 3, np.int32),
        truncated=np.zeros(N, bool),
        temperature=np.full(N, 1.0, np.float32),
        rewards=rng.random(N).astype(np.float32),
        passed=np.zeros(N, bool),
        no_code=np.zeros(N, bool),
        sample_entropy=np.ones(N, np.float32),
        sampler_logprobs=-rng.random((N, S)).astype(np.float32),
    )


class FakeWorker:
    """Produces step t's batch from (t, the weights it holds); sleeps a random while, so thread
    timing varies from run to run."""

    def __init__(self, jitter: float = 0.0):
        self.params, self.version, self.jitter, self.calls = None, -1, jitter, []

    def update_weights(self, params, version):
        self.params, self.version = params, version

    def begin(self, step):  # k = 0: the loop scores the rows, then waits for the verdicts
        sampled = Sampled.made(self.produce(step, via="begin"))
        assert set(sampled.rows) == {"tokens", "attention_mask", "response_mask", "temperature"}
        return sampled

    def produce(self, step, via="produce"):
        time.sleep(random.random() * self.jitter)
        self.calls.append((step, self.version, threading.current_thread().name, via))
        r = rollout(step).replace(rewards=np.full(N, float(self.params["w"]), np.float32))
        return Produced(
            step,
            self.version,
            StepRollout(r, {"pass": N}, {}, 1, []),
            1.0,
            1.0,
            Decision(step, "keep", 1.0, 1.0, "steady"),
            {"entropy": 0.5},
            {"sample": 0.1},
            7,
            {"position": step + 1},
            {"temperature": 1.0},
        )


def drive(k: int, steps: int = 6, start: int = 0, ready=(), jitter: float = 0.002, inline: bool = False):
    """The loop's use of a pipeline: get, 'train' (w += 1), publish; returns what each step got."""
    worker, params = FakeWorker(jitter), {"w": np.float32(start)}
    pipe = Pipeline(worker, k=k, start=start, steps=steps, params=params, ready=ready, inline=inline)
    got = []
    try:
        for step in range(start, steps):
            p = pipe.get(step, params, step).wait()
            got.append((p.step, p.version, float(p.batch.rewards[0])))
            time.sleep(random.random() * jitter)
            params = {"w": params["w"] + 1}  # the learner's update: version step + 1
            pipe.publish(params, step + 1)
    finally:
        pipe.close()
    return got, worker


@pytest.mark.parametrize("k", [1, 2])
def test_batches_are_sampled_by_the_version_k_behind_and_never_staler(k):
    got, worker = drive(k)
    assert [s for s, _, _ in got] == list(range(6))
    for step, version, w in got:
        assert version == max(step - k, 0) and 0 <= step - version <= k
        assert w == version  # sampled with exactly those weights
    assert all(name == "rollout-worker" and via == "produce" for _, _, name, via in worker.calls)


def test_thread_timing_cannot_change_what_a_batch_holds():
    runs = [drive(1, jitter=j)[0] for j in (0.0, 0.01, 0.0)]
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("k", [1, 2])
def test_inline_mode_makes_the_threads_batches_in_the_learners_thread(k):
    """Multi-host runs make batches in the learner's thread (collectives in one order on every
    process): the same steps, versions and weights as the background thread."""
    threaded, _ = drive(k)
    inline, worker = drive(k, inline=True)
    assert inline == threaded
    assert all(name == threading.main_thread().name and via == "produce" for _, _, name, via in worker.calls)
    assert [c[0] for c in worker.calls] == list(range(6))  # each batch made once, in step order


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
def test_inline_drain_makes_what_the_thread_would_have_ahead(inline):
    worker, params = FakeWorker(), {"w": np.float32(0)}
    pipe = Pipeline(worker, k=2, start=0, steps=10, params=params, inline=inline)
    try:
        pipe.get(0, params, 0)
        assert [p.step for p in pipe.drain()] == [1, 2]
        pipe.publish({"w": np.float32(1)}, 1)
        assert [p.step for p in pipe.drain()] == [1, 2, 3]
        assert [(p.step, p.version) for p in [pipe.get(s, None, s) for s in (1, 2, 3)]] == [(1, 0), (2, 0), (3, 1)]
    finally:
        pipe.close()


def test_k0_begins_on_demand_with_the_learners_params():
    """k = 0: the batch is begun in the learner's thread and handed over once sampled (`Sampled`:
    the learner scores its rows while the judge works); the worker is never given the learner."""
    got, worker = drive(0)
    assert [(s, v) for s, v, _ in got] == [(s, s) for s in range(6)]
    assert all(name == threading.main_thread().name and via == "begin" for _, _, name, via in worker.calls)


def test_drain_leaves_the_worker_idle_with_the_batches_it_may_make():
    worker, params = FakeWorker(), {"w": np.float32(0)}
    pipe = Pipeline(worker, k=2, start=0, steps=10, params=params)
    try:
        pipe.get(0, params, 0)
        ahead = pipe.drain()  # versions 0 only: batches 1 and 2 (batch 3 waits for version 1)
        assert [p.step for p in ahead] == [1, 2] and len(worker.calls) == 3
        pipe.publish({"w": np.float32(1)}, 1)
        assert [p.step for p in pipe.drain()] == [1, 2, 3]
    finally:
        pipe.close()


def test_a_failing_worker_raises_in_the_learner():
    class Broken(FakeWorker):
        def produce(self, step, via="produce"):
            raise OSError("judge pool gone")

    pipe = Pipeline(Broken(), k=1, start=0, steps=3, params={"w": 0})
    with pytest.raises(RuntimeError, match="judge pool gone"):
        pipe.get(0, None, 0)
    pipe.close()


def test_inflight_batches_round_trip_and_resume_where_they_left_off(tmp_path):
    worker, params = FakeWorker(), {"w": np.float32(0)}
    pipe = Pipeline(worker, k=2, start=0, steps=6, params=params)
    pipe.get(0, params, 0)
    ahead = pipe.drain()
    pipe.close()
    save_inflight(str(tmp_path), 1, ahead)
    back = load_inflight(str(tmp_path), 1)
    assert [p.step for p in back] == [1, 2] and [p.version for p in back] == [0, 0]
    for a, b in zip(ahead, back):
        for name, value in a.batch.as_dict().items():
            np.testing.assert_array_equal(getattr(b.batch, name), value)
        assert (b.decision, b.data_state, b.judge_tests, b.got.verdicts) == (a.decision, a.data_state, 7, {"pass": N})
    # resumed at step 1 with those two: they come first, and no step is produced twice
    resumed, rworker = drive(2, start=1, ready=tuple(back))
    assert [(s, v) for s, v, _ in resumed] == [(1, 0), (2, 0), (3, 1), (4, 2), (5, 3)]
    assert [c[0] for c in rworker.calls] == [3, 4, 5]
    assert load_inflight(str(tmp_path), 2) == []
    prune_inflight(str(tmp_path), keep=[2])
    assert load_inflight(str(tmp_path), 1) == []


def test_the_step_reads_a_rollout_or_a_dict_of_its_fields():
    r = rollout(0)
    assert as_rollout(r) == (r, None)
    back, packing = as_rollout({**r.as_dict(), "packing": "P"})
    assert packing == "P" and back.as_dict().keys() == r.as_dict().keys()
    with pytest.raises(ValueError, match=r"\['logits'\] are not Rollout fields"):
        as_rollout({**r.as_dict(), "logits": 1})
    assert set(FIELDS) == set(NAMES) and len(jax.tree.leaves(r)) == len(r.as_dict())


def test_abstract_rollout_carries_the_optional_fields_asked_for():
    make = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype)  # noqa: E731
    plain = abstract(8, 5, make)
    assert plain.sampler_logprobs is None and plain.ref_logprobs is None and plain.old_logprobs.shape == (8, 5)
    full = abstract(8, 5, make, ref=True, sampler=True)
    assert full.sampler_logprobs.shape == (8, 5) and full.rewards.shape == (8,) and full.passed.dtype == np.bool_
    assert dataclasses.fields(full)  # a Rollout, as the step is given


def test_planner_lowers_the_train_step_with_tis():
    """The planner's batch comes from the Rollout type: with rl.is_correction=tis it carries the
    sampler's log-probs, so the step lowers (it raised for the missing field before)."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.plan import programs

    config = config_lib.demo_config()
    config.rl.is_correction = "tis"
    rl = config_lib.rl_config_of(config)
    mesh = programs.make_mesh(config, jax.devices()[:1])
    shapes = programs.shapes_of(config, rl, mesh)
    program = programs.train_program(config, rl, mesh, shapes, tpu=False)
    assert program.args[1].sampler_logprobs is not None
    with jax.set_mesh(mesh):
        lowered = program.fn.lower(*program.args)
    assert "is_weight_mean" in lowered.out_info[1]  # the correction is in the lowered step


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_a_bad_off_policy_steps_is_one_clear_error(bad):
    from microcoder_jax.trainer.config import TrainConfig

    with pytest.raises(ValueError, match=r"train.off_policy_steps=.*(expected int|must be a number >= 0)"):
        TrainConfig(off_policy_steps=bad)


def test_help_says_which_correction_an_off_policy_run_wants():
    from microcoder_jax import config as config_lib

    meaning = config_lib.meanings()["train.off_policy_steps"]
    assert "is_correction=tis" in meaning and "0 = synchronous" in meaning
