"""The Rollout contract: a pytree read by name, rebuilt from its dict, and the metrics row made
from it (the judge's reward_mean kept, the step's shaped one under its own name)."""

import jax
import numpy as np
import pytest

from microcoder_jax.trainer.metrics import step_record
from microcoder_jax.rl.dynamic_sampling import GroupBuffer, add_rollouts
from microcoder_jax.trainer.rollout import Rollout, sampler_logprobs, sequences


def _rollout(n=4, s=6, rewards=(1.0, 0.0, 0.0, 0.0)):
    return Rollout(
        tokens=np.ones((n, s), np.int32),
        attention_mask=np.ones((n, s), np.int32),
        response_mask=np.ones((n, s), np.int32),
        response_lengths=np.full(n, 3, np.int32),
        truncated=np.zeros(n, bool),
        temperature=np.full(n, 1.2, np.float32),
        sample_entropy=np.ones(n, np.float32),
        old_logprobs=np.zeros((n, s), np.float32),
        rewards=np.asarray(rewards, np.float32),
        passed=np.asarray(rewards) > 0,
        no_code=np.zeros(n, bool),
    )


def test_rollout_is_a_pytree_read_by_name():
    r = _rollout()
    leaves = jax.tree.leaves(r)
    assert len(leaves) == 11  # ref_logprobs is None: no leaf
    doubled = jax.tree.map(lambda x: x * 2, r)
    assert isinstance(doubled, Rollout) and doubled["rewards"][0] == 2.0
    assert "rewards" in r and "ref_logprobs" not in r and r.get("ref_logprobs") is None
    assert Rollout(**r.as_dict()).as_dict().keys() == r.as_dict().keys()


def test_dynamic_sampling_regroups_rollout_rows():
    r = _rollout(rewards=(1.0, 0.0, 1.0, 1.0))  # groups of 2: the first differs, the second not
    r = Rollout(**{**r.as_dict(), "sampler_logprobs": -np.arange(24, dtype=np.float32).reshape(4, 6)})
    _, full, stats = add_rollouts(GroupBuffer(), r.as_dict(), group_size=2, num_prompts=1, max_refills=0)
    batch = Rollout(**full)
    assert batch.rewards.tolist() == [1.0, 0.0] and stats["ds_informative_groups"] == 1
    np.testing.assert_array_equal(batch.sampler_logprobs, r.sampler_logprobs[:2])  # rows follow rows


def test_dapo_collects_generation_batches_of_episodes_until_the_groups_differ():
    """Multi-turn episodes under DAPO (trainer/step_batch._dapo_batches): batch k is sampled with
    key k, the all-equal groups are dropped, the verdicts add up and the episode stats cover every
    generation batch's episodes."""
    from types import SimpleNamespace

    from microcoder_jax.trainer.step_batch import _dapo_batches

    run = SimpleNamespace(sampling=SimpleNamespace(group_size=2), train=SimpleNamespace(max_refills=3))
    batches = [(0.0, 0.0, 1.0, 1.0), (1.0, 0.0, 1.0, 1.0), (0.0, 1.0, 0.0, 0.0)]  # informative: 0, 1, 1
    keys = []

    def one(k, problems, prompts):
        keys.append(k)
        r = _rollout(rewards=batches[k])
        r = Rollout(**{**r.as_dict(), "tokens": np.full((4, 6), 10 * k + np.arange(4)[:, None], np.int32)})
        stats = {"turns_mean": 1.0 + k / 2, "pass_turn1": 0.25 * k, "repaired_frac": (1.0, 0.0, 0.5)[k]}
        return r, {"passed": 2, "wrong": 2}, stats

    got = _dapo_batches(run, lambda: (["p1", "p2"], [[1], [2]]), one)
    assert keys == [0, 1, 2] and got.generations == 3 and got.verdicts == {"passed": 6, "wrong": 6}
    assert got.batch.rewards.tolist() == [1.0, 0.0, 0.0, 1.0]  # batch 1's first group, batch 2's first
    assert got.batch.tokens[:, 0].tolist() == [10, 11, 20, 21]
    # over every episode sampled: a ratio weighed by its denominator (failing first answers: 4, 3, 2)
    assert got.episodes == pytest.approx({"turns_mean": 1.5, "pass_turn1": 0.25, "repaired_frac": 5 / 9})
    assert got.ds_stats["ds_informative_groups"] == 2


