"""Decode attention over a paged KV cache with JAX's Pallas TPU paged-attention kernel.

Pools are K-first, ``[kv_heads, pages, page_size, head_dim]`` per layer (the kernel's layout); a
slot's keys ``[0, lengths[s])`` sit at page ``table[s, c // page_size]``, offset ``c % page_size``.
The kernel reads only the blocks of ``pages_per_block`` table entries that hold a slot's keys
(``cdiv(length, page_size * pages_per_block)`` of them), so an idle slot (length 0) reads nothing
and gives zeros. It always reads keys and values as bfloat16 (an fp32 pool is rounded). An int8
pool (``QuantizedPages``) goes to our int8 kernel (``models.paged_kernel_int8``) instead, under the
same shard_map.

``megacore_mode`` stays None: v5e has one TensorCore per chip, and the kernel's own docs warn
that "batch" or "kv_head" can hang where megacore is off; on v4/v5p "batch" might use both cores
(unmeasured here).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from microcoder_jax.models.attention import _tpu_interpret_mode
from microcoder_jax.models.paged_kernel_int8 import QuantizedPages, int8_paged_attention

LANES = 128  # the kernel's blocks keep head_dim whole in VMEM: it must be a multiple of the lane width


def paged_kernel_unsupported(head_dim: int, pool_dtype, on: str) -> str | None:
    """Why the kernel cannot serve this shape on platform ``on`` (exactly, as the XLA path), or None."""
    if on != "tpu" and not _tpu_interpret_mode():
        return f"platform is {on}, not tpu"
    if head_dim % LANES:
        return f"head_dim {head_dim} must be a multiple of {LANES} for the paged TPU kernel"
    if jnp.dtype(pool_dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.int8)):
        return (
            f"the paged TPU kernels read keys and values as bfloat16 or int8, the pool is {jnp.dtype(pool_dtype).name}"
        )
    return None


def check_inputs(kernel: str, q, pool_k, pool_v, lengths, table, pages_per_block: int):
    """(whether the pool is int8, the key pool's shape) after checking the shapes a paged kernel
    takes: q [S, H, D], pools [KV, pages, page_size, D] with H a multiple of KV, lengths [S], table [S, pages]."""
    s, h, d = q.shape
    quantized = isinstance(pool_k, QuantizedPages)
    kshape, vshape = (pool_k.data.shape, pool_v.data.shape) if quantized else (pool_k.shape, pool_v.shape)
    if kshape != vshape or h % kshape[0] or kshape[3] != d:
        raise ValueError(
            f"{kernel}: q {q.shape} needs pools [kv_heads, pages, page_size, {d}] with heads a "
            f"multiple of kv_heads, got keys {kshape} and values {vshape}"
        )
    if lengths.shape != (s,) or table.ndim != 2 or table.shape[0] != s:
        raise ValueError(
            f"{kernel}: lengths must be [{s}] and table [{s}, pages], got {lengths.shape} and {table.shape}"
        )
    if pages_per_block < 1:
        raise ValueError(f"pages_per_block must be >= 1, got {pages_per_block}")
    return quantized, kshape


def paged_kernel_attention(
    q: jax.Array, pool_k, pool_v, lengths: jax.Array, table: jax.Array, *, pages_per_block: int
) -> jax.Array:
    """One query per slot ``q [S, H, D]`` over its first ``lengths[s]`` paged keys -> ``[S, H, D]``.

    Under a mesh (``jax.set_mesh``) the kernel runs inside ``jax.shard_map`` (Mosaic kernels cannot
    be partitioned automatically): slots over the data axes that divide S, kv heads (pool axis 0)
    and their q heads over ``tensor`` when it divides the kv heads, else heads whole. The pool is
    expected replicated over the data axes: each shard reads its slots' pages from its own copy.
    """
    s, h, d = q.shape
    quantized, kshape = check_inputs("paged kernel", q, pool_k, pool_v, lengths, table, pages_per_block)
    kv, num_pages = kshape[0], kshape[1]
    block = min(pages_per_block, table.shape[1])
    pad = -table.shape[1] % block  # the kernel needs whole blocks of entries per slot
    # Entries past a slot's pages ("no page" = num_pages, or anything) are still DMA'd inside its
    # last block, then masked: clip them to a real page so the copy stays in bounds.
    table = jnp.clip(jnp.pad(table.astype(jnp.int32), ((0, 0), (0, pad))), 0, num_pages - 1)
    lengths = lengths.astype(jnp.int32)
    run = _kernel8 if quantized else _kernel
    run = functools.partial(run, pages_per_block=block)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return run(q, pool_k, pool_v, lengths, table)
    q_spec, pool_spec, slot_spec = _specs(mesh, s, kv)
    if quantized:
        pool_spec = QuantizedPages(pool_spec, P(*pool_spec[:3]))  # pyright: ignore[reportArgumentType] (a pytree of specs)
    return jax.shard_map(
        run,
        in_specs=(q_spec, pool_spec, pool_spec, slot_spec, P(slot_spec[0], None)),
        out_specs=q_spec,
        check_vma=False,
    )(q, pool_k, pool_v, lengths, table)


def _specs(mesh, slots: int, kv_heads: int):
    """shard_map specs (q, pools, lengths): slots over the data axes, heads over ``tensor`` if it divides K.

    When ``tensor`` divides the q heads but not the kv heads, heads stay whole: a pool cannot be
    repeated to the q heads per call (it is the whole cache), so every tensor shard computes all heads.
    """
    from microcoder_jax.sharding import logical_to_spec

    rows = logical_to_spec(("batch",), mesh, (slots,))[0]
    tensor = dict(mesh.shape).get("tensor", 1)
    heads = "tensor" if tensor > 1 and kv_heads % tensor == 0 else None
    return P(rows, heads, None), P(heads, None, None, None), P(rows)


def _kernel8(q, pool_k, pool_v, lengths, table, pages_per_block):
    """The int8 kernel on one shard (q in fp32, pre-scaled)."""
    scaled = q.astype(jnp.float32) * (q.shape[-1] ** -0.5)
    out = int8_paged_attention(
        scaled, pool_k.data, pool_k.scale, pool_v.data, pool_v.scale, lengths, table, pages_per_block=pages_per_block
    )
    return out.astype(q.dtype)


def _kernel(q, pool_k, pool_v, lengths, table, pages_per_block):
    """The Pallas call on one shard; q goes in fp32 and pre-scaled (the kernel has no softmax scale).

    An fp32 q also makes the kernel keep its running output in fp32 between blocks.
    """
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    scaled = q.astype(jnp.float32) * (q.shape[-1] ** -0.5)
    out = paged_attention(scaled, pool_k, pool_v, lengths, table, pages_per_compute_block=pages_per_block)
    return out.astype(q.dtype)
