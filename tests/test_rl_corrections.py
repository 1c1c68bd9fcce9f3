"""Sampler-trainer mismatch corrections (rl.corrections): TIS / MIS weights against a NumPy
reference of the formulas, the config's checks, and the train step: `none` is the uncorrected
step bit for bit, `tis` with sampler = old log-probs equals `none`, packed = padded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax import models
from microcoder_jax.rl import corrections
from microcoder_jax.rl.config import RLConfig
from microcoder_jax.rl.logprobs import compute_logprobs
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_train_step
from random_params import numpy_params

MC = models.get_preset("tiny", dtype="float32")
G, PROMPTS, P, R = 4, 4, 6, 12
N, S = G * PROMPTS, P + R


def reference(name, level, old, sampler, mask, cap, low, high):
    """(weight, kept) from the definitions, in float64: r = pi_old / pi_sampler at `level`."""
    log_ratio = np.where(mask, old.astype(np.float64) - sampler, 0.0)
    if level == "sequence":  # the row's product of token ratios
        log_ratio = np.repeat(log_ratio.sum(1, keepdims=True), mask.shape[1], 1)
    elif level == "geometric":  # the row's geometric mean
        log_ratio = np.repeat(
            log_ratio.sum(1, keepdims=True) / np.maximum(mask.sum(1, keepdims=True), 1), mask.shape[1], 1
        )
    r = np.exp(np.clip(log_ratio, -20, 20))
    if name == "tis":
        weight, keep = np.minimum(r, cap), np.ones_like(mask)
    else:
        weight, keep = r, (r >= low) & (r <= high)
    kept = mask & keep
    return np.where(kept, weight, 0.0), kept, r


def _logprobs(seed, noise):
    rng = np.random.default_rng(seed)
    mask = np.zeros((N, S), bool)
    for i, n in enumerate(rng.integers(0, R + 1, N)):
        mask[i, P : P + n] = True
    old = np.where(mask, -rng.gamma(1.0, 1.5, (N, S)), 0.0).astype(np.float32)
    sampler = np.where(mask, old + rng.normal(0, noise, (N, S)), 0.0).astype(np.float32)
    return old, sampler, mask


@pytest.mark.parametrize("name", ["tis", "mis"])
@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_weights_match_the_numpy_reference(name, level):
    old, sampler, mask = _logprobs(1, noise={"token": 0.6, "sequence": 0.15, "geometric": 0.8}[level])
    cfg = RLConfig(is_correction=name, is_level=level, is_cap=1.5, is_low=0.6, is_high=1.4)
    loss_mask = mask.astype(np.float32) * 0.5  # a row weight below 1 stays in the returned mask
    new_mask, weight, m = corrections.apply(cfg, jnp.asarray(old), jnp.asarray(sampler), jnp.asarray(loss_mask))
    want_w, kept, r = reference(name, level, old, sampler, mask, 1.5, 0.6, 1.4)
    np.testing.assert_allclose(np.asarray(weight), want_w, rtol=2e-5, atol=1e-30)
    np.testing.assert_array_equal(np.asarray(new_mask), loss_mask * kept)
    tokens = mask.sum()
    capped, dropped = (kept & (r > 1.5)).sum() if name == "tis" else 0, (mask & ~kept).sum()
    assert (capped > 0) if name == "tis" else (dropped > 0)  # the case exercises the correction
    np.testing.assert_allclose(float(m["is_truncated_frac"]), capped / tokens, rtol=1e-6)
    np.testing.assert_allclose(float(m["is_masked_frac"]), dropped / tokens, rtol=1e-6)
    np.testing.assert_allclose(float(m["is_weight_mean"]), want_w[kept].mean(), rtol=1e-5)
    np.testing.assert_allclose(float(m["is_weight_max"]), want_w.max(), rtol=1e-5)
    np.testing.assert_allclose(float(m["is_gap"]), np.abs(old - sampler)[mask].mean(), rtol=1e-5)


def test_weights_carry_no_gradient():
    old, sampler, mask = _logprobs(2, noise=0.3)
    cfg = RLConfig(is_correction="tis")
    g = jax.grad(lambda o: jnp.sum(corrections.apply(cfg, o, jnp.asarray(sampler), jnp.asarray(mask, jnp.float32))[1]))(
        jnp.asarray(old)
    )
    assert not np.any(np.asarray(g))


def test_rl_config_validates_the_correction():
    assert RLConfig().is_correction == "none"
    with pytest.raises(ValueError, match=r"rl.is_correction='xis': unknown is correction; registered: mis, none, tis"):
        RLConfig(is_correction="xis")
    with pytest.raises(ValueError, match="is_level"):
        RLConfig(is_level="row")
    with pytest.raises(ValueError, match="is_cap"):
        RLConfig(is_cap=0.9)
    for low, high in ((0.0, 2.0), (1.2, 2.0), (0.5, 0.9)):
        with pytest.raises(ValueError, match="is_low"):
            RLConfig(is_low=low, is_high=high)


# ------------------------------------------------------------------ the train step


@pytest.fixture(scope="module")
def params():
    return numpy_params(MC, 0.05)


@pytest.fixture(scope="module")
def batch(params):
    """A rollout batch (Rollout contract) with off-policy old log-probs and a noisy sampler's."""
    rng = np.random.default_rng(3)
    tokens, attn, resp = (np.zeros((N, S), np.int32) for _ in range(3))
    lengths = rng.integers(2, R + 1, N).astype(np.int32)
    lengths[1] = 0
    for i in range(N):
        plen = rng.integers(1, P + 1)
        tokens[i, P - plen : P + lengths[i]] = rng.integers(1, MC.vocab_size, plen + lengths[i])
        attn[i, P - plen : P + lengths[i]] = 1
        resp[i, P : P + lengths[i]] = 1
    temperature = rng.choice([0.7, 1.0], N).astype(np.float32)
    logp = np.asarray(compute_logprobs(params, MC, tokens, attn, temperature, chunk=8))
    old = (logp + rng.normal(0, 0.2, logp.shape)).astype(np.float32)
    return {
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp,
        "rewards": rng.integers(0, 2, N).astype(np.float32),
        "passed": rng.random(N) < 0.5,
        "no_code": rng.random(N) < 0.5,
        "truncated": lengths == R,
        "response_lengths": lengths,
        "temperature": temperature,
        "old_logprobs": old,
        "sampler_logprobs": np.where(resp > 0, old + rng.normal(0, 0.5, old.shape), 0).astype(np.float32),
    }


