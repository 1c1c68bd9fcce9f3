"""The Flax NNX decoder against the functional model and transformers; params, grads, optimizer
state and checkpoints shared with the functional core."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from flax import nnx

from microcoder_jax import models, sharding
from microcoder_jax.models.checkpoint import Checkpointer, load_params
from microcoder_jax.models.flax_decoder import Decoder, load_optax_state, logical_axes, mesh_shardings, optax_state
from microcoder_jax.models.hf import load_hf_params
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_optimizer
from tiny_checkpoint import make_tiny_hf_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An untied GQA tiny checkpoint from transformers, its config and params, and inputs."""
    path = tmp_path_factory.mktemp("hf")
    hf = make_tiny_hf_model(seed=3, tie_word_embeddings=False)
    hf.save_pretrained(path)
    config = models.DecoderConfig.from_hf(path, dtype="float32")
    ids = np.random.RandomState(0).randint(3, 128, (2, 12))
    mask = np.ones_like(ids)
    mask[1, :4] = 0  # left padding
    return hf, config, load_hf_params(path, config), jnp.asarray(ids), jnp.asarray(mask)


@nnx.jit
def module_logits(model, ids, mask):
    return model(ids, attention_mask=mask)[0]


functional_logits = jax.jit(lambda p, c, ids, mask: models.forward(p, c, ids, attention_mask=mask)[0], static_argnums=1)


def loss(logits, mask):
    return jnp.sum(jax.nn.logsumexp(logits, -1) * mask) / mask.sum()


def test_module_equals_functional_model_and_transformers(tiny):
    hf, config, params, ids, mask = tiny
    got = np.asarray(module_logits(Decoder(config, params), ids, mask))
    np.testing.assert_array_equal(got, np.asarray(functional_logits(params, config, ids, mask)))
    positions = np.maximum(np.asarray(mask).cumsum(-1) - 1, 0)
    with torch.no_grad():
        want = hf(
            torch.tensor(np.asarray(ids)),
            attention_mask=torch.tensor(np.asarray(mask)),
            position_ids=torch.tensor(positions),
        ).logits.numpy()
    keep = np.asarray(mask).astype(bool)
    assert np.abs(got[keep] - want[keep]).max() / np.abs(want[keep]).max() < 1e-5


def test_params_convert_both_ways_without_copies(tiny):
    _, config, params, ids, mask = tiny
    model = Decoder(config, params)
    assert all(a is b for a, b in zip(jax.tree.leaves(model.to_params()), jax.tree.leaves(params), strict=True))
    assert jax.tree.structure(model.to_params()) == jax.tree.structure(params)
    assert model.layers["q_proj"].get_value() is params["layers"]["q_proj"]
    assert model.embed.get_metadata("out_sharding") == ("vocab", "embed")
    assert logical_axes(model) == models.param_logical_axes(config)
    graphdef, state = nnx.split(model)  # the usual Flax round trip keeps arrays and metadata
    again = nnx.merge(graphdef, state)
    assert again.lm_head.get_value() is params["lm_head"] and again.config == config
    zeros = jax.tree.map(jnp.zeros_like, params)
    nnx.update(again, zeros)  # a params dict loads into the module's state as is
    assert again.to_params()["layers"]["up_proj"] is zeros["layers"]["up_proj"]
    with pytest.raises(ValueError, match="layers.k_proj has shape"):
        Decoder(config, {**params, "layers": {**params["layers"], "k_proj": params["layers"]["q_proj"]}})
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        Decoder(config.replace(tie_word_embeddings=True), params)
    with pytest.raises(ValueError, match="rngs"):
        Decoder(config)
    drawn = Decoder(config, rngs=nnx.Rngs(0))
    assert jax.tree.map(jnp.shape, drawn.to_params()) == jax.tree.map(jnp.shape, params)
    assert float(drawn.final_norm.get_value().min()) == 1.0 and float(jnp.std(drawn.embed.get_value())) > 0.01


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_grads_and_optimizer_state_are_the_functional_ones(tiny):
    """nnx.grad through the module = jax.grad of forward; an nnx.Optimizer step with the train
    step's optimizer = the optax update on the params dict; optax states convert both ways."""
    _, config, params, ids, mask = tiny
    model = Decoder(config, params)
    m = mask.astype(jnp.float32)
    grad_state = nnx.jit(nnx.grad(lambda mod: loss(mod(ids, attention_mask=mask)[0], m)))(model)
    grads = nnx.to_pure_dict(grad_state)
    want = jax.jit(jax.grad(lambda p: loss(functional_logits(p, config, ids, mask), m)))(params)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)

    tx = make_optimizer(make_rl_config("microcoder", learning_rate=1e-2, warmup_steps=0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    ours = jax.tree.map(lambda x: x + 0.5 if x.dtype == jnp.float32 else x, tx.init(params))
    load_optax_state(optimizer, ours)  # e.g. a training checkpoint's opt_state
    back = optax_state(optimizer, params)
    assert jax.tree.structure(back) == jax.tree.structure(ours)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(ours), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    optimizer.update(model, grad_state)
    updates, new_state = tx.update(want, ours, params)
    for a, b in zip(jax.tree.leaves(model.to_params()), jax.tree.leaves(optax.apply_updates(params, updates))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    for a, b in zip(jax.tree.leaves(optax_state(optimizer, params)), jax.tree.leaves(new_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-8)


def test_checkpoint_params_load_into_the_module(tiny, tmp_path):
    _, config, params, ids, mask = tiny
    rl = make_rl_config("microcoder")
    state = init_train_state(params, rl)
    ckpt = Checkpointer(str(tmp_path / "ckpt"), async_save=False)
    ckpt.save(3, state, {"step": 3})
    ckpt.close()
    restored, step = load_params(str(tmp_path / "ckpt"), params)
    assert step == 3
    got = module_logits(Decoder(config, restored), ids, mask)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(functional_logits(params, config, ids, mask)))


def test_mesh_shardings_follow_the_logical_axes(tiny):
    """On a (data=2, fsdp=4) mesh: hidden dims FSDP-sharded, the rest replicated; a module whose
    Params were put there computes the same logits."""
    _, config, params, ids, mask = tiny
    mesh = sharding.make_mesh(data=2, fsdp=4)
    model = Decoder(config, params)
    specs = jax.tree.map(lambda s: tuple(s.spec), mesh_shardings(model, mesh))
    assert specs["embed"] == (None, "fsdp") and specs["lm_head"] == ("fsdp", None)
    assert specs["layers"]["o_proj"] == (None, None, None, "fsdp")
    assert specs["layers"]["q_norm"] == (None, None)
    with jax.set_mesh(mesh):
        nnx.update(model, jax.device_put(model.to_params(), mesh_shardings(model, mesh)))
        got = module_logits(model, ids, mask)
    assert model.layers["down_proj"].get_value().sharding.spec == jax.sharding.PartitionSpec(None, None, "fsdp")
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(functional_logits(params, config, ids, mask)), rtol=1e-5, atol=1e-5
    )
