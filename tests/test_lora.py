"""LoRA (models/lora.py): fresh adapters leave the base's logits exact, only adapters train, the
int8 base stays close, merged weights equal the adapter forward (the sampler and the old-log-prob
pass read them; rank 0's pass is unchanged), the config block checks its values, the split-mesh
sync moves adapters only; slow: an int8 LoRA step (and its merged old-log-prob pass) on an FSDP
mesh equals one device's, a LoRA demo run resumed from a checkpoint ends bit for bit where an
uninterrupted one does, and a checkpoint on another base is refused in one line."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax import models, sharding
from microcoder_jax.models import lora
from microcoder_jax.models.presets import model_config_from
from microcoder_jax.rl.logprobs import batch_logprobs, compute_logprobs, micro_batched_logprobs
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_train_step, minibatch_grads
from microcoder_jax.sampling.static_sampler import generate
from microcoder_jax.trainer.worker import transfer
from microcoder_jax.rl.batch import SCORING_FIELDS
from test_rl_step import MC, make_batch

LC = MC.replace(lora_rank=4, lora_alpha=8.0, lora_targets=lora.PROJECTIONS)
IDS = np.random.default_rng(0).integers(1, MC.vocab_size, (2, 9)).astype(np.int32)


def _forward(params, config):
    return np.asarray(models.forward(params, config, jnp.asarray(IDS))[0])


@pytest.fixture(scope="module")
def base():
    return models.init_params(MC, jax.random.PRNGKey(0))


def _nonzero_b(params, seed=1):
    """The adapters with B drawn at random (a fresh B is zero: nothing could differ)."""
    rng = np.random.default_rng(seed)
    layers = {
        k: (jnp.asarray(rng.normal(0, 0.05, v.shape), v.dtype) if k.endswith(lora.B) else v)
        for k, v in params["layers"].items()
    }
    return {**params, "layers": layers}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fresh_adapters_leave_the_base_logits_exactly(base, dtype):
    plain, adapted = MC.replace(dtype=dtype), LC.replace(dtype=dtype)
    params = lora.attach(base, adapted, jax.random.PRNGKey(1))
    assert all(not np.any(np.asarray(v)) for k, v in params["layers"].items() if k.endswith(lora.B))
    assert any(np.any(np.asarray(v)) for k, v in params["layers"].items() if k.endswith(lora.A))
    np.testing.assert_array_equal(_forward(params, adapted), _forward(base, plain))


@pytest.mark.slow
def test_merged_weights_equal_the_adapter_forward_and_the_sampler_decodes_them(base):
    params = _nonzero_b(lora.attach(base, LC, jax.random.PRNGKey(1)))
    adapted, merged = _forward(params, LC), _forward(lora.merge(params, LC), MC)
    assert np.abs(adapted - _forward(base, MC)).max() > 0.1  # the adapters do change the model
    np.testing.assert_allclose(adapted, merged, atol=2e-5)
    # the sampler's decode copy folds the adapters in: greedy answers equal the merged model's
    kw = dict(num_samples=1, temperature=0.0, max_new_tokens=6, stop_token_ids=[0], pad_id=0, rng=jax.random.PRNGKey(0))
    prompts = [list(IDS[0]), list(IDS[1, :5])]
    ours = generate(params, LC, prompts, **kw)
    ref = generate(lora.merge(params, LC), MC, prompts, **kw)
    np.testing.assert_array_equal(np.asarray(ours.tokens), np.asarray(ref.tokens))


@pytest.mark.slow  # 32 s for the int8 case alone: over the quick tier's share
@pytest.mark.parametrize("base_dtype", ["", "int8"])
def test_unmerged_decoding_reads_the_stored_base_and_samples_as_merged(base, base_dtype):
    """lora.decode=unmerged: the decode layout keeps the stored base (an int8 base stays int8, a
    third of the merged copy's bytes at fp32 compute here) and 2-D adapters, no merged copy; the
    static and the paged sampler then pick the merged decode's greedy tokens, at its log-probs."""
    from microcoder_jax.sampling.paged_sampler import generate_paged

    merged_cfg = LC.replace(base_dtype=base_dtype)
    unmerged_cfg = merged_cfg.replace(lora_decode="unmerged")
    params = _nonzero_b(lora.attach(base, merged_cfg, jax.random.PRNGKey(1)))
    dec_m, dec_u = models.decoding_params(params, merged_cfg), models.decoding_params(params, unmerged_cfg)
    layer = dec_u.layers[0]
    assert not any(lora.is_adapter(k) or k.endswith(lora.SCALE) for k in dec_m.layers[0])
    for name in lora.PROJECTIONS:
        assert layer[name].shape == dec_m.layers[0][name].shape  # (out, in) either way
        assert layer[name].dtype == (jnp.int8 if base_dtype else jnp.dtype(LC.dtype))
        assert layer[name + lora.A].shape == (layer[name].shape[1], LC.lora_rank)
        assert layer[name + lora.B].shape == (LC.lora_rank, layer[name].shape[0])
        assert (name + lora.SCALE in layer) == bool(base_dtype)
    weights = lambda d: sum(x.nbytes for lay in d.layers for k, x in lay.items() if "norm" not in k)  # noqa: E731
    if base_dtype:
        assert weights(dec_u) < 0.4 * weights(dec_m)
    # the layout's logical axes name every leaf the layout holds
    axes, _ = models.decoding.decoding_layout(
        unmerged_cfg, models.param_logical_axes(unmerged_cfg), models.param_shapes(unmerged_cfg)
    )
    assert set(axes.layers[0]) == set(layer)
    assert all(len(axes.layers[0][k]) == layer[k].ndim for k in layer)
    kw = dict(num_samples=1, temperature=0.0, max_new_tokens=6, stop_token_ids=[0], pad_id=0, rng=jax.random.PRNGKey(0))
    prompts = [list(IDS[0]), list(IDS[1, :5])]
    for sample in (generate, generate_paged) if base_dtype else (generate,):  # int8: the paged engine's path too
        ours, ref = sample(params, unmerged_cfg, prompts, **kw), sample(params, merged_cfg, prompts, **kw)
        np.testing.assert_array_equal(np.asarray(ours.tokens), np.asarray(ref.tokens))
        np.testing.assert_allclose(np.asarray(ours.logprobs), np.asarray(ref.logprobs), atol=1e-4)


def _dot_count(params, config, args) -> int:
    """Matmuls in the old-log-prob pass's program (nested scan and remat bodies included)."""
    fn = lambda p, *a: batch_logprobs(p, config, *a, chunk=8, micro_batch=8)  # noqa: E731
    return str(jax.make_jaxpr(fn)(params, *args)).count("dot_general")


_unmerged_logprobs = jax.jit(micro_batched_logprobs, static_argnames=("model_config", "chunk", "micro_batch"))


@pytest.mark.parametrize(
    "dtype, base_dtype, atol",
    [("float32", "", 1e-5), ("float32", "int8", 1e-5), ("bfloat16", "", 0.02), ("bfloat16", "int8", 0.02)],
)
def test_the_old_logprob_pass_reads_merged_weights_and_equals_the_adapter_forward(base, dtype, base_dtype, atol):
    """fp32: to float rounding (measured 9.5e-7); bf16: the merged weight is rounded once, the
    adapter forward rounds two products (measured 0.0054 plain, 0.0072 int8, of |log p| up to 5.5)."""
    config = LC.replace(dtype=dtype, base_dtype=base_dtype)
    params = _nonzero_b(lora.attach(base, config, jax.random.PRNGKey(1)))
    batch = make_batch(0)
    args = (batch["tokens"], batch["attention_mask"], batch["temperature"])
    merged = np.asarray(compute_logprobs(params, config, *args, chunk=8, micro_batch=8))
    unmerged = np.asarray(_unmerged_logprobs(params, config, *args, chunk=8, micro_batch=8))
    plain = np.asarray(compute_logprobs(base, MC.replace(dtype=dtype), *args, chunk=8, micro_batch=8))
    assert np.abs(unmerged - plain).max() > 0.5  # the adapters do change the log-probs
    assert np.abs(merged - unmerged).max() < atol, np.abs(merged - unmerged).max()
    if dtype == "float32" and not base_dtype:  # one matmul per projection: the 7 merges' and the plain model's
        assert _dot_count(params, config, args) == _dot_count(base, MC, args) + len(lora.PROJECTIONS)


def test_full_finetuning_scores_on_the_unchanged_program(base):
    """Rank 0: the pass is the plain forward, bit for bit (no merge, no change of program)."""
    batch = make_batch(1)
    args = (batch["tokens"], batch["attention_mask"], batch["temperature"])
    scored, config = lora.for_scoring(base, MC, models.param_logical_axes)
    assert scored is base and config is MC
    np.testing.assert_array_equal(
        np.asarray(compute_logprobs(base, MC, *args, chunk=8, micro_batch=8)),
        np.asarray(_unmerged_logprobs(base, MC, *args, chunk=8, micro_batch=8)),
    )


def test_an_int8_base_is_stored_in_int8_and_stays_close(base):
    config = LC.replace(base_dtype="int8")
    params = lora.attach(base, config, jax.random.PRNGKey(1))
    layers = params["layers"]
    assert all(layers[n].dtype == jnp.int8 for n in lora.PROJECTIONS)
    assert set(jax.tree.structure(params).node_data()[1]) == set(jax.tree.structure(base).node_data()[1])
    int8_bytes = sum(layers[n].nbytes + layers[n + lora.SCALE].nbytes for n in lora.PROJECTIONS)
    assert int8_bytes < 0.3 * sum(base["layers"][n].nbytes for n in lora.PROJECTIONS)  # fp32 -> int8 + scales
    got, want = _forward(params, config), _forward(base, MC)
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < rel < 0.02, rel  # per-channel int8: within 2% of the largest logit on this model
    # the shape tree the planner and the checkpoints use is the one attach builds
    shapes = jax.eval_shape(lambda: models.init_params(config, jax.random.PRNGKey(0)))
    assert jax.tree.map(lambda s: (s.shape, s.dtype), shapes) == jax.tree.map(lambda x: (x.shape, x.dtype), params)


def test_only_the_adapters_train(base):
    cfg = make_rl_config(group_size=4, num_minibatches=2, micro_batch_size=4, learning_rate=1e-2)
    params = lora.attach(base, LC, jax.random.PRNGKey(1))
    adapter_names = sorted(k for k in params["layers"] if lora.is_adapter(k))
    assert len(adapter_names) == 2 * len(lora.PROJECTIONS)
    state = init_train_state(params, cfg)
    mu = state.opt_state[1][0].mu  # clip -> adamw's ScaleByAdamState: moments of the adapters only
    assert sorted(mu["layers"]) == adapter_names and set(mu) == {"layers"}
    # gradients are formed for the adapters only
    trained, frozen = lora.split(state.params)
    mini = {**jax.tree.map(jnp.asarray, make_batch(0))}
    mini = {k: mini[k] for k in ("tokens", "attention_mask", "temperature") if k in mini} | {
        "loss_mask": jnp.asarray(make_batch(0)["response_mask"], jnp.float32),
        "advantages": jnp.ones(16, jnp.float32),
        "old_logprobs": jnp.zeros((16, 18), jnp.float32),
    }
    grads = minibatch_grads(trained, mini, LC, cfg, 4, frozen=frozen)[0]
    assert jax.tree.structure(grads) == jax.tree.structure(trained)
    before = jax.tree.map(np.asarray, state.params)
    step = make_train_step(LC, cfg)
    for i in range(3):
        batch = make_batch(i)
        old = compute_logprobs(state.params, LC, batch["tokens"], batch["attention_mask"], batch["temperature"])
        state, metrics = step(state, dict(batch, old_logprobs=np.asarray(old)))
        assert int(metrics["nonfinite_skipped"]) == 0
    after = jax.tree.map(np.asarray, state.params)
    for name in before["layers"]:
        same = np.array_equal(before["layers"][name], after["layers"][name])
        assert same != lora.is_adapter(name), name  # every base leaf bitwise kept, every adapter moved
    for name in ("embed", "final_norm"):
        np.testing.assert_array_equal(before[name], after[name])


@pytest.mark.slow
def test_an_int8_lora_step_on_an_fsdp_mesh_matches_one_device(base):
    config = LC.replace(base_dtype="int8")
    cfg = make_rl_config(group_size=4, num_minibatches=1, micro_batch_size=4, learning_rate=1e-2)
    params = _nonzero_b(lora.attach(base, config, jax.random.PRNGKey(1)))
    mesh = sharding.make_mesh(data=2, fsdp=4)
    sharded = init_train_state(params, cfg, mesh, model_config=config)
    assert sharded.params["layers"]["q_proj"].dtype == jnp.int8
    assert sharded.params["layers"]["up_proj_lora_a"].sharding.spec != jax.sharding.PartitionSpec()  # FSDP-split
    one = init_train_state(params, cfg)
    batch = dict(make_batch(3), old_logprobs=np.full((16, 18), -3.0, np.float32))  # the same for both
    rows = (batch["tokens"], batch["attention_mask"], batch["temperature"])
    lp_one = np.asarray(compute_logprobs(one.params, config, *rows))  # the merged old-log-prob pass
    with jax.set_mesh(mesh):  # under the mesh the merged copy is placed as the stored base
        np.testing.assert_allclose(np.asarray(compute_logprobs(sharded.params, config, *rows)), lp_one, atol=1e-5)
    np.testing.assert_allclose(np.asarray(compute_logprobs(sharded.params, config, *rows)), lp_one, atol=1e-5)
    sharded, m_sharded = make_train_step(config, cfg, mesh)(sharded, batch)
    one, m_one = make_train_step(config, cfg)(one, batch)
    np.testing.assert_allclose(float(m_sharded["loss"]), float(m_one["loss"]), rtol=1e-4, atol=1e-6)
    for a, b in zip(jax.tree.leaves(sharded.params), jax.tree.leaves(one.params), strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-4, atol=1e-6)


def test_rank_zero_is_full_finetuning_and_bad_values_are_named():
    c = config_lib.demo_config()
    assert model_config_from(c, 64) == model_config_from(c, 64, lora.LoRAConfig())  # rank 0: no adapter field set
    c.lora.rank = 8
    mc = model_config_from(c, 64)
    assert mc.lora_rank == 8 and mc.lora_targets == lora.PROJECTIONS and mc.num_adapter_params() > 0
    assert models.DecoderConfig.from_json(mc.to_json()) == mc
    with pytest.raises(ValueError, match=r"lora.targets=.*distinct names from q, k, v, o, gate, up, down"):
        lora.LoRAConfig(rank=4, targets=("q", "qkv"))
    with pytest.raises(ValueError, match=r"lora.base_dtype='int8'.*set lora.rank > 0"):
        lora.LoRAConfig(base_dtype="int8")
    with pytest.raises(ValueError, match=r"lora.base_dtype='nf4'"):
        lora.LoRAConfig(rank=4, base_dtype="nf4")
    with pytest.raises(ValueError, match=r"lora.decode='unmerged'.*set lora.rank > 0"):
        lora.LoRAConfig(decode="unmerged")
    with pytest.raises(ValueError, match=r"lora.decode='fused'"):
        lora.LoRAConfig(rank=4, decode="fused")
    c.lora.decode = "unmerged"
    assert model_config_from(c, 64).lora_decode == "unmerged"
    assert lora.base_config(model_config_from(c, 64)).lora_decode == "merged"


def test_a_split_mesh_sync_moves_only_the_adapters(base):
    rollout, learner = sharding.split_devices(4, jax.devices())
    lmesh, rmesh = sharding.make_mesh(1, 4, 1, devices=learner), sharding.make_mesh(1, 4, 1, devices=rollout)
    axes, shapes = models.param_logical_axes(LC), models.param_shapes(LC)
    params = jax.device_put(
        lora.attach(base, LC, jax.random.PRNGKey(1)), sharding.logical_to_sharding(axes, lmesh, shapes)
    )
    target = sharding.logical_to_sharding(axes, rmesh, shapes)
    first, all_bytes, _ = transfer(params, target)
    assert all_bytes == sum(x.nbytes for x in jax.tree.leaves(params))
    newer = _nonzero_b(params)
    again, nbytes, _ = transfer(newer, target, replaces=first)
    assert nbytes == sum(x.nbytes for x in jax.tree.leaves(lora.split(newer)[0]))
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(newer), strict=True):
        assert set(a.devices()) <= set(rollout)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------------------- the loop (slow)