def cfg_for(name="none", **kw):
    return make_rl_config(
        "microcoder",
        group_size=G,
        num_minibatches=2,
        micro_batch_size=4,
        logprob_chunk=8,
        repeat_m=2,
        learning_rate=1e-2,
        weight_decay=0.0,
        is_correction=name,
        **kw,
    )


def run(params, cfg, batch):
    state, metrics = make_train_step(MC, cfg)(init_train_state(params, cfg), batch)
    return jax.device_get(state.params), jax.device_get(metrics)


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_none_is_the_uncorrected_step_bit_for_bit(params, batch):
    """`none` ignores the sampler's log-probs: the same params and metrics as a batch without them."""
    without = {k: v for k, v in batch.items() if k != "sampler_logprobs"}
    p0, m0 = run(params, cfg_for("none"), without)
    p1, m1 = run(params, cfg_for("none"), batch)
    assert_same(p1, p0)
    assert m1.keys() == m0.keys() and not any(k.startswith("is_") for k in m0)
    assert_same(m1, m0)


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_tis_with_the_sampler_equal_to_old_is_none(params, batch):
    """r = 1 everywhere: weight 1, nothing capped; params, loss and every metric of `none`."""
    on_policy = dict(batch, sampler_logprobs=np.where(batch["response_mask"] > 0, batch["old_logprobs"], 0))
    p0, m0 = run(params, cfg_for("none"), on_policy)
    p1, m1 = run(params, cfg_for("tis"), on_policy)
    assert_same(p1, p0)
    assert_same({k: m1[k] for k in m0}, m0)
    assert m1["is_weight_mean"] == 1.0 and m1["is_weight_max"] == 1.0
    assert m1["is_truncated_frac"] == 0.0 and m1["is_masked_frac"] == 0.0 and m1["is_gap"] == 0.0


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_a_correction_reweights_and_drops_tokens(params, batch):
    """Off-policy sampler: tis changes the update; mis leaves out exactly the reference's tokens."""
    p0, m0 = run(params, cfg_for("none"), batch)
    p1, m1 = run(params, cfg_for("tis", is_cap=1.2), batch)
    assert float(m1["is_truncated_frac"]) > 0.05 and float(m1["loss_tokens"]) == float(m0["loss_tokens"])
    assert not np.allclose(np.asarray(p1["embed"]), np.asarray(p0["embed"]), rtol=0, atol=1e-7)
    whole = dict(batch, truncated=np.zeros(N, bool))  # every row in the loss: counts are exact
    _, m3 = run(params, cfg_for("none"), whole)
    _, m2 = run(params, cfg_for("mis", is_level="geometric", is_low=0.9, is_high=1.1), whole)
    mask = batch["response_mask"] > 0
    _, kept, _ = reference("mis", "geometric", batch["old_logprobs"], batch["sampler_logprobs"], mask, 0, 0.9, 1.1)
    assert float(m3["loss_tokens"]) == mask.sum() and float(m2["loss_tokens"]) == kept.sum() < mask.sum()
    np.testing.assert_allclose(float(m2["is_masked_frac"]), 1 - kept.sum() / mask.sum(), rtol=1e-6)


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_packed_step_with_correction_equals_padded(params, batch):
    """tis: packed rows give the padded rows' update (the old log-probs gathered into the packed layout)."""
    from microcoder_jax.rl import packing

    cfg = cfg_for("tis", is_cap=1.2, adam_eps=1e-4)
    p0, m0 = run(params, cfg, batch)
    pk = dict(batch, packing=packing.for_step(batch["attention_mask"], cfg))
    p1, m1 = run(params, cfg_for("tis", is_cap=1.2, adam_eps=1e-4, packing=True), pk)
    for k in ("loss", "is_weight_mean", "is_truncated_frac", "is_gap", "loss_tokens"):
        np.testing.assert_allclose(float(m1[k]), float(m0[k]), rtol=2e-4, atol=1e-6, err_msg=k)
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p0), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
