"""The jitted train step on a tiny random Qwen3 (fp32 compute so equalities hold to rounding)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax import models, sharding
from microcoder_jax.rl import losses as L
from microcoder_jax.rl.logprobs import compute_logprobs
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_train_step, minibatch_grads
from random_params import numpy_params

G, PROMPTS, P, R = 4, 4, 6, 12  # 16 rows, 18 tokens
N, S = G * PROMPTS, P + R
MC = models.get_preset("tiny", dtype="float32")
# Test-only jits skip LLVM's optimisation passes: half the compile time, same numerics.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


@pytest.fixture(scope="module")
def params():
    """Random tiny-model params built in NumPy (no threefry compile): norms 1, matrices N(0, .02)."""
    return numpy_params(MC, 0.02)


def make_batch(seed=0, vocab=MC.vocab_size):
    """A rollout batch per the contract: left-padded prompts, right-padded responses."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((N, S), np.int32)
    attn, resp = np.zeros((N, S), np.int32), np.zeros((N, S), np.int32)
    lengths = rng.integers(3, R + 1, N).astype(np.int32)
    lengths[0], lengths[5] = 0, R  # an empty response and a truncated one
    for i in range(N):
        plen = rng.integers(2, P + 1)
        tokens[i, P - plen : P + lengths[i]] = rng.integers(1, vocab, plen + lengths[i])
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
        "temperature": rng.choice([0.6, 1.0, 1.2], N).astype(np.float32),
    }


def _naive_logprobs(params, tokens, attention_mask, temperature):
    logits, _ = models.forward(params, MC, tokens, attention_mask=attention_mask)
    logp = jax.nn.log_softmax(logits / temperature[:, None, None], axis=-1)
    out = jnp.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.pad(out, ((0, 0), (1, 0)))


def naive_logprobs(params, batch):
    """Independent reference: full logits, log_softmax(logits / T), gather, shift by one."""
    return _naive_logprobs(params, batch["tokens"], batch["attention_mask"], batch["temperature"])


_naive_jit = jax.jit(_naive_logprobs, compiler_options=FAST_COMPILE)


def naive_logprobs_jit(params, batch):
    return _naive_jit(params, batch["tokens"], batch["attention_mask"], batch["temperature"])


def logprobs(params, batch):
    """The code under test, with one fixed signature so the module compiles it once."""
    return compute_logprobs(
        params, MC, batch["tokens"], batch["attention_mask"], batch["temperature"], chunk=5, micro_batch=4
    )  # 17 = 3*5 + 2 positions


def minibatch(params, batch, seed=1, noise=0.3):
    """Loss inputs with off-policy old log-probs (so both clip sides fire) and one filtered row."""
    rng = np.random.default_rng(seed)
    logp = np.asarray(naive_logprobs_jit(params, batch))
    mask = batch["response_mask"].astype(np.float32)
    mask[7] = 0.0  # a row removed from the loss (overlong filter)
    return {
        "tokens": batch["tokens"],
        "attention_mask": batch["attention_mask"],
        "loss_mask": mask,
        "advantages": rng.normal(size=N).astype(np.float32),
        "old_logprobs": (logp + rng.normal(0, noise, logp.shape)).astype(np.float32),
        "ref_logprobs": (logp + rng.normal(0, noise, logp.shape)).astype(np.float32),
        "temperature": batch["temperature"],
    }


def test_compute_logprobs_matches_full_logits(params):
    batch = make_batch(3)
    want = naive_logprobs_jit(params, batch)
    got = logprobs(params, batch)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_compute_logprobs_rejects_zero_temperature(params):
    batch = make_batch(3)
    for temperature in (np.zeros(N, np.float32), jnp.asarray(batch["temperature"]).at[2].set(0.0)):
        with pytest.raises(ValueError, match=r"temperature > 0 .*greedy.*T > 0"):
            compute_logprobs(params, MC, batch["tokens"], batch["attention_mask"], temperature)


@functools.cache
def _grads_fn(cfg, micro, mesh):
    param_sh = (
        None
        if mesh is None
        else sharding.logical_to_sharding(models.param_logical_axes(MC), mesh, models.param_shapes(MC))
    )
    return jax.jit(
        functools.partial(minibatch_grads, model_config=MC, cfg=cfg, micro_batch_size=micro, param_sh=param_sh),
        compiler_options=FAST_COMPILE,
    )


def _grads(params, mb, cfg, micro, mesh=None):
    fn = _grads_fn(cfg, micro, mesh)
    if mesh is None:
        return fn(params, mb)
    params = jax.device_put(
        params, sharding.logical_to_sharding(models.param_logical_axes(MC), mesh, models.param_shapes(MC))
    )
    mb = {k: jax.device_put(v, sharding.batch_sharding(mesh, np.ndim(v))) for k, v in mb.items()}
    with jax.set_mesh(mesh):
        return fn(params, mb)


