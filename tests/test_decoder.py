"""The decoder (models/decoder.py) against transformers' PyTorch Qwen3 (fp32), KV-cache decoding, remat,
attention kernels, presets; tests/test_qwen2.py runs the Qwen2 family through the same functions."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from microcoder_jax.models import (
    PRESETS,
    DecoderConfig,
    decoding_params,
    forward,
    init_cache,
    init_params,
    lm_head,
    param_logical_axes,
)
from microcoder_jax.models import attention as attn_lib
from microcoder_jax.models.decoding import DecodingParams
from microcoder_jax.models.hf import load_hf_params
from tiny_checkpoint import make_tiny_hf_model, saved_tiny_model

jit_forward = jax.jit(forward, static_argnums=1, static_argnames="return_hidden")

# (name, HF config overrides): tied/untied, q/kv head ratios 1, 2, 4, head_dim != hidden/heads, rope types.
CASES = [
    ("tied_gqa2", dict()),
    ("untied_mha", dict(tie_word_embeddings=False, num_key_value_heads=4)),
    ("gqa4_headdim24", dict(num_key_value_heads=1, head_dim=24, tie_word_embeddings=False)),
    ("yarn", dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})),
    ("linear", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}, num_hidden_layers=3)),
]


def _inputs(batch=3, length=40, pad=(0, 5, 17), vocab=128, seed=0):
    ids = np.random.RandomState(seed).randint(3, vocab, (batch, length))
    mask = np.ones((batch, length), np.int32)
    for row, p in enumerate(pad):
        mask[row, :p] = 0
    return ids, mask


def _hf_logits(model, ids, mask):
    positions = np.maximum(mask.cumsum(-1) - 1, 0)
    with torch.no_grad():
        out = model(torch.tensor(ids), attention_mask=torch.tensor(mask), position_ids=torch.tensor(positions))
    return out.logits.numpy()


def _max_rel_err(ours, ref, mask):
    keep = mask.astype(bool)
    return float(np.abs(ours[keep] - ref[keep]).max() / np.abs(ref[keep]).max())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The default tiny checkpoint (GQA 2, tied), loaded once for the cache/remat tests."""
    return saved_tiny_model(tmp_path_factory.mktemp("tiny"), seed=1)


