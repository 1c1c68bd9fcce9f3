"""Decode attention over the paged KV cache on GPU: JAX's Pallas (Triton) paged-attention kernel.

Same pool and tables as the TPU kernel (``models.paged_kernel``): pools ``[kv_heads, pages,
page_size, head_dim]`` per layer, a slot's keys ``[0, lengths[s])`` at page ``table[s, c //
page_size]``; an int8 pool (``QuantizedPages``) passes its per-(token, head) scales, which the
kernel applies to the scores and probabilities as ours does. The kernel reads each slot's pages
only up to its length, in ``k_splits`` partitions of the table (flash-decoding) combined after.

What the wrapper adds: q scaled by ``1/sqrt(head_dim)`` (the kernel has no softmax scale), in the
pages' dtype (bf16/f16; fp32 for int8 pages, which it casts up exactly); "no page" entries clipped
to a real page (whole compute blocks are read, then masked); the table padded to whole partitions;
and Triton's shape rules (powers of two, blocks of >= 16 tokens) checked before it is chosen. Off
GPU it runs in Pallas interpret mode, which the tests use on CPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from microcoder_jax.models.paged_kernel_int8 import QuantizedPages

MIN_BLOCK = 16  # Triton's dot needs every dim >= 16: a compute block holds at least 16 tokens
MAX_SPLITS = 16  # table partitions per slot (the op's default): parallelism for few, long slots
BLOCK_H = 16  # q heads per kv head are padded to this (the op's minimum)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def gpu_kernel_unsupported(head_dim: int, pool_dtype, on: str, page_size: int | None = None) -> str | None:
    """Why the GPU paged kernel cannot serve this shape on platform ``on``, or None."""
    if on != "gpu":
        return f"platform is {on}, not gpu"
    if not _pow2(head_dim) or head_dim < MIN_BLOCK:
        return f"head_dim {head_dim} must be a power of two >= {MIN_BLOCK} for the GPU paged kernel (Triton)"
    if page_size is not None and not _pow2(page_size):
        return f"page_size {page_size} must be a power of two for the GPU paged kernel (Triton)"
    if jnp.dtype(pool_dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16), jnp.dtype(jnp.int8)):
        return f"the GPU paged kernel reads bfloat16, float16 or int8 pages, the pool is {jnp.dtype(pool_dtype).name}"
    return None


def compute_block(page_size: int, pages_per_block: int) -> int:
    """Pages per compute block: a power of two <= ``pages_per_block``, raised to hold >= 16 tokens."""
    pages = 1 << max(pages_per_block, 1).bit_length() - 1
    return max(pages, -(-MIN_BLOCK // page_size))


def gpu_paged_attention(
    q: jax.Array,
    pool_k,
    pool_v,
    lengths: jax.Array,
    table: jax.Array,
    *,
    pages_per_block: int,
    interpret: bool | None = None,
) -> jax.Array:
    """One query per slot ``q [S, H, D]`` over its first ``lengths[s]`` paged keys -> ``[S, H, D]``.

    ``interpret`` (default: unless JAX's default backend is a GPU) runs the kernel in Pallas
    interpret mode. Under a mesh it runs inside ``jax.shard_map`` with the TPU kernel's specs
    (slots over the data axes, kv heads over ``tensor`` where it divides them).
    """
    from microcoder_jax.models.paged_kernel import _specs, check_inputs

    s, h, d = q.shape
    quantized, kshape = check_inputs("GPU paged kernel", q, pool_k, pool_v, lengths, table, pages_per_block)
    kv, num_pages, page_size = kshape[:3]
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    block = compute_block(page_size, pages_per_block)
    splits = max(1, min(MAX_SPLITS, -(-table.shape[1] // block)))
    pad = -table.shape[1] % (splits * block)  # the op needs whole compute blocks in every partition
    # entries past a slot's pages ("no page" = num_pages, or anything) are read in its last block,
    # then masked: clip them to a real page so every load stays in bounds
    table = jnp.clip(jnp.pad(table.astype(jnp.int32), ((0, 0), (0, pad))), 0, num_pages - 1)
    run = functools.partial(_kernel, pages_per_block=block, k_splits=splits, interpret=interpret)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return run(q, pool_k, pool_v, lengths.astype(jnp.int32), table)
    q_spec, pool_spec, slot_spec = _specs(mesh, s, kv)
    if quantized:
        pool_spec = QuantizedPages(pool_spec, P(*pool_spec[:3]))  # pyright: ignore[reportArgumentType] (a pytree of specs)
    return jax.shard_map(
        run,
        in_specs=(q_spec, pool_spec, pool_spec, slot_spec, P(slot_spec[0], None)),
        out_specs=q_spec,
        check_vma=False,
    )(q, pool_k, pool_v, lengths.astype(jnp.int32), table)


def _kernel(q, pool_k, pool_v, lengths, table, *, pages_per_block: int, k_splits: int, interpret: bool):
    """The op on one shard: q pre-scaled in fp32, then in the dtype its dots take."""
    from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention

    scaled = q.astype(jnp.float32) * (q.shape[-1] ** -0.5)
    if isinstance(pool_k, QuantizedPages):
        # the op casts int8 pages to q's dtype (exact in fp32) and applies the scales itself
        args = (scaled, pool_k.data, pool_v.data, table, lengths, pool_k.scale, pool_v.scale)
    else:
        args = (scaled.astype(pool_k.dtype), pool_k, pool_v, table, lengths)
    out = paged_attention(
        *args, block_h=BLOCK_H, pages_per_compute_block=pages_per_block, k_splits=k_splits, interpret=interpret
    )
    return out.astype(q.dtype)