MODES = {"token_mean": {}, "seq_mean_token_mean": dict(kl_beta=0.05), "constant": dict(dual_clip=3.0)}
CFGS = {
    mode: make_rl_config("microcoder", group_size=G, logprob_chunk=8, aggregation=mode, **kw)
    for mode, kw in MODES.items()
}


@functools.partial(jax.jit, compiler_options=FAST_COMPILE)
def whole_batch_reference(params, mb):
    """(loss, grads) per mode from the plainest code: full logits, one batch, `loss_weights`; plus the
    plain policy gradient loss -sum(A logp) / tokens under "pg". One compile for all of them."""

    def loss(p, cfg):
        logp = naive_logprobs(p, mb)
        adv = mb["advantages"][:, None]
        if cfg is None:
            return -jnp.sum(adv * logp * mb["loss_mask"]) / mb["loss_mask"].sum()
        per_token = L.clipped_surrogate(logp, mb["old_logprobs"], adv, cfg.eps_low, cfg.eps_high, cfg.dual_clip)[0]
        if cfg.kl_beta:
            per_token += cfg.kl_beta * L.k3_kl(logp, mb["ref_logprobs"])
        return jnp.sum(per_token * L.loss_weights(mb["loss_mask"], cfg.aggregation, cfg.loss_constant))

    out = {mode: jax.value_and_grad(loss)(params, cfg) for mode, cfg in CFGS.items()}
    out["pg"] = jax.value_and_grad(loss)(params, None)
    return out


@pytest.fixture(scope="module")
def reference(params):
    mb = minibatch(params, make_batch())
    return mb, whole_batch_reference(params, mb)


def assert_tree_close(got, want, rtol=2e-4, atol=1e-7):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


ACCUMULATION = [(mode, "8dev") for mode in MODES] + [("token_mean", "1dev")]