@pytest.mark.parametrize("name,overrides", CASES, ids=[c[0] for c in CASES])
def test_logits_match_transformers(name, overrides, tmp_path):
    model = make_tiny_hf_model(seed=0, **overrides)
    model.save_pretrained(tmp_path)
    config = DecoderConfig.from_hf(tmp_path, dtype="float32")
    params = load_hf_params(tmp_path, config)
    ids, mask = _inputs()
    ours, _ = jit_forward(params, config, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    assert ours.dtype == jnp.float32 and ours.shape == (3, 40, 128)
    assert _max_rel_err(np.asarray(ours), _hf_logits(model, ids, mask), mask) < 1e-5


def test_hidden_then_lm_head_equals_logits(tiny):
    _, config, params = tiny
    ids, mask = _inputs()
    logits, _ = jit_forward(params, config, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    hidden, _ = jit_forward(params, config, jnp.asarray(ids), attention_mask=jnp.asarray(mask), return_hidden=True)
    assert hidden.shape == (3, 40, config.hidden_size)
    np.testing.assert_allclose(lm_head(params, config, hidden), logits, rtol=1e-6, atol=1e-6)


def test_kv_cache_decoding_matches_full_forward(tiny):
    """Prefill a left-padded prompt, then decode one token at a time: same logits as one full pass."""
    _, config, params = tiny
    prompt_len, new, max_len = 12, 6, 24
    ids, mask = _inputs(length=prompt_len + new, pad=(0, 3, 7))
    full, _ = jit_forward(params, config, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    positions = np.maximum(mask.cumsum(-1) - 1, 0)
    slot_mask = np.zeros((3, max_len), np.int32)
    slot_mask[:, : prompt_len + new] = mask

    step = jax.jit(forward, static_argnums=1, donate_argnames="cache")
    cache = init_cache(config, 3, max_len)
    assert len(cache.k) == config.num_layers
    assert cache.k[0].shape == (3, config.num_kv_heads, max_len, config.head_dim)
    logits, cache = step(
        params,
        config,
        jnp.asarray(ids[:, :prompt_len]),
        attention_mask=jnp.asarray(slot_mask),
        positions=jnp.asarray(positions[:, :prompt_len]),
        cache=cache,
        cache_index=0,
    )
    got = [logits]
    for t in range(prompt_len, prompt_len + new):
        logits, cache = step(
            params,
            config,
            jnp.asarray(ids[:, t : t + 1]),
            attention_mask=jnp.asarray(slot_mask),
            positions=jnp.asarray(positions[:, t : t + 1]),
            cache=cache,
            cache_index=t,
        )
        got.append(logits)
    got = np.concatenate([np.asarray(g) for g in got], axis=1)
    assert _max_rel_err(got, np.asarray(full), mask) < 1e-5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decoding_params_give_the_same_logits(dtype):
    """Cast, (out, in)-transposed, per-layer params (the decode loop's) = the stored params, untied head too."""
    config = DecoderConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        tie_word_embeddings=False,
        dtype=dtype,
    )
    params = init_params(config, jax.random.key(3))
    prepared = decoding_params(params, config)
    assert isinstance(prepared, DecodingParams) and len(prepared.layers) == 2
    assert prepared.layers[0]["gate_proj"].shape == (48, 32) and prepared.lm_head.shape == (96, 32)
    assert prepared.layers[0]["q_proj"].shape == (4 * 16, 32) and prepared.layers[1]["o_proj"].shape == (32, 64)
    assert prepared.layers[0]["q_proj"].dtype == jnp.dtype(dtype)
    assert prepared.layers[0]["q_norm"].dtype == jnp.float32  # norms keep the param dtype
    ids, _ = _inputs(batch=2, length=5, pad=(0, 0), vocab=96)
    kw = dict(attention_mask=jnp.ones((2, 8), jnp.int32), positions=jnp.tile(jnp.arange(5), (2, 1)), cache_index=0)
    want, want_cache = jit_forward(params, config, jnp.asarray(ids), cache=init_cache(config, 2, 8), **kw)
    got, got_cache = jit_forward(prepared, config, jnp.asarray(ids), cache=init_cache(config, 2, 8), **kw)
    tol = 1e-5 if dtype == "float32" else 2e-2  # same math; only the matmul operand layout differs
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)
    np.testing.assert_allclose(
        np.asarray(got_cache.k[1], np.float32), np.asarray(want_cache.k[1], np.float32), rtol=tol, atol=tol
    )
    with pytest.raises(ValueError, match="DecodingParams are for cached decoding"):
        jit_forward(prepared, config, jnp.asarray(ids))


def test_cache_ignores_invalid_slots(tiny):
    """Garbage in cache slots marked invalid must not change the logits."""
    _, config, params = tiny
    ids, _ = _inputs(batch=2, length=4, pad=(0, 0))
    cache = init_cache(config, 2, 8)
    noisy = jax.tree.map(lambda x: x + 100.0, cache)
    slot_mask = jnp.asarray([[0, 0, 0, 0, 1, 1, 1, 1]] * 2)
    pos = jnp.tile(jnp.arange(4), (2, 1))
    a, _ = jit_forward(
        params, config, jnp.asarray(ids), attention_mask=slot_mask, positions=pos, cache=cache, cache_index=4
    )
    b, _ = jit_forward(
        params, config, jnp.asarray(ids), attention_mask=slot_mask, positions=pos, cache=noisy, cache_index=4
    )
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_remat_policies_give_same_gradients(tiny):
    _, config, params = tiny
    ids, mask = _inputs(batch=2, length=16, pad=(0, 4))

    def loss(p, cfg):
        logits, _ = forward(p, cfg, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
        return jnp.mean(jax.nn.logsumexp(logits, -1) * mask)

    grads = {
        policy: jax.jit(jax.grad(loss), static_argnums=1)(params, config.replace(remat=policy))
        for policy in ("none", "full", "dots")
    }
    for policy in ("full", "dots"):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), grads["none"], grads[policy])