def test_sampler_logprobs_take_old_logprobs_layout():
    """Column P + i holds the sampler's log-prob of response token i; prompt and padding are 0."""

    class Sample:
        prompt_tokens, prompt_mask = np.array([[0, 5], [4, 5]]), np.array([[0, 1], [1, 1]])
        tokens, lengths = np.array([[7, 8, 0], [9, 0, 0]]), np.array([2, 1])
        logprobs = np.array([[-0.5, -1.5, -9.0], [-2.0, -9.0, -9.0]], np.float32)  # junk past the end

    lp = sampler_logprobs(Sample, sequences(Sample)["response_mask"])
    assert lp.dtype == np.float32 and lp.tolist() == [[0, 0, -0.5, -1.5, 0], [0, 0, -2.0, 0, 0]]


def test_sequences_are_prompt_then_response():
    class Sample:
        prompt_tokens = np.array([[0, 5]])
        prompt_mask = np.array([[0, 1]])
        tokens = np.array([[7, 8, 0]])
        lengths = np.array([2])

    seq = sequences(Sample)
    assert seq["tokens"].tolist() == [[0, 5, 7, 8, 0]]
    assert seq["attention_mask"].tolist() == [[0, 1, 1, 1, 0]]
    assert seq["response_mask"].tolist() == [[0, 0, 1, 1, 0]]


def test_metrics_row_keeps_the_judges_reward_and_the_shaped_one():
    r = _rollout()
    step = {"reward_mean": np.float32(-0.5), "entropy": np.float32(2.0), "clip_frac": 0.1, "loss": 0.3}
    div = {"entropy": 1.5, "group_distinct_4": 0.6}
    times = {"sample": 1.0, "judge": 2.0, "judge_wait": 0.5, "train": 3.0}
    row = step_record(
        step,
        r,
        div,
        signal="group_distinct_4",
        temperature=1.2,
        next_temperature=1.2,
        times=times,
        verdicts={"passed": 1, "wrong_answer": 3},
        ds_stats={},
        generations=1,
        t_step=0.0,
    )
    assert row["reward_mean"] == 0.25 and row["reward_shaped_mean"] == -0.5
    assert row["entropy"] == 1.5 and row["policy_entropy"] == 2.0 and row["diversity"] == 0.6
    assert row["verdict/passed"] == 0.25 and row["rows"] == 4 and row["pass_rate"] == 0.25


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_sampling_engine_knob_picks_the_paged_sampler_with_the_same_greedy_tokens():
    import types

    from microcoder_jax import models
    from microcoder_jax.config import default_config
    from microcoder_jax.trainer.rollout import generate
    from microcoder_jax.trainer.setup import block_fields

    config = default_config()
    config.data.prompt_buckets = (16,)
    model_config = models.get_preset("tiny", vocab_size=64, dtype="float32")
    params = models.init_params(model_config, jax.random.PRNGKey(0))
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12]]
    outputs = {}
    for engine in ("static", "paged"):
        config.sampling.engine = engine
        config.sampling.slots = 3  # fewer slots than rows: the paged engine refills
        run = types.SimpleNamespace(
            model_config=model_config,
            stop_ids=(1,),
            pad_id=0,
            mesh=None,
            sample_mesh=None,
            config=config,
            **block_fields(config),
        )
        outputs[engine] = generate(
            run,
            params,
            prompts,
            num_samples=2,
            temperature=0.0,
            max_new_tokens=12,
            top_p=1.0,
            top_k=0,
            rng=jax.random.PRNGKey(1),
        )
    np.testing.assert_array_equal(outputs["paged"].tokens, outputs["static"].tokens)
    np.testing.assert_array_equal(outputs["paged"].lengths, outputs["static"].lengths)
