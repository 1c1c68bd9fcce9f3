"""The vocab projection under a mesh: vocab-parallel log-probs = one device, and no LM-head-sized
collective in any chunk of the log-prob pass or the train step (the head moves once per call)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax import models, sharding
from microcoder_jax.plan import hlo
from microcoder_jax.rl import step as rl_step
from microcoder_jax.rl.logprobs import compute_logprobs, sequence_logprobs
from microcoder_jax.rl.presets import make_rl_config
from random_params import numpy_params

MC = dataclasses.replace(models.get_preset("tiny", dtype="float32"), vocab_size=256)
N, S = 8, 24


def _params(mc, seed=0):
    return numpy_params(mc, 0.3, seed)


@pytest.mark.slow
@pytest.mark.parametrize("tied", [True, False])
def test_vocab_parallel_logprobs_and_grads_equal_one_device(tied):
    mc = dataclasses.replace(MC, tie_word_embeddings=tied)
    params = _params(mc)
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, mc.vocab_size, (N, S)), jnp.int32)
    mask = jnp.asarray(np.arange(S)[None] >= rng.integers(0, 6, (N, 1)), jnp.int32)
    temps = jnp.asarray(rng.choice([0.7, 1.0, 1.3], N), jnp.float32)
    weight = jnp.asarray(rng.standard_normal((N, S)), jnp.float32) * mask

    def loss(p):
        logp, ent = sequence_logprobs(p, mc, tokens, mask, temps, chunk=7)
        return jnp.sum(logp * weight), (logp, ent)

    fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (want_l, (want_lp, want_ent)), want_g = fn(params)
    mesh = sharding.make_mesh(data=1, fsdp=4, tensor=2)
    sh = sharding.logical_to_sharding(models.param_logical_axes(mc), mesh, models.param_shapes(mc))
    with jax.set_mesh(mesh):
        (got_l, (got_lp, got_ent)), got_g = fn(jax.device_put(params, sh))
    np.testing.assert_allclose(np.asarray(got_lp), np.asarray(want_lp), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got_ent), np.asarray(want_ent), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(got_l), float(want_l), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-5 * float(np.abs(b).max()))


BIG = dataclasses.replace(models.get_preset("tiny", dtype="bfloat16"), vocab_size=4096, hidden_size=128)
HEAD_BYTES = BIG.vocab_size * BIG.hidden_size * 2  # the bf16 LM head
ROWS, WIDTH, CHUNK = 16, 96, 16  # 6 chunks of the vocab projection per micro-batch


def _abstract(mesh):
    rows = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=sharding.batch_sharding(mesh, len(shape)))  # noqa: E731
    cfg = make_rl_config("microcoder", group_size=4, num_minibatches=2, micro_batch_size=4, logprob_chunk=CHUNK)
    state = jax.eval_shape(lambda: rl_step.init_train_state(models.init_params(BIG, jax.random.key(0)), cfg))
    state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state, rl_step.state_shardings(BIG, cfg, mesh)
    )
    batch = {k: rows((ROWS, WIDTH), jnp.int32) for k in ("tokens", "attention_mask", "response_mask")}
    batch.update(
        {k: rows((ROWS,), bool) for k in ("passed", "no_code", "truncated")},
        rewards=rows((ROWS,), jnp.float32),
        temperature=rows((ROWS,), jnp.float32),
        response_lengths=rows((ROWS,), jnp.int32),
        old_logprobs=rows((ROWS, WIDTH), jnp.float32),
    )
    return cfg, state, batch


def _chunk_loop_bytes(compiled) -> list[int]:
    chunks = -(-(WIDTH - 1) // CHUNK)
    found = [loop.bytes_per_iteration for loop in hlo.loops(compiled.as_text()) if loop.trip_count == chunks]
    assert found, "no loop over the vocab projection's chunks in the program"
    return found


@pytest.mark.parametrize("tensor", [1, 2])
@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_vocab_projection_collectives_are_bounded(tensor):
    """Per chunk, the collectives move < 1/16 of the LM head (before: one all-gather of the head
    and, in the train step, one all-reduce of its gradient in every chunk)."""
    mesh = sharding.make_mesh(data=1, fsdp=8 // tensor, tensor=tensor)
    cfg, state, batch = _abstract(mesh)
    with jax.set_mesh(mesh):
        step = rl_step.make_train_step(BIG, cfg, mesh).jitted.lower(state, batch).compile()
        logp = compute_logprobs.jitted.lower(
            state.params,
            BIG,
            batch["tokens"],
            batch["attention_mask"],
            batch["temperature"],
            chunk=CHUNK,
            micro_batch=8,
        ).compile()
    for name, compiled in (("train step", step), ("log-prob pass", logp)):
        per_chunk = _chunk_loop_bytes(compiled)
        assert all(b < HEAD_BYTES / 16 for b in per_chunk), (name, per_chunk, HEAD_BYTES)
        total = sum(loop.bytes_per_iteration * (loop.trip_count or 1) for loop in hlo.loops(compiled.as_text()))
        # the rest is FSDP's per-micro-batch weight gathers and gradient reductions (~1-3 heads each)
        assert total < 12 * HEAD_BYTES, (name, total / HEAD_BYTES)
