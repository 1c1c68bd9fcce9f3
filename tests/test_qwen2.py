"""The Qwen2 family (q/k/v biases, no q/k norm: DeepSeek-R1-Distill-Qwen, Qwen2.5-Coder) through the
same functions as Qwen3: logits vs transformers' Qwen2ForCausalLM, sharded import, export, cached
decoding and the decode layout, presets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from microcoder_jax import sharding as shd
from microcoder_jax.models import (
    PRESETS,
    DecoderConfig,
    decoding_params,
    forward,
    init_cache,
    init_params,
    load_hf_params,
    param_logical_axes,
    param_shapes,
    save_hf_params,
)
from test_decoder import _hf_logits
from test_decoder import _inputs as qwen3_inputs
from tiny_checkpoint import make_tiny_hf_model

jit_forward = jax.jit(forward, static_argnums=1)


def _inputs(seed=0):
    return qwen3_inputs(length=24, pad=(0, 5, 11), seed=seed)


@pytest.fixture(
    scope="module",
    params=[dict(), dict(tie_word_embeddings=False, num_key_value_heads=1)],
    ids=["tied_gqa2", "untied_gqa4"],
)
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2")
    model = make_tiny_hf_model(seed=5, family="qwen2", **request.param)
    model.save_pretrained(path)
    return model, path


def test_config_reads_the_family_and_round_trips(checkpoint):
    _, path = checkpoint
    config = DecoderConfig.from_hf(path, dtype="float32")
    assert config.family == "qwen2" and config.attention_bias and not config.qk_norm
    assert config.head_dim == 16
    hf = config.to_hf()
    assert hf["architectures"] == ["Qwen2ForCausalLM"] and hf["model_type"] == "qwen2"
    assert DecoderConfig.from_hf(hf, dtype="float32") == config
    assert DecoderConfig.from_json(config.to_json()) == config
    assert {"q_bias", "k_bias", "v_bias"} <= set(param_shapes(config)["layers"])
    assert not {"q_norm", "k_norm"} & set(param_shapes(config)["layers"])


def test_logits_match_transformers(checkpoint):
    model, path = checkpoint
    config = DecoderConfig.from_hf(path, dtype="float32")
    params = load_hf_params(path, config)
    assert float(jnp.abs(params["layers"]["q_bias"]).max()) > 0  # the random biases were read
    ids, mask = _inputs()
    ours = np.asarray(jit_forward(params, config, jnp.asarray(ids), attention_mask=jnp.asarray(mask))[0])
    ref = _hf_logits(model, ids, mask)
    keep = mask.astype(bool)
    assert np.abs(ours[keep] - ref[keep]).max() / np.abs(ref[keep]).max() < 1e-5


def test_sharded_import_and_export_are_bitwise_and_load_in_transformers(checkpoint, tmp_path):
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    model, path = checkpoint
    config = DecoderConfig.from_hf(path, dtype="float32")
    mesh = shd.make_mesh(fsdp=2, tensor=4)
    params = load_hf_params(path, config, mesh=mesh)
    want = shd.logical_to_sharding(param_logical_axes(config), mesh, param_shapes(config))
    assert params["layers"]["q_bias"].sharding.is_equivalent_to(want["layers"]["q_bias"], 3)
    out = save_hf_params(params, config, tmp_path / "out")
    a, b = load_file(str(path / "model.safetensors")), load_file(str(out + "/model.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == "Qwen2ForCausalLM"
    ids, mask = _inputs(seed=1)
    keep = mask.astype(bool)  # (padding positions hold whatever a fully masked softmax gives; the loaded
    np.testing.assert_allclose(
        _hf_logits(hf, ids, mask)[keep],
        _hf_logits(model, ids, mask)[keep],  # model's
        rtol=1e-5,
        atol=1e-5,
    )  # attention kernel is sdpa, the reference's eager)


def test_cached_decoding_in_the_decode_layout_matches_the_full_forward(checkpoint):
    """Prefill then token-by-token steps over DecodingParams (the samplers' path) give the full
    forward's logits: the biases survive the (out, in) re-layout."""
    _, path = checkpoint
    config = DecoderConfig.from_hf(path, dtype="float32")
    params = load_hf_params(path, config)
    ids = jnp.asarray(np.random.RandomState(2).randint(3, 128, (2, 12)))
    full = np.asarray(jit_forward(params, config, ids)[0])
    dec = decoding_params(params, config)
    cache = init_cache(config, 2, 12)
    step = jax.jit(forward, static_argnums=1)
    logits, cache = step(
        dec,
        config,
        ids[:, :8],
        positions=jnp.broadcast_to(jnp.arange(8), (2, 8)),
        cache=cache,
        cache_index=0,
        attention_mask=jnp.ones((2, 12), bool),
    )
    got = [np.asarray(logits)]
    for i in range(8, 12):
        logits, cache = step(
            dec,
            config,
            ids[:, i : i + 1],
            positions=jnp.full((2, 1), i),
            cache=cache,
            cache_index=i,
            attention_mask=jnp.ones((2, 12), bool),
        )
        got.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(got, 1), full, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "name,billions",
    [("r1-distill-qwen-1.5b", 1.777), ("r1-distill-qwen-7b", 7.616), ("qwen2.5-1.5b", 1.544), ("qwen2.5-7b", 7.616)],
)
def test_preset_param_counts(name, billions):
    """Counts as Hugging Face reports them for the released checkpoints (biases included)."""
    config = PRESETS[name]
    assert config.family == "qwen2"
    assert abs(config.num_params() / 1e9 - billions) < 0.001


def test_random_init_has_zero_biases_and_unknown_family_is_refused():
    config = PRESETS["tiny-qwen2"].replace(dtype="float32")
    params = init_params(config, jax.random.PRNGKey(0))
    assert not float(jnp.abs(params["layers"]["k_bias"]).max())
    assert sum(x.size for x in jax.tree.leaves(params)) == config.num_params()
    with pytest.raises(ValueError, match="family must be one of"):
        config.replace(family="mistral")
    with pytest.raises(ValueError, match="Qwen2ForCausalLM"):
        DecoderConfig.from_hf({"architectures": ["MistralForCausalLM"], "model_type": "mistral"})


@pytest.mark.slow  # the paged engine's compile: ~1 min on 2 cores
def test_paged_engine_greedy_equals_transformers(tmp_path):
    """The paged engine (page pool, refills, the decode layout) decodes a Qwen2 model as transformers does."""
    from microcoder_jax.sampling.paged_sampler import generate_paged
    from tiny_checkpoint import hf_greedy

    model, path = make_tiny_hf_model(seed=6, family="qwen2", tie_word_embeddings=False), tmp_path
    model.save_pretrained(path)
    config = DecoderConfig.from_hf(path, dtype="float32")
    params = load_hf_params(path, config)
    prompts, stops = [[5, 17, 99], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]], [2, 10, 20]
    out = generate_paged(
        params,
        config,
        prompts,
        num_samples=1,
        max_new_tokens=10,
        stop_token_ids=stops,
        pad_id=0,
        slots=2,
        page_size=8,
        refill_every=1,
        tail_slots=2,
        temperature=0.0,
        rng=jax.random.key(0),
    )
    for row, prompt in enumerate(prompts):
        assert out.tokens[row, : out.lengths[row]].tolist() == hf_greedy(model, prompt, 10, stops, 0)
