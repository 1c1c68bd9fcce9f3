"""Qwen3 decode steps over a paged KV cache: per-layer page pools read through per-slot page tables.

A pool holds ``[pages, kv_heads, page_size, head_dim]`` keys (and values) per layer. A slot's page
table lists its pages in order; logical cache index ``c = entry * page_size + offset``. A slot's
prompt fills indices ``[0, prompt_len)`` of its first ``prompt_pages`` entries (pages shared by all
samples of the prompt) and its generated tokens start on a fresh page at ``prompt_pages *
page_size``, so no sample ever writes into a shared page.

The XLA path reads pages in blocks of ``block_pages`` with an online softmax, and only as many
blocks as the longest live slot needs this step (a ``fori_loop`` with a traced trip count), not the
whole table. Idle slots compute finite garbage and their writes are dropped.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from microcoder_jax.models import qwen3
from microcoder_jax.sharding import constrain

POOL_AXES = (None, "kv_heads", None, "head_dim")


class PagePool(NamedTuple):
    """Keys and values: one ``[pages, kv_heads, page_size, head_dim]`` array per layer."""

    k: tuple
    v: tuple


def init_pool(config: qwen3.Qwen3Config, num_pages: int, page_size: int, dtype=None) -> PagePool:
    shape = (num_pages, config.num_kv_heads, page_size, config.head_dim)
    dtype = jnp.dtype(dtype or config.dtype)
    zeros = lambda: tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers))  # noqa: E731
    return PagePool(zeros(), zeros())


class SlotView(NamedTuple):
    """What attention needs to know about each slot's cache, all ``[S]`` except ``table [S, M]``."""

    table: jax.Array         # page ids; entries past the used ones may hold anything (masked)
    prompt_len: jax.Array    # real prompt tokens at logical indices [0, prompt_len)
    prompt_pages: jax.Array  # generated tokens start at prompt_pages * page_size
    written: jax.Array       # generated tokens already in the cache (including this step's)
    blocks: jax.Array        # scalar: blocks of block_pages entries to read this step


def blocks_needed(view_pages: jax.Array, live: jax.Array, block_pages: int) -> jax.Array:
    """Blocks of ``block_pages`` table entries that cover every live slot's used pages."""
    longest = jnp.max(jnp.where(live, view_pages, 0))
    return jnp.maximum(-(-longest // block_pages), 1)


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
    pages = aligned.reshape(b, kv, width // page_size, page_size, d).transpose(0, 2, 1, 3, 4)
    return pool_layer.at[page_ids.reshape(-1)].set(
        pages.reshape(-1, kv, page_size, d).astype(pool_layer.dtype), mode="drop")


def paged_attention(q: jax.Array, pool_k: jax.Array, pool_v: jax.Array, view: SlotView,
                    block_pages: int) -> jax.Array:
    """One query per slot ``q [S, H, D]`` over its pages -> ``[S, H, D]`` (plain XLA, online softmax).

    Each block's pages are gathered into a head-first ``[S, K, slots, D]`` copy, then read by
    broadcast multiply-reduces as in ``attention.cached_attention``: on XLA:CPU a gather fused into
    the reductions, or a batched matmul over the gathered pages, was 5-7x slower.
    """
    s, h, d = q.shape
    kv, page_size = pool_k.shape[1], pool_k.shape[2]
    width = block_pages * page_size
    qh = q.reshape(s, kv, h // kv, 1, d).astype(jnp.float32)
    low = jnp.finfo(jnp.float32).min
    gen_start = view.prompt_pages * page_size

    def gather(pool, ids):  # [S, bp] page ids -> [S, K, bp * page_size, D]
        block = jnp.take(pool, ids, axis=0, mode="clip").astype(jnp.float32)
        return block.transpose(0, 2, 1, 3, 4).reshape(s, kv, width, d)

    def block(j, carry):
        top, total, acc = carry
        ids = jax.lax.dynamic_slice_in_dim(view.table, j * block_pages, block_pages, axis=1)
        kb, vb = jax.lax.optimization_barrier((gather(pool_k, ids), gather(pool_v, ids)))
        c = j * width + jnp.arange(width)[None, :]  # logical indices [1, width]
        valid = (c < view.prompt_len[:, None]) | ((c >= gen_start[:, None]) & (c < (gen_start + view.written)[:, None]))
        scores = jnp.sum(qh * kb[:, :, None], axis=-1) * (d ** -0.5)  # [S, K, G, width]
        scores = jnp.where(valid[:, None, None], scores, low)
        new_top = jnp.maximum(top, jnp.max(scores, axis=-1))
        scale = jnp.exp(top - new_top)
        e = jnp.exp(scores - new_top[..., None])
        total = total * scale + jnp.sum(e, axis=-1)
        acc = acc * scale[..., None] + jnp.sum(e[..., None] * vb[:, :, None], axis=-2)
        return new_top, total, acc

    init = (jnp.full((s, kv, h // kv), low), jnp.zeros((s, kv, h // kv)), jnp.zeros((s, kv, h // kv, d)))
    _, total, acc = jax.lax.fori_loop(0, view.blocks, block, init)
    return (acc / total[..., None]).reshape(s, h, d).astype(q.dtype)


def paged_decode_step(params: dict, config: qwen3.Qwen3Config, tokens: jax.Array, positions: jax.Array,
                      pool: PagePool, write_page: jax.Array, write_offset: jax.Array, view: SlotView,
                      block_pages: int) -> tuple[jax.Array, PagePool]:
    """Feed one token per slot (``tokens, positions [S]``) -> (float32 logits ``[S, V]``, updated pool).

    ``params`` are ``DecodingParams`` (``models.decoding_params``). Each slot's new key/value goes to page
    ``write_page`` at ``write_offset`` (ids out of range are dropped: idle slots) before it attends.
    """
    dtype = jnp.dtype(config.dtype)
    x = jnp.take(params.embed, tokens[:, None], axis=0).astype(dtype)  # [S, 1, E]
    x = constrain(x, ("batch", "length", None))
    rope = qwen3.rope_tables(positions[:, None], config)
    new_k, new_v = [], []
    for i in range(config.num_layers):
        pk, pv = pool.k[i], pool.v[i]

        def attend(q, k, v, pk=pk, pv=pv):
            pk = pk.at[write_page, :, write_offset].set(k[:, 0].astype(pk.dtype), mode="drop")
            pv = pv.at[write_page, :, write_offset].set(v[:, 0].astype(pv.dtype), mode="drop")
            pk, pv = constrain(pk, POOL_AXES), constrain(pv, POOL_AXES)
            return paged_attention(q[:, 0], pk, pv, view, block_pages)[:, None], (pk, pv)

        x, (pk, pv) = qwen3._layer(config, x, params.layers[i], rope, attend, out_in=True)
        new_k.append(pk)
        new_v.append(pv)
    x = qwen3.rms_norm(x, params.final_norm, config.rms_norm_eps)
    return qwen3.lm_head(params, config, x[:, 0]), PagePool(tuple(new_k), tuple(new_v))