def _config(steps, **overrides):
    from short_demo import short_demo

    c = short_demo(steps, **{"lora.rank": 4, "lora.alpha": 8.0, "train.checkpoint_every": 1, **overrides})
    c.data.num_prompts, c.demo.problems_per_op = 4, 2
    return c


def _run(workdir, steps, **overrides):
    from microcoder_jax.trainer import loop as train

    return train.train(_config(steps, **overrides), str(workdir), log_fn=lambda *a: None)


def _saved_params(workdir, step):
    """The params a checkpoint holds, read with the LoRA run's checkpoint layout (adapters only)."""
    from microcoder_jax.models.checkpoint import load_params
    from microcoder_jax.trainer.setup import abstract_train_state, setup

    target = abstract_train_state(setup(_config(step), str(workdir))).params
    return jax.tree.map(np.asarray, load_params(os.path.join(workdir, "checkpoints"), target, step)[0])


@pytest.mark.slow
def test_a_lora_run_resumes_exactly_and_refuses_another_base(tmp_path):
    from short_demo import untimed_rows

    _run(tmp_path / "whole", 3)
    _run(tmp_path / "cut", 2)
    _run(tmp_path / "cut", 3)  # resumed from step 2's checkpoint: adapters + Adam state, base rebuilt
    assert untimed_rows(tmp_path / "whole") == untimed_rows(tmp_path / "cut")
    saved = _saved_params(tmp_path / "cut", 3)
    assert set(saved) == {"layers"} and all(lora.is_adapter(k) for k in saved["layers"])  # no base stored
    jax.tree.map(np.testing.assert_array_equal, saved, _saved_params(tmp_path / "whole", 3))
    with pytest.raises(config_lib.ConfigError, match=r"adapters trained on another base model .* new workdir"):
        _run(tmp_path / "cut", 4, **{"train.warm_start_steps": 31, "train.allow_config_change": True})


