"""Decode attention over an int8 page pool: a Pallas TPU kernel that streams int8 pages.

Why not JAX's kernel: ``jax.experimental.pallas.ops.tpu.paged_attention`` takes ``QuantizedTensor``
pages, but broadcasts their scales to the pages' full shape (``[K, pages, page_size, head_dim]``)
before the call and DMAs them next to the pages: every layer and step would write a pool-sized
scale array and read more bytes than a bfloat16 pool. This kernel reads int8 pages and one float32
scale per (token, head) instead, and scales the scores (keys) and probabilities (values), so no
dequantized page exists even in VMEM: ``q . (s k) = s (q . k)``, ``sum p (s v) = (p s) . v``.

Grid (slot, kv head). Each step DMAs the slot's pages block by block (``pages_per_block`` table
entries, only ``cdiv(length, block tokens)`` blocks, double-buffered) from the int8 pools in HBM,
and with each page its ``page_size`` float32 scales from the scale pools (``4 / head_dim`` of the
int8 bytes per token), by the same table entry into the same double buffer: the scales read grow
with the slot's length, as the pages do (no gather of the whole table's scales outside the kernel).
An idle slot (length 0) reads nothing and gives zeros. Interpret mode
(``pltpu.force_tpu_interpret_mode()``) runs it on CPU for the tests.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

MASK = -0.7 * float(jnp.finfo(jnp.float32).max)


class QuantizedPages(NamedTuple):
    """An int8 layer of the pool: ``data [K, pages, page_size, D]`` int8, ``scale [K, pages, page_size]`` f32;
    the value is ``data * scale``."""

    data: jax.Array
    scale: jax.Array


def int8_paged_attention(q, k_data, k_scale, v_data, v_scale, lengths, table, *, pages_per_block: int):
    """``q [S, H, D]`` (f32, pre-scaled) over int8 pools ``[K, pages, page_size, D]`` with scales
    ``[K, pages, page_size]``; ``table [S, M]`` (M a multiple of ``pages_per_block``, entries valid
    page ids). -> f32 ``[S, H, D]``."""
    s, h, d = q.shape
    kv, _, ps, _ = k_data.shape
    g, m = h // kv, table.shape[1]
    q4 = q.astype(jnp.float32).reshape(s, kv, g, d)
    kernel = functools.partial(_kernel, pages_per_block=pages_per_block, table_width=m)
    q_spec = pl.BlockSpec((None, None, g, d), lambda b, hh, *_: (b, hh, 0, 0))
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    buffer = pltpu.VMEM((2, pages_per_block, ps, d), jnp.int8)
    scales = pltpu.VMEM((2, pages_per_block, ps), jnp.float32)
    out = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(s, kv),
            in_specs=[q_spec, any_spec, any_spec, any_spec, any_spec],
            out_specs=q_spec,
            scratch_shapes=(
                buffer,
                buffer,
                scales,
                scales,
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SemaphoreType.DMA((2,)),
            ),
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
        out_shape=jax.ShapeDtypeStruct(q4.shape, jnp.float32),
    )(lengths.astype(jnp.int32), table.reshape(-1).astype(jnp.int32), q4, k_data, k_scale, v_data, v_scale)
    return out.reshape(s, h, d)


def _kernel(
    lengths_ref,
    table_ref,
    q_ref,
    k_hbm,
    ks_hbm,
    v_hbm,
    vs_hbm,
    o_ref,
    k_buf,
    v_buf,
    ks_buf,
    vs_buf,
    k_sem,
    v_sem,
    *,
    pages_per_block: int,
    table_width: int,
):
    b, h = pl.program_id(0), pl.program_id(1)
    length = lengths_ref[b]
    ps, d = k_buf.shape[2], k_buf.shape[3]
    bt = pages_per_block * ps
    n = (length + bt - 1) // bt

    def copies(i, slot):
        out = []
        for j in range(pages_per_block):
            page = table_ref[b * table_width + i * pages_per_block + j]
            out.append(pltpu.make_async_copy(k_hbm.at[h, page], k_buf.at[slot, j], k_sem.at[slot]))
            out.append(pltpu.make_async_copy(v_hbm.at[h, page], v_buf.at[slot, j], v_sem.at[slot]))
            # the page's scales ride on the same semaphores: a (1, page_size) row of [pages, page_size]
            out.append(
                pltpu.make_async_copy(ks_hbm.at[h, pl.ds(page, 1)], ks_buf.at[slot, pl.ds(j, 1)], k_sem.at[slot])
            )
            out.append(
                pltpu.make_async_copy(vs_hbm.at[h, pl.ds(page, 1)], vs_buf.at[slot, pl.ds(j, 1)], v_sem.at[slot])
            )
        return out

    @pl.when(n > 0)
    def _():
        for c in copies(0, 0):
            c.start()

    q = q_ref[...].astype(jnp.float32)  # [G, D]
    g = q.shape[0]

    def block(i, carry):
        top, total, acc = carry
        slot = i % 2

        @pl.when(i + 1 < n)
        def _():
            for c in copies(i + 1, 1 - slot):
                c.start()

        for c in copies(i, slot):
            c.wait()
        k = k_buf[slot].astype(jnp.float32).reshape(bt, d)
        v = v_buf[slot].astype(jnp.float32).reshape(bt, d)
        k_row = ks_buf[slot].reshape(1, bt)  # [pages_per_block, ps] -> [1, bt], table order
        v_row = vs_buf[slot].reshape(1, bt)
        scores = jnp.einsum("gd,td->gt", q, k, preferred_element_type=jnp.float32) * k_row
        valid = i * bt + jax.lax.broadcasted_iota(jnp.int32, (g, bt), 1) < length
        scores = jnp.where(valid, scores, MASK)
        new_top = jnp.maximum(top, jnp.max(scores, axis=-1, keepdims=True))
        alpha = jnp.exp(top - new_top)
        p = jnp.exp(scores - new_top)
        total = alpha * total + jnp.sum(p, axis=-1, keepdims=True)
        acc = alpha * acc + jnp.einsum("gt,td->gd", p * v_row, v, preferred_element_type=jnp.float32)
        return new_top, total, acc

    init = (jnp.full((g, 1), MASK, jnp.float32), jnp.zeros((g, 1), jnp.float32), jnp.zeros((g, d), jnp.float32))
    _, total, acc = jax.lax.fori_loop(0, n, block, init)
    o_ref[...] = jnp.where(n > 0, acc / jnp.maximum(total, 1e-30), 0.0).astype(o_ref.dtype)
