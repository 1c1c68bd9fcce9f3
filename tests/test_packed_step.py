"""The train step on packed rows = on padded rows: loss, metrics and params after the updates."""

import jax
import numpy as np
import pytest

from microcoder_jax import models, sharding
from microcoder_jax.rl import packing
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_train_step
from random_params import numpy_params

MC = models.get_preset("tiny", dtype="float32")
G, PROMPTS, P, R = 4, 4, 6, 12
N, S = G * PROMPTS, P + R


@pytest.fixture(scope="module")
def params():
    return numpy_params(MC, 0.05)


def make_batch(seed, long_frac=0.3):
    """A rollout batch per the Rollout contract, some rows truncated, one empty response."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((N, S), np.int32)
    attn, resp = np.zeros((N, S), np.int32), np.zeros((N, S), np.int32)
    lengths = np.where(rng.random(N) < long_frac, R, rng.integers(2, R // 2, N)).astype(np.int32)
    lengths[1] = 0
    for i in range(N):
        plen = rng.integers(1, P + 1)
        tokens[i, P - plen : P + lengths[i]] = rng.integers(1, MC.vocab_size, plen + lengths[i])
        tokens[i, P : P + lengths[i]][-4:] = (
            [7, 8, 7, 8][: min(4, lengths[i])] if i % 3 == 0 else tokens[i, P : P + lengths[i]][-4:]
        )
        attn[i, P - plen : P + lengths[i]] = 1
        resp[i, P : P + lengths[i]] = 1
    return {
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp,
        "rewards": rng.integers(0, 2, N).astype(np.float32),
        "passed": rng.random(N) < 0.5,
        "no_code": rng.random(N) < 0.5,
        "truncated": lengths == R,
        "response_lengths": lengths,
        "temperature": rng.choice([0.7, 1.0, 1.2], N).astype(np.float32),
    }


def with_old(params, batch, kl, noise=0.3):
    """Old (and reference) log-probs: off-policy by default (`noise`), so the clip fires on both sides;
    noise 0 gives the on-policy old log-probs of one update per batch."""
    from microcoder_jax.rl.logprobs import compute_logprobs

    rng = np.random.default_rng(9)
    logp = np.asarray(
        compute_logprobs(params, MC, batch["tokens"], batch["attention_mask"], batch["temperature"], chunk=8)
    )
    out = dict(batch, old_logprobs=(logp + rng.normal(0, noise, logp.shape)).astype(np.float32))
    if kl:
        out["ref_logprobs"] = (logp + rng.normal(0, 0.3, logp.shape)).astype(np.float32)
    return out


def cfg_for(aggregation, truncation, kl, micro, width=None, **extra):
    return make_rl_config(
        "microcoder",
        group_size=G,
        num_minibatches=2,
        micro_batch_size=micro,
        pack_width=width,
        adam_eps=1e-4,  # a smooth update: rounding stays rounding
        logprob_chunk=5,
        repeat_m=2,
        learning_rate=1e-2,
        weight_decay=0.0,
        aggregation=aggregation,
        truncation=truncation,
        rho=0.5,
        kl_beta=0.1 if kl else 0.0,
        soft_overlong_cache=4,
        packing=True,
        **extra,
    )


def run_step(params, cfg, batch, mesh):
    step = make_train_step(MC, cfg, mesh)
    state = init_train_state(params, cfg, mesh, model_config=MC if mesh else None)
    state, metrics = step(state, sharding.put_batch(batch, mesh))
    return jax.device_get(state.params), jax.device_get(metrics)


CASES = [  # every aggregation and truncation rule, KL on and off, accumulation, 1 and 8 devices
    ("token_mean", "conditional", False, 2, None, "1dev", False),
    ("seq_mean_token_mean", "overlong_filter", True, 4, 2 * S, "1dev", True),
    pytest.param("constant", "soft_overlong", False, 2, None, "1dev", True, marks=pytest.mark.slow),
    pytest.param("token_mean", "mask_all", True, 8, None, "8dev", True, marks=pytest.mark.slow),
    pytest.param("constant", "none", False, 8, 2 * S, "8dev", False, marks=pytest.mark.slow),
]  # (the slow ones: compile-heavy, run by the full suite; the quick tier keeps one 1-device case of each kind)


@pytest.mark.slow
@pytest.mark.parametrize("aggregation,truncation,kl,micro,width,where,given_old", CASES)
def test_packed_step_equals_padded(params, aggregation, truncation, kl, micro, width, where, given_old):
    cfg = cfg_for(aggregation, truncation, kl, micro, width)
    mesh = sharding.make_mesh(data=2, fsdp=4) if where == "8dev" else None
    batch = with_old(params, make_batch(1), kl, noise=0.3 if given_old else 0.0)
    pk = packing.for_step(batch["attention_mask"], cfg, mesh)
    assert pk.src.size <= N * S and packing.useful_fraction(pk) >= batch["attention_mask"].mean()
    if micro == 2:
        assert pk.src.size < N * S  # fewer positions than padded: the test packs for real
    want_params, want = run_step(params, cfg, batch, mesh)
    got_params, got = run_step(params, cfg, dict(batch, packing=pk), mesh)
    assert set(got) == set(want)
    assert want["clip_frac"] > 0 or not given_old
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=1e-6, err_msg=k)
    moved = 0.0
    for a, b, p0 in zip(jax.tree.leaves(got_params), jax.tree.leaves(want_params), jax.tree.leaves(params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3 * cfg.learning_rate)
        moved = max(moved, float(np.abs(b - np.asarray(p0)).max()))
    assert moved > 0.1 * cfg.learning_rate  # the updates are not trivially zero


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_packed_step_compiles_once_per_size(params):
    """Length mixes that pack into the same number of rows reuse one compile; a new size adds one."""
    cfg = cfg_for("token_mean", "conditional", False, 2)
    step = make_train_step(MC, cfg)
    state = init_train_state(params, cfg)
    sizes = []
    for seed, long_frac in [(2, 0.0), (3, 0.0), (4, 1.0), (5, 0.0), (6, 1.0)]:
        batch = with_old(params, make_batch(seed, long_frac), False)
        pk = packing.for_step(batch["attention_mask"], cfg)
        sizes.append(pk.src.shape[0])
        state, metrics = step(state, dict(batch, packing=pk))
        assert np.isfinite(float(metrics["loss"]))
        assert step._cache_size() == len(set(sizes))
    assert len(set(sizes)) == 2, sizes  # short mixes and long mixes: two static sizes


@pytest.mark.slow
def test_packed_step_with_per_turn_advantages_equals_padded(params):
    """rl.turn_baseline: per-token advantages [N, S] reach packed rows token by token."""
    from microcoder_jax.rl.advantages import compute_advantages

    cfg = cfg_for("token_mean", "conditional", False, 2, turn_baseline=True, max_turns=2)
    batch = with_old(params, make_batch(1), False)
    two = batch["response_lengths"] >= 6
    batch["response_mask"][two, P + 2 : P + 4] = 0  # an environment's turn: attended, not trained
    adv, _, _ = compute_advantages(cfg, batch, np.ones(N, np.float32))
    adv = np.asarray(adv)
    assert adv.ndim == 2 and np.any(adv[two, P + 5] != adv[two, P])  # a second turn has its own baseline
    pk = packing.for_step(batch["attention_mask"], cfg, None)
    want_params, want = run_step(params, cfg, batch, None)
    got_params, got = run_step(params, cfg, dict(batch, packing=pk), None)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=1e-6, err_msg=k)
    for a, b in zip(jax.tree.leaves(got_params), jax.tree.leaves(want_params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3 * cfg.learning_rate)


def test_rl_config_validates_packing():
    with pytest.raises(ValueError, match="pack_width"):
        make_rl_config("microcoder", pack_width=1)
    with pytest.raises(ValueError, match="pack_width"):
        make_rl_config("microcoder", pack_width=128.0)
    with pytest.raises(ValueError, match="packing"):
        make_rl_config("microcoder", packing="yes")
    assert make_rl_config("microcoder", packing=True, pack_width=4096).pack_width == 4096
