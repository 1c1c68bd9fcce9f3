"""The GPU paged-attention kernel (models.paged_kernel_gpu, JAX's Pallas/Triton op behind our wrapper)
= the float64 reference, on CPU in Pallas interpret mode; it lowers for CUDA ahead of time at Qwen3
decode shapes (Triton's shape rules checked without a GPU); and the platform choice GPU -> kernel.

Ragged lengths (an idle slot too), a page shared by two slots (a prompt's samples), "no page" table
entries, GQA, bf16 and int8 pages with their scales. Tiny shapes: interpret mode is slow.
"""

import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other processes may hold libtpu

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from test_kv_quant import PAGE, _inputs, drift_bound, quantized_pool, reference  # noqa: E402

from microcoder_jax.models import paged_attention as pa  # noqa: E402
from microcoder_jax.models.paged_kernel_gpu import compute_block, gpu_kernel_unsupported, gpu_paged_attention  # noqa: E402


def _run(q, k, v, lengths, table, pages_per_block=2):
    fn = jax.jit(lambda *a: gpu_paged_attention(*a, pages_per_block=pages_per_block, interpret=True))
    return np.asarray(fn(q, k, v, jnp.asarray(lengths), jnp.asarray(table)).astype(jnp.float32), np.float64)


def _bf16(x):
    return np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32), np.float64)


@pytest.mark.parametrize("heads,kv_heads,pages_per_block", [(2, 2, 1), (8, 2, 3)])
def test_bf16_pages_match_float64(heads, kv_heads, pages_per_block):
    """GQA 1 and 4; compute blocks of 2 pages (16 tokens) that run past a slot's pages; table padded."""
    q, k, v, lengths, table = _inputs(heads, kv_heads, seed=1)
    got = _run(
        jnp.asarray(q, jnp.bfloat16),
        jnp.asarray(k, jnp.bfloat16),
        jnp.asarray(v, jnp.bfloat16),
        lengths,
        table,
        pages_per_block,
    )
    live = lengths > 0
    assert np.isfinite(got).all() and (got[~live] == 0).all(), "an idle slot gives zeros"
    want = reference(_bf16(q), _bf16(k), _bf16(v), lengths, table)
    # q and the probabilities go through bf16 in the kernel's dots: ~3 significant digits
    np.testing.assert_allclose(got[live], want[live], rtol=3e-2, atol=3e-2 * np.abs(v).max())


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 4)])
def test_int8_pages_match_float64(heads, kv_heads):
    """= float64 attention over the dequantized pages, and within the quantization drift of the float pages."""
    q, k, v, lengths, table = _inputs(heads, kv_heads, seed=3)
    (qk, k_deq), (qv, v_deq) = quantized_pool(k), quantized_pool(v)
    got = _run(jnp.asarray(q, jnp.float32), qk, qv, lengths, table)
    live = lengths > 0
    assert np.isfinite(got).all() and (got[~live] == 0).all()
    np.testing.assert_allclose(got[live], reference(q, k_deq, v_deq, lengths, table)[live], rtol=1e-5, atol=1e-5)
    err = np.abs(got[live] - reference(q, k, v, lengths, table)[live]).max()
    assert 0 < err <= drift_bound(q, k, v, k_deq, v_deq), err


def test_shapes_and_reasons():
    assert compute_block(8, 4) == 4 and compute_block(8, 3) == 2 and compute_block(8, 1) == 2
    assert compute_block(32, 8) == 8 and compute_block(4, 1) == 4
    assert gpu_kernel_unsupported(128, jnp.bfloat16, "gpu", 16) is None
    assert gpu_kernel_unsupported(128, jnp.int8, "gpu") is None
    assert "not gpu" in gpu_kernel_unsupported(128, jnp.bfloat16, "cpu")
    assert "power of two" in gpu_kernel_unsupported(96, jnp.bfloat16, "gpu")
    assert "page_size 12" in gpu_kernel_unsupported(128, jnp.bfloat16, "gpu", 12)
    assert "float32" in gpu_kernel_unsupported(128, jnp.float32, "gpu")
    q, k, v, lengths, table = _inputs(3, 2)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        gpu_paged_attention(
            jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(lengths), jnp.asarray(table), pages_per_block=1
        )


def test_platform_choice(monkeypatch):
    """attention=auto: GPU -> the GPU kernel, TPU -> the TPU kernel, CPU -> XLA; fp32 pools stay on XLA."""
    assert pa.choose("auto", 128, jnp.bfloat16, on="gpu", page_size=16) == "gpu_kernel"
    assert pa.choose("auto", 128, jnp.int8, on="gpu", page_size=16) == "gpu_kernel"
    assert pa.choose("auto", 128, jnp.float32, on="gpu") == "xla"
    assert pa.choose("auto", 128, jnp.bfloat16, on="gpu", page_size=12) == "xla"
    assert pa.choose("xla", 128, jnp.bfloat16, on="gpu") == "xla"
    assert pa.choose("auto", 128, jnp.bfloat16, on="tpu") == "kernel"
    assert pa.choose("auto", 128, jnp.bfloat16, on="cpu") == "xla"
    monkeypatch.setattr(pa, "platform", lambda: "gpu")  # the platform query, forced
    assert pa.choose("auto", 128, jnp.bfloat16) == "gpu_kernel"
    with pytest.raises(ValueError, match="TPU kernels"):
        pa.choose("splash", 128, jnp.bfloat16)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "int8"])
