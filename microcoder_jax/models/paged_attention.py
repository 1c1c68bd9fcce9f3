"""Qwen3 decode steps over a paged KV cache: per-layer page pools read through per-slot page tables.

A pool holds ``[kv_heads, pages, page_size, head_dim]`` keys (and values) per layer, the layout of
JAX's TPU paged-attention kernel. A slot's keys are contiguous in its page table: logical index
``c`` lives at page ``table[c // page_size]``, offset ``c % page_size``, and ``[0, lengths)`` are
valid. The prompt's full pages are shared by its G samples; a partly filled last prompt page is
copied into each sample's first own page when it takes a slot, so no sample writes a shared page.

On TPU (bf16 pool, head_dim a multiple of 128) attention is JAX's Pallas paged kernel
(``models.paged_kernel``), which reads each slot's own pages only. Elsewhere the XLA path reads
pages in blocks of ``block_pages`` with an online softmax, and only as many blocks as the longest
live slot needs this step (a ``fori_loop`` with a traced trip count), not the whole table. Idle
slots compute finite garbage and their writes are dropped.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from microcoder_jax.models import qwen3
from microcoder_jax.models.attention import _fall_back, platform
from microcoder_jax.models.paged_kernel import paged_kernel_attention, paged_kernel_unsupported
from microcoder_jax.sharding import constrain

POOL_AXES = ("kv_heads", None, None, "head_dim")


class PagePool(NamedTuple):
    """Keys and values: one ``[kv_heads, pages, page_size, head_dim]`` array per layer."""

    k: tuple
    v: tuple


def pool_shape(config: qwen3.Qwen3Config, num_pages: int, page_size: int) -> tuple[int, ...]:
    return (config.num_kv_heads, num_pages, page_size, config.head_dim)


def init_pool(config: qwen3.Qwen3Config, num_pages: int, page_size: int, dtype=None) -> PagePool:
    shape = pool_shape(config, num_pages, page_size)
    dtype = jnp.dtype(dtype or config.dtype)
    zeros = lambda: tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers))  # noqa: E731
    return PagePool(zeros(), zeros())


class SlotView(NamedTuple):
    """What attention needs to know about each slot's cache."""

    table: jax.Array    # [S, M] page ids; entries past the used ones may hold anything (masked)
    lengths: jax.Array  # [S] valid keys, this step's own included (0: idle slot)
    blocks: jax.Array   # scalar: blocks of block_pages entries to read this step