def test_bf16_compute_is_close_to_fp32(tiny):
    _, config, params = tiny
    ids, mask = _inputs()
    ref, _ = jit_forward(params, config, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    low, _ = jit_forward(params, config.replace(dtype="bfloat16"), jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    assert low.dtype == jnp.float32
    assert _max_rel_err(np.asarray(low), np.asarray(ref), mask) < 5e-2


def test_fused_attention_call_matches_einsum_path():
    """The GPU path's jax.nn.dot_product_attention call (cuDNN there), run with its XLA implementation."""
    rng = np.random.RandomState(0)
    b, t, h, kv, d = 2, 16, 8, 2, 32
    q, k, v = (jnp.asarray(rng.randn(b, t, n, d), jnp.float32) for n in (h, kv, kv))
    token_mask = jnp.asarray(np.arange(t)[None] >= np.array([[0], [5]]))
    ours = attn_lib.causal_attention(q, k, v, token_mask, implementation="xla")
    ref = attn_lib.fused_attention(q, k, v, token_mask, implementation="xla")
    keep = np.asarray(token_mask)
    np.testing.assert_allclose(np.asarray(ours)[keep], np.asarray(ref)[keep], rtol=1e-5, atol=1e-5)


def test_attention_dispatch_falls_back_to_xla_on_cpu():
    assert attn_lib.choose("auto", cached=False, seq_len=1024, head_dim=128) == "xla"
    assert attn_lib.choose("splash", cached=True, seq_len=1024, head_dim=128) == "xla"
    with pytest.raises(ValueError, match="attention"):
        attn_lib.choose("flash3", cached=False, seq_len=8, head_dim=8)
    with pytest.raises(ValueError, match="platform is cpu"):
        attn_lib.choose("splash", cached=False, seq_len=1024, head_dim=128)
    with pytest.raises(ValueError, match="needs a GPU"):
        attn_lib.choose("cudnn", cached=False, seq_len=1024, head_dim=128)


def _attention_inputs(h, kv, b=2, t=128, d=128, pads=(37, 0)):
    rng = np.random.RandomState(h * 10 + kv)
    q, k, v = (jnp.asarray(rng.randn(b, t, n, d), jnp.float32) for n in (h, kv, kv))
    token_mask = jnp.asarray(np.arange(t)[None] >= np.asarray(pads)[:, None], jnp.int32)
    return q, k, v, token_mask


@pytest.mark.parametrize("heads,kv_heads", [(2, 2), (4, 2), (4, 1)])
def test_flash_kernel_interpreted_matches_xla(heads, kv_heads):
    """The Pallas TPU kernel (TPU interpret mode on CPU) = the XLA path: causal, left padding, GQA."""
    from jax.experimental.pallas import tpu as pltpu

    q, k, v, token_mask = _attention_inputs(heads, kv_heads)
    want = attn_lib.causal_attention(q, k, v, token_mask, implementation="xla")
    with pltpu.force_tpu_interpret_mode():
        assert attn_lib.choose("splash", cached=False, seq_len=128, head_dim=128) == "splash"
        got = jax.jit(lambda *a: attn_lib.causal_attention(*a, implementation="splash"))(q, k, v, token_mask)
    real = np.asarray(token_mask).astype(bool)  # padding queries are garbage on the XLA path
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=2e-5, atol=2e-5)
    assert not np.asarray(got)[0, :37].any()  # and zero from the kernel


@pytest.mark.slow
def test_flash_kernel_interpreted_gradients_match_xla():
    """The kernel's backward pass (the train step's) = the XLA path's, on the real tokens."""
    from jax.experimental.pallas import tpu as pltpu

    q, k, v, token_mask = _attention_inputs(4, 2)
    weight = jnp.asarray(np.random.RandomState(1).randn(*q.shape), jnp.float32)

    real = token_mask[:, :, None, None].astype(bool)

    def loss(impl, q, k, v):
        return jnp.sum(jnp.where(real, attn_lib.causal_attention(q, k, v, token_mask, implementation=impl), 0) * weight)

    want = jax.grad(functools.partial(loss, "xla"), argnums=(0, 1, 2))(q, k, v)
    with pltpu.force_tpu_interpret_mode():
        got = jax.jit(jax.grad(functools.partial(loss, "splash"), argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)


def _segment_reference_kernel(q, k, v, token_mask):
    """What the Pallas call computes on one shard (causal, segment ids), in plain XLA."""
    assert q.shape[2] % k.shape[2] == 0, "each shard must hold whole GQA groups"
    t, seg = q.shape[1], token_mask.astype(bool)
    mask = jnp.tril(jnp.ones((t, t), bool))[None] & (seg[:, :, None] == seg[:, None, :])
    return attn_lib.xla_attention(q, k, v, mask)


@pytest.mark.parametrize(
    "mesh_shape,heads,kv_heads,repeat_first",
    [
        (dict(data=2, fsdp=2, tensor=2), 4, 2, False),  # kv heads split with their q heads
        (dict(data=2, fsdp=2, tensor=2), 4, 1, True),  # one kv head: repeated to the q heads, then split
        (dict(data=1, fsdp=2, tensor=4), 6, 3, False),  # 6 heads on tensor=4: heads stay whole
    ],
)
def test_flash_kernel_under_mesh_shards_rows_and_heads(monkeypatch, mesh_shape, heads, kv_heads, repeat_first):
    """The shard_map around the kernel: rows over data+fsdp, heads over tensor, GQA groups kept whole."""
    from jax.sharding import PartitionSpec as P

    from microcoder_jax.sharding import make_mesh

    mesh = make_mesh(**mesh_shape)
    q, k, v, token_mask = _attention_inputs(heads, kv_heads, b=4, t=16, d=8, pads=(5, 0, 15, 3))
    q_spec, kv_spec, _, repeat = attn_lib._kernel_specs(mesh, q.shape, k.shape)
    assert repeat == repeat_first
    assert (
        q_spec
        == kv_spec
        == P(
            ("data", "fsdp") if mesh_shape["data"] > 1 else "fsdp",
            None,
            "tensor" if heads % mesh_shape["tensor"] == 0 else None,
            None,
        )
    )
    monkeypatch.setattr(attn_lib, "_flash_kernel", _segment_reference_kernel)
    want = attn_lib.causal_attention(q, k, v, token_mask, implementation="xla")
    with jax.set_mesh(mesh):
        got = jax.jit(lambda *a: jnp.where(a[3][:, :, None, None].astype(bool), attn_lib.flash_attention(*a), 0))(
            q, k, v, token_mask
        )
    real = np.asarray(token_mask).astype(bool)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name,billions",
    [
        ("qwen3-0.6b", 0.596),
        ("qwen3-1.7b", 1.721),
        ("qwen3-4b", 4.022),
        ("qwen3-8b", 8.191),
        ("qwen3-14b", 14.768),
        ("qwen3-32b", 32.762),
    ],
)
def test_preset_param_counts(name, billions):
    config = PRESETS[name]
    shapes = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    total = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(shapes))
    assert total == config.num_params()
    assert abs(total / 1e9 - billions) < 0.001
    axes = param_logical_axes(config)
    jax.tree.map(
        lambda s, a: len(s.shape) == len(a) or pytest.fail(f"{a} vs {s.shape}"),
        shapes,
        axes,
        is_leaf=lambda x: isinstance(x, tuple),
    )


def test_config_round_trips_and_rejects_unsupported():
    config = PRESETS["qwen3-4b-instruct-2507"]
    assert DecoderConfig.from_hf(config.to_hf()) == config.replace(dtype="bfloat16")
    assert DecoderConfig.from_json(config.to_json()) == config
    yarn = {
        **config.to_hf(),
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    }
    assert dict(DecoderConfig.from_hf(yarn).rope_scaling)["factor"] == 4.0
    hash(DecoderConfig.from_hf(yarn))
    with pytest.raises(ValueError, match="rope_type='dynamic'"):
        DecoderConfig.from_hf({**config.to_hf(), "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})
    with pytest.raises(ValueError, match="architecture"):
        DecoderConfig.from_hf({**config.to_hf(), "architectures": ["MistralForCausalLM"], "model_type": "mistral"})
    bad = config.to_hf()
    del bad["hidden_size"]
    with pytest.raises(ValueError, match="hidden_size"):
        DecoderConfig.from_hf(bad)