@pytest.mark.parametrize("mode,where", ACCUMULATION)
def test_accumulation_equals_one_big_batch(params, reference, mode, where):
    """4 micro-batches on one device, or 2 micro-batches over a (data=2, fsdp=4) mesh, give the
    loss and gradients of the whole batch at once."""
    mb, ref = reference
    want_loss, want_grads = ref[mode]
    mesh = sharding.make_mesh(data=2, fsdp=4) if where == "8dev" else None
    grads, loss, sums, _ = _grads(params, mb, CFGS[mode], N // 4 if mesh is None else N // 2, mesh)
    assert float(sums["clip_low"]) > 0 and float(sums["clip_high"]) > 0  # clipping is live
    np.testing.assert_allclose(float(sums["tokens"]), mb["loss_mask"].sum())
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
    assert_tree_close(grads, want_grads)


def test_single_update_is_plain_policy_gradient(params):
    """On-policy (old = current log-probs): ratio 1, no clipping, gradient = policy gradient."""
    batch = make_batch(4)
    mb = minibatch(params, batch)
    mb["old_logprobs"] = np.asarray(logprobs(params, batch))
    grads, loss, sums, rmax = _grads(params, mb, CFGS["token_mean"], N // 4)  # compiled above
    assert float(sums["clip_low"]) == 0 and float(sums["clip_high"]) == 0
    np.testing.assert_allclose(float(rmax), 1.0, atol=1e-5)
    want_loss, want_grads = whole_batch_reference(params, mb)["pg"]
    np.testing.assert_allclose(
        float(loss), -np.sum(mb["advantages"][:, None] * mb["loss_mask"]) / mb["loss_mask"].sum(), rtol=1e-5
    )
    assert_tree_close(grads, want_grads, atol=1e-6)


STEP_CFG = make_rl_config(
    "microcoder",
    group_size=G,
    num_minibatches=2,
    micro_batch_size=4,
    logprob_chunk=8,
    repeat_m=2,
    learning_rate=3e-3,
    weight_decay=0.0,
    warmup_steps=2,
    decay="cosine",
    total_steps=10,
)


@pytest.fixture(scope="module")
def step_fn():
    return make_train_step(MC, STEP_CFG)


def with_old(params, batch):
    """The batch with its old log-probs at `params` (the train step takes them; the learner computes them)."""
    return dict(batch, old_logprobs=np.asarray(naive_logprobs_jit(params, batch)))


def _row_logp(params, batch):
    return np.asarray((logprobs(params, batch) * batch["response_mask"]).sum(1))


def test_steps_move_logprobs_with_advantage_without_recompiling(params, step_fn):
    batch = make_batch(5)
    batch["rewards"] = np.tile([1, 1, 0, 0], PROMPTS).astype(np.float32)
    batch["truncated"][:] = False
    before = _row_logp(params, batch)
    state = init_train_state(params, STEP_CFG)
    for i in range(3):  # rewards, flags and temperatures change between calls: still one compile
        b = dict(
            batch,
            temperature=batch["temperature"] * (1 + 0.1 * i),
            truncated=np.roll(batch["truncated"], i),
            no_code=np.roll(batch["no_code"], i),
        )
        state, metrics = step_fn(state, with_old(state.params, b))
    assert step_fn._cache_size() == 1
    assert int(state.step) == 3 and np.isfinite(float(metrics["loss"]))
    delta = _row_logp(state.params, batch) - before
    nonempty = batch["response_lengths"] > 0
    good, bad = (batch["rewards"] == 1) & nonempty, (batch["rewards"] == 0) & nonempty
    assert delta[good].mean() > 0.5 and delta[bad].mean() < -0.5, delta
    assert np.all(delta[good] > 0) and np.all(delta[bad] < 0), delta


def test_step_on_mesh_matches_single_device(params, step_fn):
    batch = with_old(params, make_batch(6))
    state, metrics = step_fn(init_train_state(params, STEP_CFG), batch)
    mesh = sharding.make_mesh(data=2, fsdp=4)
    mesh_step = make_train_step(MC, STEP_CFG, mesh)
    mstate = init_train_state(params, STEP_CFG, mesh, model_config=MC)
    rows = sharding.batch_sharding(mesh, 1)
    mbatch = {k: jax.device_put(v, sharding.batch_sharding(mesh, v.ndim)) for k, v in batch.items()}
    mstate, mmetrics = mesh_step(mstate, mbatch)
    # Adam turns rounding-level gradient differences into up to ~1% of an lr-sized update.
    assert_tree_close(mstate.params, state.params, rtol=1e-4, atol=1e-2 * STEP_CFG.learning_rate)
    mstate, _ = mesh_step(mstate, dict(mbatch, rewards=jax.device_put(batch["rewards"][::-1].copy(), rows)))
    assert mesh_step.jitted._cache_size() == 1
    embed = mstate.params["embed"]
    assert (
        embed.sharding.spec
        == sharding.logical_to_sharding(models.param_logical_axes(MC), mesh, models.param_shapes(MC))["embed"].spec
    )
    for k in ("loss", "grad_norm", "clip_frac", "approx_kl", "entropy", "frac_masked"):
        np.testing.assert_allclose(float(mmetrics[k]), float(metrics[k]), rtol=1e-4, atol=1e-6, err_msg=k)


def test_nonfinite_update_is_skipped_bit_identically_and_counted(params, step_fn):
    """A NaN temperature makes the loss and gradients NaN: every update it touches is skipped,
    params and optimizer state (its count too) stay bit-identical, the step still counts."""
    state, _ = step_fn(init_train_state(params, STEP_CFG), with_old(params, make_batch(7)))  # a moved optimizer state
    before = jax.device_get((state.params, state.opt_state))  # the step donates `state`
    batch = with_old(before[0], make_batch(8))
    state, metrics = step_fn(state, dict(batch, temperature=np.full(N, np.nan, np.float32)))
    assert int(metrics["nonfinite_skipped"]) == STEP_CFG.num_minibatches and int(state.step) == 2
    assert not np.isfinite(float(metrics["loss"]))
    for a, b in zip(
        jax.tree.leaves(before), jax.tree.leaves(jax.device_get((state.params, state.opt_state))), strict=True
    ):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # one poisoned row poisons its mini-batch only: the other update is applied
    temperature = batch["temperature"].copy()
    temperature[0] = np.nan
    state, metrics = step_fn(state, dict(batch, temperature=temperature))
    assert int(metrics["nonfinite_skipped"]) == 1 and step_fn._cache_size() == 1
    changed = jax.device_get(state.params)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(changed))
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before[0]), jax.tree.leaves(changed)))
    state, metrics = step_fn(state, batch)
    assert int(metrics["nonfinite_skipped"]) == 0


def test_all_finite_sees_one_inf_anywhere():
    from microcoder_jax.rl.step import all_finite

    tree = {"a": jnp.ones((3, 2)), "b": [jnp.zeros(4), jnp.ones(())]}
    assert bool(all_finite(tree))
    assert not bool(all_finite({**tree, "a": tree["a"].at[2, 1].set(jnp.inf)}))
    assert not bool(all_finite({**tree, "b": [jnp.zeros(4).at[0].set(jnp.nan), jnp.ones(())]}))