def test_the_lora_experiments_arms_differ_from_full_finetuning_only_in_their_keys(tmp_path):
    from microcoder_jax.experiments import lora as experiment
    from microcoder_jax.experiments.runner import run_config

    full, *adapted = [run_config(arm, 0, 40, False, str(tmp_path)) for arm in experiment.ARMS]
    assert full.lora.rank == 0 and all(c.lora.rank == 8 and c.lora.alpha == 16.0 for c in adapted)
    assert [c.lora.base_dtype for c in adapted] == ["", "", "int8"]
    lr = full.rl.learning_rate
    assert [c.rl.learning_rate for c in adapted] == pytest.approx([lr, 4 * lr, 4 * lr])
    for c in adapted:  # everything else is the full fine-tuning arm's
        assert {k: v for k, v in config_lib.to_dict(c).items() if k not in ("lora", "rl")} == {
            k: v for k, v in config_lib.to_dict(full).items() if k not in ("lora", "rl")
        }


def test_kl_reference_is_the_frozen_base_without_a_copy(base):
    """rl.kl_beta > 0 under LoRA: the learner keeps no reference copy; its reference log-probs are
    the base model's, exactly, even after the adapters moved (B != 0)."""
    from types import SimpleNamespace

    from microcoder_jax.trainer.learner import Learner

    cfg = make_rl_config("microcoder", group_size=4, kl_beta=0.05)
    params = _nonzero_b(lora.attach(base, LC, jax.random.PRNGKey(2)))
    b = make_batch(4)
    first = int(np.flatnonzero(b["response_mask"].any(0))[0])  # the prompt bucket: its columns are not scored
    run = SimpleNamespace(model_config=LC, rl_config=cfg, mesh=None, data=SimpleNamespace(prompt_buckets=(first,)))
    learner = Learner(run, init_train_state(params, cfg), None)
    scores = learner.score({k: b[k] for k in SCORING_FIELDS})
    want = np.asarray(compute_logprobs(base, MC, b["tokens"], b["attention_mask"], b["temperature"]))[:, first:]
    np.testing.assert_allclose(np.asarray(scores["ref_logprobs"])[:, first:], want, atol=1e-6)
    assert not np.asarray(scores["ref_logprobs"])[:, :first].any()
    assert np.abs(np.asarray(scores["old_logprobs"])[:, first:] - want).max() > 1e-4  # the adapters moved