def blocks_needed(lengths: jax.Array, page_size: int, block_pages: int) -> jax.Array:
    """Blocks of ``block_pages`` table entries that cover every slot's valid keys (at least one)."""
    return jnp.maximum(-(-jnp.max(lengths) // (page_size * block_pages)), 1)


def write_prompt_pages(pool_layer: jax.Array, cache_layer: jax.Array, prompt_len: jax.Array,
                       page_ids: jax.Array) -> jax.Array:
    """Left-padded prompt keys ``[B, K, P, D]`` -> their pages (``page_ids [B, P / page_size]``).

    Each prompt's real tokens are moved to the front first; ids out of range (pages a short prompt
    does not need, or prompts not admitted) are dropped.
    """
    b, kv, width, d = cache_layer.shape
    page_size = pool_layer.shape[2]
    src = jnp.minimum(jnp.arange(width)[None, :] + (width - prompt_len)[:, None], width - 1)  # [B, P]
    aligned = jnp.take_along_axis(cache_layer, src[:, None, :, None], axis=2)
    pages = aligned.transpose(1, 0, 2, 3).reshape(kv, b * (width // page_size), page_size, d)
    return pool_layer.at[:, page_ids.reshape(-1)].set(pages.astype(pool_layer.dtype), mode="drop")


def write_keys(pool_layer: jax.Array, page: jax.Array, offset: jax.Array, new: jax.Array) -> jax.Array:
    """Each slot's new key ``new [S, K, D]`` -> page ``page[s]`` at ``offset[s]`` (ids out of range: dropped).

    Indexed by (head, page, offset) so each write is one contiguous ``head_dim`` row: a slice over
    the heads instead makes TPU layout assignment carry the pool heads-minor and copy the whole
    pool to the kernel's layout every layer and step.
    """
    heads = jnp.arange(pool_layer.shape[0])[None, :]
    return pool_layer.at[heads, page[:, None], offset[:, None]].set(new.astype(pool_layer.dtype), mode="drop")


def copy_pages(pool: PagePool, src: jax.Array, dst: jax.Array) -> PagePool:
    """Page ``src[i]`` copied to page ``dst[i]`` in every layer (ids out of range: nothing copied)."""
    # every device copies all pages in its own replica of the pool (ids replicated, not per slot
    # shard): nothing to all-gather
    src, dst = constrain(src, (None,)), constrain(dst, (None,))
    copy = lambda x: x.at[:, dst].set(jnp.take(x, src, axis=1, mode="clip"), mode="drop")  # noqa: E731
    return PagePool(tuple(map(copy, pool.k)), tuple(map(copy, pool.v)))


def paged_attention(q: jax.Array, pool_k: jax.Array, pool_v: jax.Array, view: SlotView,
                    block_pages: int) -> jax.Array:
    """One query per slot ``q [S, H, D]`` over its pages -> ``[S, H, D]`` (plain XLA, online softmax).

    Each block's pages are gathered into a ``[K, S, slots, D]`` copy (no transpose: the pool is
    kv-head first) and read by broadcast multiply-reduces as in ``attention.cached_attention``.
    """
    s, h, d = q.shape
    kv, page_size = pool_k.shape[0], pool_k.shape[2]
    width = block_pages * page_size
    qk = q.reshape(s, kv, h // kv, d).transpose(1, 0, 2, 3).astype(jnp.float32)  # [K, S, G, D]
    low = jnp.finfo(jnp.float32).min

    def gather(pool, ids):  # [S, bp] page ids -> [K, S, bp * page_size, D]
        return jnp.take(pool, ids, axis=1, mode="clip").astype(jnp.float32).reshape(kv, s, width, d)

    def block(j, carry):
        top, total, acc = carry
        ids = jax.lax.dynamic_slice_in_dim(view.table, j * block_pages, block_pages, axis=1)
        kb, vb = jax.lax.optimization_barrier((gather(pool_k, ids), gather(pool_v, ids)))
        valid = j * width + jnp.arange(width)[None, :] < view.lengths[:, None]  # [S, width]
        scores = jnp.sum(qk[:, :, :, None] * kb[:, :, None], axis=-1) * (d ** -0.5)  # [K, S, G, width]
        scores = jnp.where(valid[None, :, None], scores, low)
        new_top = jnp.maximum(top, jnp.max(scores, axis=-1))
        scale = jnp.exp(top - new_top)
        e = jnp.exp(scores - new_top[..., None])
        total = total * scale + jnp.sum(e, axis=-1)
        acc = acc * scale[..., None] + jnp.sum(e[..., None] * vb[:, :, None], axis=-2)
        return new_top, total, acc

    init = (jnp.full((kv, s, h // kv), low), jnp.zeros((kv, s, h // kv)), jnp.zeros((kv, s, h // kv, d)))
    _, total, acc = jax.lax.fori_loop(0, view.blocks, block, init)
    return (acc / total[..., None]).transpose(1, 0, 2, 3).reshape(s, h, d).astype(q.dtype)


def choose(implementation: str, head_dim: int, pool_dtype, on: str | None = None) -> str:
    """``"kernel"`` or ``"xla"`` for ``model.attention`` on platform ``on`` (default: the one being
    compiled for): auto takes the Pallas kernel where it serves (logging once why not), ``splash``
    (the TPU kernels) insists on it, the others are XLA."""
    reason = paged_kernel_unsupported(head_dim, pool_dtype, on or platform())
    if implementation == "splash" and reason:
        raise ValueError(f"attention='splash' asks for the TPU kernels; the paged decode kernel cannot run "
                         f"here: {reason}; use attention='auto' or 'xla'")
    if implementation not in ("auto", "splash"):
        return "xla"
    return _fall_back(f"paged decode: {reason}") if reason else "kernel"


def paged_decode_step(params: dict, config: qwen3.Qwen3Config, tokens: jax.Array, positions: jax.Array,
                      pool: PagePool, write_page: jax.Array, write_offset: jax.Array, view: SlotView,
                      block_pages: int) -> tuple[jax.Array, PagePool]:
    """Feed one token per slot (``tokens, positions [S]``) -> (float32 logits ``[S, V]``, updated pool).

    ``params`` are ``DecodingParams`` (``models.decoding_params``). Each slot's new key/value goes to page
    ``write_page`` at ``write_offset`` (ids out of range are dropped: idle slots) before it attends.
    """
    dtype = jnp.dtype(config.dtype)
    kernel = choose(config.attention, config.head_dim, pool.k[0].dtype) == "kernel"
    x = jnp.take(params.embed, tokens[:, None], axis=0).astype(dtype)  # [S, 1, E]
    x = constrain(x, ("batch", "length", None))
    rope = qwen3.rope_tables(positions[:, None], config)
    new_k, new_v = [], []
    for i in range(config.num_layers):
        pk, pv = pool.k[i], pool.v[i]

        def attend(q, k, v, pk=pk, pv=pv):
            pk = write_keys(pk, write_page, write_offset, k[:, 0])
            pv = write_keys(pv, write_page, write_offset, v[:, 0])
            pk, pv = constrain(pk, POOL_AXES), constrain(pv, POOL_AXES)
            if kernel:
                out = paged_kernel_attention(q[:, 0], pk, pv, view.lengths, view.table, pages_per_block=block_pages)
            else:
                out = paged_attention(q[:, 0], pk, pv, view, block_pages)
            return out[:, None], (pk, pv)

        x, (pk, pv) = qwen3._layer(config, x, params.layers[i], rope, attend, out_in=True)
        new_k.append(pk)
        new_v.append(pv)
    x = qwen3.rms_norm(x, params.final_norm, config.rms_norm_eps)
    return qwen3.lm_head(params, config, x[:, 0]), PagePool(tuple(new_k), tuple(new_v))