def test_the_decode_step_takes_the_gpu_kernel_on_a_forced_gpu(monkeypatch, kv_dtype):
    """The engine's decode step (write this token's keys, attend, logits) on a forced GPU platform goes
    through the GPU kernel (interpreted on CPU) and gives the XLA path's logits for every live slot."""
    import dataclasses
    from unittest import mock

    from microcoder_jax.models import DecoderConfig, decoding_params, init_params

    config = DecoderConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        dtype="bfloat16",
        attention="auto",
    )
    params = decoding_params(init_params(config, jax.random.key(0)), config)
    q, k, v, lengths, table = _inputs(4, 2, seed=5)
    full = [jnp.asarray(x, jnp.float32) for x in (k, v)]
    full = [pa.QuantizedPages(*pa.quantize(x)) if kv_dtype == "int8" else x.astype(kv_dtype) for x in full]
    pool = pa.PagePool((full[0],), (full[1],))
    live = lengths > 0
    last = np.maximum(lengths - 1, 0)
    write_page = np.where(live, table[np.arange(len(lengths)), last // PAGE], 10**6)  # idle: dropped
    view = pa.SlotView(jnp.asarray(table), jnp.asarray(lengths), pa.blocks_needed(jnp.asarray(lengths), PAGE, 2))
    args = (
        jnp.arange(len(lengths)) + 3,
        jnp.asarray(last),
        pool,
        jnp.asarray(write_page),
        jnp.asarray(last % PAGE),
        view,
    )

    def step(cfg):
        return jax.jit(lambda *a: pa.paged_decode_step(params, cfg, *a, block_pages=2))(*args)[0]

    want = step(dataclasses.replace(config, attention="xla"))
    monkeypatch.setattr(pa, "platform", lambda: "gpu")
    with mock.patch.object(pa, "gpu_paged_attention", wraps=pa.gpu_paged_attention) as spy:
        got = step(config)
    assert spy.call_count == config.num_layers
    np.testing.assert_allclose(np.asarray(got)[live], np.asarray(want)[live], atol=3e-2, rtol=3e-2)


@pytest.mark.accelerator
@pytest.mark.skipif(jax.default_backend() != "gpu", reason=f"needs a GPU; JAX's backend is {jax.default_backend()}")
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "int8"])
def test_the_compiled_kernel_on_a_gpu(kv_dtype):
    """Compiled by Triton (not interpreted) at head_dim 128, GQA 2: = the float64 reference."""
    q, k, v, lengths, table = _inputs(8, 4, seed=7, dim=128)
    if kv_dtype == "int8":
        (pk, k), (pv, v) = quantized_pool(k), quantized_pool(v)
        q_in = jnp.asarray(q, jnp.float32)
    else:
        pk, pv, q_in = (jnp.asarray(x, jnp.bfloat16) for x in (k, v, q))
        q, k, v = _bf16(q), _bf16(k), _bf16(v)
    fn = jax.jit(lambda *a: gpu_paged_attention(*a, pages_per_block=2, interpret=False))
    got = np.asarray(fn(q_in, pk, pv, jnp.asarray(lengths), jnp.asarray(table)).astype(jnp.float32), np.float64)
    live = lengths > 0
    assert np.isfinite(got).all() and (got[~live] == 0).all()
    np.testing.assert_allclose(
        got[live], reference(q, k, v, lengths, table)[live], rtol=3e-2, atol=3e-2 * np.abs(v).max()
    )


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "int8"])
def test_the_kernel_lowers_for_cuda_at_qwen3_decode_shapes(kv_dtype):
    """Triton's shape rules (powers of two, >= 16-wide dots) hold at Qwen3-1.7B decode shapes: the
    wrapper lowers for CUDA ahead of time on CPU, to one Triton kernel call."""
    slots, heads, kv, d, pages, page_size, width = 32, 16, 8, 128, 4096, 16, 288
    pool = (
        pa.QuantizedPages(
            jax.ShapeDtypeStruct((kv, pages, page_size, d), jnp.int8),
            jax.ShapeDtypeStruct((kv, pages, page_size), jnp.float32),
        )
        if kv_dtype == "int8"
        else jax.ShapeDtypeStruct((kv, pages, page_size, d), jnp.bfloat16)
    )
    args = (
        jax.ShapeDtypeStruct((slots, heads, d), jnp.bfloat16),
        pool,
        pool,
        jax.ShapeDtypeStruct((slots,), jnp.int32),
        jax.ShapeDtypeStruct((slots, width), jnp.int32),
    )
    fn = jax.jit(lambda *a: gpu_paged_attention(*a, pages_per_block=8, interpret=False))
    text = fn.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == 1
