"""The Pallas TPU paged-attention kernel (models.paged_kernel) = a plain reference, on CPU and for TPU.

On CPU the kernel runs in Pallas's TPU interpret mode: ragged lengths (an idle slot too), "no page"
table entries, GQA, bf16, and under a faked 2x2x2 mesh equal to one device. For TPU it compiles
ahead of time (libtpu, nothing allocated) at Qwen3-1.7B decode shapes on v5e:2x2 meshes.
"""

import os
import re

import numpy as np
import pytest

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # pytest-xdist workers each load libtpu

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from microcoder_jax.models.paged_kernel import paged_kernel_attention, paged_kernel_unsupported  # noqa: E402

PAGE, PAGES, D = 8, 12, 128
LENGTHS = (1, PAGE - 1, PAGE, 3 * PAGE + 2, 0)  # one key, a page less one, a page, several pages, idle


def _inputs(heads, kv_heads, lengths=LENGTHS, dtype=jnp.float32, table_width=5, seed=0):
    """q, K-first pools and a table: shuffled pages, two slots sharing a page, "no page" (= PAGES) after."""
    rng = np.random.RandomState(seed)
    q = rng.randn(len(lengths), heads, D)
    pool_k, pool_v = (rng.randn(kv_heads, PAGES, PAGE, D) for _ in range(2))
    table = np.full((len(lengths), table_width), PAGES, np.int32)
    free = list(rng.permutation(PAGES))
    for s, n in enumerate(lengths):
        table[s, : -(-n // PAGE)] = [free.pop() for _ in range(-(-n // PAGE))]
    table[1, 0] = table[0, 0]  # a page shared by two slots (a prompt's samples)
    cast = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    return cast(q), cast(pool_k), cast(pool_v), jnp.asarray(lengths, jnp.int32), jnp.asarray(table)


def _reference(q, pool_k, pool_v, lengths, table):
    """Gather each slot's pages, mask keys past its length, softmax(q k / sqrt(D)) v in float64."""
    q, lengths = np.asarray(q, np.float64), np.asarray(lengths)
    # the kernel reads keys and values as bfloat16: round them the same way
    k, v = (np.asarray(jnp.asarray(p).astype(jnp.bfloat16), np.float64) for p in (pool_k, pool_v))
    s, h, d = q.shape
    kv, _, page, _ = k.shape
    ids = np.clip(np.asarray(table), 0, k.shape[1] - 1)
    keys, values = (x[:, ids].reshape(kv, s, -1, d).transpose(1, 0, 2, 3) for x in (k, v))  # [S, K, C, D]
    qh = q.reshape(s, kv, h // kv, d)
    scores = np.einsum("skgd,skcd->skgc", qh, keys) / np.sqrt(d)
    valid = np.arange(keys.shape[2])[None, :] < lengths[:, None]
    scores = np.where(valid[:, None, None], scores, -np.inf)
    probs = np.exp(scores - np.max(scores, -1, keepdims=True, initial=-1e300))
    probs = probs / np.maximum(probs.sum(-1, keepdims=True), 1e-300)
    return np.einsum("skgc,skcd->skgd", probs, values).reshape(s, h, d)


def _kernel(*args, pages_per_block):
    with pltpu.force_tpu_interpret_mode():
        return jax.jit(lambda *a: paged_kernel_attention(*a, pages_per_block=pages_per_block))(*args)


def _check(got, args, tol):
    got = np.asarray(got.astype(jnp.float32))
    assert np.isfinite(got).all(), "an idle slot must give finite output"
    live = np.asarray(args[3]) > 0
    np.testing.assert_allclose(got[live], _reference(*args)[live], rtol=tol, atol=tol)


@pytest.mark.parametrize("heads,kv_heads,pages_per_block", [(2, 2, 4), (4, 2, 2), (8, 2, 3)])
def test_kernel_interpreted_matches_the_reference(heads, kv_heads, pages_per_block):
    """GQA 1, 2, 4; blocks that end past a slot's pages (read, masked) and a table padded to whole blocks."""
    args = _inputs(heads, kv_heads)
    _check(_kernel(*args, pages_per_block=pages_per_block), args, 1e-5)


def test_the_kernel_reads_no_block_past_a_slots_length():
    """Table entries in blocks past a slot's last one are never read (interpret mode checks bounds)."""
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    q, pool_k, pool_v, lengths, table = _inputs(4, 2, table_width=6)
    block = 2 * PAGE  # pages_per_block=2: a slot reads cdiv(length, 2 * PAGE) blocks of 2 entries
    read = -(-np.asarray(lengths)[:, None] // block) * 2 > np.arange(6)[None, :]
    wild = jnp.asarray(np.where(read, np.minimum(table, PAGES - 1), 10 * PAGES))
    with pltpu.force_tpu_interpret_mode():
        got = paged_attention(q * D**-0.5, pool_k, pool_v, lengths, wild, pages_per_compute_block=2)
    _check(got, (q, pool_k, pool_v, lengths, table), 1e-5)


def test_kernel_interpreted_in_bfloat16():
    args = _inputs(4, 2, dtype=jnp.bfloat16, seed=1)
    got = _kernel(*args, pages_per_block=2)
    assert got.dtype == jnp.bfloat16
    _check(got, args, 1e-2)


def test_unsupported_reasons():
    assert "not tpu" in paged_kernel_unsupported(128, jnp.bfloat16, "cpu")
    assert paged_kernel_unsupported(128, jnp.bfloat16, "tpu") is None
    with pltpu.force_tpu_interpret_mode():
        assert paged_kernel_unsupported(256, jnp.bfloat16, "cpu") is None
        assert "multiple of 128" in paged_kernel_unsupported(64, jnp.bfloat16, "cpu")
        assert "bfloat16" in paged_kernel_unsupported(128, jnp.float32, "cpu")
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        paged_kernel_attention(*_inputs(3, 2), pages_per_block=1)


@pytest.mark.parametrize(
    "mesh_shape,kv_heads,head_spec",
    [
        (dict(data=2, fsdp=2, tensor=2), 2, "tensor"),  # kv heads split with their q heads
        (dict(data=2, fsdp=2, tensor=2), 1, None),  # tensor divides the q heads only: heads stay whole
    ],
)
def test_kernel_under_a_mesh_equals_one_device(mesh_shape, kv_heads, head_spec):
    from jax.sharding import NamedSharding, PartitionSpec as P

    from microcoder_jax.models.paged_kernel import _specs
    from microcoder_jax.sharding import make_mesh

    mesh = make_mesh(**mesh_shape)
    lengths = LENGTHS + (2, 2 * PAGE, 5)  # 8 slots: 2 per data x fsdp shard
    args = _inputs(2 * kv_heads, kv_heads, lengths=lengths, seed=2)
    q_spec, pool_spec, _ = _specs(mesh, len(lengths), kv_heads)
    assert q_spec == P(("data", "fsdp"), head_spec, None) and pool_spec == P(head_spec, None, None, None)
    want = _kernel(*args, pages_per_block=2)
    placed = [
        jax.device_put(a, NamedSharding(mesh, spec))
        for a, spec in zip(args, (q_spec, pool_spec, pool_spec, P(("data", "fsdp")), P(("data", "fsdp"), None)))
    ]
    with jax.set_mesh(mesh):
        got = _kernel(*placed, pages_per_block=2)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    _check(got, args, 1e-5)


# ---------------------------------------------------------------- TPU ahead-of-time compile

QWEN3_1_7B = dict(heads=16, kv_heads=8, head_dim=128)  # decode shapes: H=16, K=8, D=128
SLOTS, TABLE, NUM_PAGES = 32, 288, 4096


@pytest.fixture(scope="module")
def v5e_devices():
    pytest.importorskip("libtpu", reason="libtpu is not installed: pip install -e '.[test]' installs it")
    from jax.experimental import topologies

    return topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu").devices


def compile_for_tpu(devices, mesh_shape, page_size, pages_per_block):
    """The compiled kernel call at Qwen3-1.7B decode shapes, inputs laid out as the engine's."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    from microcoder_jax.sharding import make_mesh

    mesh = make_mesh(**mesh_shape, devices=devices)
    h, kv, d = QWEN3_1_7B.values()
    heads = "tensor" if kv % mesh_shape["tensor"] == 0 else None
    rows = ("data", "fsdp")

    def spec(shape, dtype, *axes):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(*axes)))

    pool = spec((kv, NUM_PAGES, page_size, d), jnp.bfloat16, heads, None, None, None)
    args = (
        spec((SLOTS, h, d), jnp.bfloat16, rows, heads, None),
        pool,
        pool,
        spec((SLOTS,), jnp.int32, rows),
        spec((SLOTS, TABLE), jnp.int32, rows, None),
    )
    with jax.set_mesh(mesh):
        assert paged_kernel_unsupported(d, jnp.bfloat16, "tpu") is None
        step = jax.jit(lambda *a: paged_kernel_attention(*a, pages_per_block=pages_per_block))
        return step.lower(*args).compile()


@pytest.mark.parametrize(
    "mesh_shape,page_size,pages_per_block",
    [
        (dict(data=2, fsdp=1, tensor=2), 16, 8),
        (dict(data=1, fsdp=1, tensor=4), 32, 4),
    ],
)
def test_kernel_compiles_for_tpu_under_the_mesh(v5e_devices, mesh_shape, page_size, pages_per_block):
    program = compile_for_tpu(v5e_devices, mesh_shape, page_size, pages_per_block)
    hlo = program.as_text()
    assert re.search(r'custom_call_target="tpu_custom_call"', hlo), "the Mosaic kernel should be in the program"
    assert not re.search(r"all-gather|all-to-all", hlo), "the pool must not move between devices"
    memory = program.memory_analysis()
    assert memory.argument_size_in_bytes > 0


@pytest.mark.slow  # quick tier <= 6 min: a compile-heavy check, run by the full suite
def test_the_paged_engine_takes_the_kernel_where_it_serves_and_matches_xla():
    """A bf16 head_dim-128 model: attention=auto in interpret mode runs the engine's decode through the
    kernel (traced once per layer), greedy tokens equal to attention=xla."""
    import dataclasses
    from unittest import mock

    from microcoder_jax.models import DecoderConfig, init_params
    from microcoder_jax.models import paged_attention as pa
    from microcoder_jax.sampling.paged_sampler import generate_paged

    config = DecoderConfig(
        vocab_size=64,
        hidden_size=128,
        intermediate_size=256,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=128,
        dtype="bfloat16",
        attention="auto",
    )
    params = init_params(config, jax.random.key(0))
    prompts = [[5, 9, 13], list(range(3, 14)), [7] * 9]
    kw = dict(
        num_samples=2,
        temperature=0.0,
        max_new_tokens=12,
        stop_token_ids=[],
        pad_id=0,
        rng=jax.random.key(1),
        slots=3,
        page_size=8,
        prompt_buckets=(16,),
    )
    xla = generate_paged(params, dataclasses.replace(config, attention="xla"), prompts, **kw)
    assert pa.choose("auto", 128, jnp.bfloat16) == "xla"  # not on TPU: XLA
    with pltpu.force_tpu_interpret_mode():
        assert pa.choose("auto", 128, jnp.bfloat16) == "kernel"
        assert pa.choose("auto", 128, jnp.float32) == "xla"  # the kernel would round an fp32 pool
        with pytest.raises(ValueError, match="bfloat16"):
            pa.choose("splash", 128, jnp.float32)
        with mock.patch.object(pa, "paged_kernel_attention", wraps=pa.paged_kernel_attention) as spy:
            kernel = generate_paged(params, config, prompts, **kw)
    assert spy.call_count >= config.num_layers
    np.testing.assert_array_equal(kernel.tokens, xla.tokens)
    np.testing.assert_allclose(kernel.logprobs, xla.logprobs, atol=2e-2)


# ---------------------------------------------------------------- int8 pages (models.paged_kernel_int8)


def _quantized(args):
    """The inputs with int8 pools (``QuantizedPages``) and the float64 pages they stand for."""
    from microcoder_jax.models import paged_attention as pa

    q, pool_k, pool_v, lengths, table = args
    pools, exact = [], []
    for p in (pool_k, pool_v):
        data, scale = pa.quantize(p)
        pools.append(pa.QuantizedPages(data, scale))
        exact.append(np.asarray(pa.dequantize(data, scale), np.float64))
    return (q, *pools, lengths, table), exact


def _reference64(q, k, v, lengths, table):
    """_reference without its bfloat16 rounding (the int8 kernel reads the int8 values exactly)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jnp, "bfloat16", jnp.float32)
        return _reference(q, k, v, lengths, table)


@pytest.mark.parametrize("heads,kv_heads,pages_per_block", [(2, 2, 4), (4, 2, 2), (8, 2, 3), (16, 8, 1)])
def test_int8_kernel_interpreted_matches_float64(heads, kv_heads, pages_per_block):
    """Ragged lengths, an idle slot, a page shared by two slots, "no page" entries, GQA 1..4: equal to
    float64 attention over the dequantized pages (1e-5), and within the quantization drift of the
    float pages (|q|_1 max|dk| / sqrt(D) per score, max|dv| per value)."""
    args = _inputs(heads, kv_heads, seed=3)
    qargs, (k_deq, v_deq) = _quantized(args)
    got = np.asarray(_kernel(*qargs, pages_per_block=pages_per_block))
    live = np.asarray(args[3]) > 0
    assert np.isfinite(got).all() and (got[~live] == 0).all()
    q = np.asarray(args[0], np.float64)
    want = _reference64(q, k_deq, v_deq, args[3], args[4])
    np.testing.assert_allclose(got[live], want[live], rtol=1e-5, atol=1e-5)
    k, v = (np.asarray(a, np.float64) for a in args[1:3])
    err = np.abs(got[live] - _reference64(q, k, v, args[3], args[4])[live]).max()
    delta = np.abs(q).sum(-1).max() * np.abs(k_deq - k).max() / np.sqrt(D)
    assert 0 < err <= np.abs(v_deq - v).max() + np.expm1(2 * delta) * np.abs(v).max(), err


def test_int8_kernel_under_a_mesh_equals_one_device():
    from jax.sharding import NamedSharding, PartitionSpec as P

    from microcoder_jax.sharding import make_mesh

    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    lengths = LENGTHS + (2, 2 * PAGE, 5)
    qargs, _ = _quantized(_inputs(4, 2, lengths=lengths, seed=4))
    want = _kernel(*qargs, pages_per_block=2)
    rows, pool, scale = P(("data", "fsdp")), P("tensor", None, None, None), P("tensor", None, None)
    specs = (P(("data", "fsdp"), "tensor", None), (pool, scale), (pool, scale), rows, P(("data", "fsdp"), None))
    placed = jax.tree.map(
        lambda a, s: jax.device_put(a, NamedSharding(mesh, s)),
        qargs,
        tuple(type(a)(*s) if isinstance(a, tuple) else s for a, s in zip(qargs, specs)),
    )
    with jax.set_mesh(mesh):
        got = _kernel(*placed, pages_per_block=2)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
