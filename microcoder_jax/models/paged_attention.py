"""The decoder's decode steps over a paged KV cache: per-layer page pools read through per-slot page tables.

A pool holds ``[kv_heads, pages, page_size, head_dim]`` keys (and values) per layer, the layout of
JAX's TPU paged-attention kernel. A slot's keys are contiguous in its page table: logical index
``c`` lives at page ``table[c // page_size]``, offset ``c % page_size``, and ``[0, lengths)`` are
valid. The prompt's full pages are shared by its G samples; a partly filled last prompt page is
copied into each sample's first own page when it takes a slot, so no sample writes a shared page.

An int8 pool (``kv_dtype="int8"``) holds each layer as ``QuantizedPages``: int8 keys (values) and
one float32 scale per (head, page, offset), i.e. per (token, head): a key is quantized as it is
written (prefill and every decode step) with its own absmax over ``head_dim``, so appending a token
never rescales a page. Attention reads int8 blocks and applies the scales to the scores (keys) and
to the probabilities (values), exactly ``q . (s k) = s (q . k)``: no dequantized pool exists.

On TPU (bf16 or int8 pool, head_dim a multiple of 128) attention is a Pallas paged kernel
(``models.paged_kernel``); on GPU (bf16/f16 or int8 pool, power-of-two head_dim and page_size)
JAX's Pallas Triton one behind ``models.paged_kernel_gpu``: both read each slot's own pages
only. Elsewhere the XLA path reads pages in blocks of ``block_pages`` with an online softmax,
and only as many blocks as the longest live slot needs this step (a ``fori_loop`` with a traced
trip count), not the whole table. Idle slots compute finite garbage and their writes are dropped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from microcoder_jax.models import decoder
from microcoder_jax.models.attention import _fall_back, platform
from microcoder_jax.models.paged_kernel import paged_kernel_attention, paged_kernel_unsupported
from microcoder_jax.models.paged_kernel_gpu import gpu_kernel_unsupported, gpu_paged_attention
from microcoder_jax.models.paged_kernel_int8 import QuantizedPages
from microcoder_jax.sharding import constrain

POOL_AXES = ("kv_heads", None, None, "head_dim")


INT8_MAX = 127.0


class PagePool(NamedTuple):
    """Keys and values: one ``[kv_heads, pages, page_size, head_dim]`` array (or ``QuantizedPages``) per layer."""

    k: tuple
    v: tuple


def quantize(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x [..., D]`` -> (int8 ``[..., D]``, f32 scale ``[...]``): symmetric, absmax over the last axis.

    ``|dequantize(q, s) - x| <= s / 2 = max|x| / 254`` per element (round to nearest, no clipping).
    """
    x = x.astype(jnp.float32)
    scale = jnp.max(jnp.abs(x), axis=-1) / INT8_MAX
    safe = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round(x / safe[..., None]), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return q, scale


def dequantize(q: jax.Array, scale: jax.Array, dtype=jnp.float32) -> jax.Array:
    return (q.astype(jnp.float32) * scale[..., None]).astype(dtype)


def pool_shape(config: decoder.DecoderConfig, num_pages: int, page_size: int) -> tuple[int, ...]:
    return (config.num_kv_heads, num_pages, page_size, config.head_dim)


def pool_dtype(kv_dtype: str | None, config: decoder.DecoderConfig):
    """The element dtype of a pool for ``sampling.kv_dtype`` (``model``/None: the model's dtype)."""
    return jnp.dtype(config.dtype if kv_dtype in (None, "model") else kv_dtype)


def init_pool(config: decoder.DecoderConfig, num_pages: int, page_size: int, dtype=None) -> PagePool:
    shape = pool_shape(config, num_pages, page_size)
    dtype = pool_dtype(dtype, config)
    if dtype == jnp.int8:
        layer = lambda: QuantizedPages(jnp.zeros(shape, jnp.int8), jnp.zeros(shape[:3], jnp.float32))  # noqa: E731
    else:
        layer = lambda: jnp.zeros(shape, dtype)  # noqa: E731
    return PagePool(tuple(layer() for _ in range(config.num_layers)), tuple(layer() for _ in range(config.num_layers)))


def element_dtype(layer) -> jnp.dtype:
    """The dtype pages are stored in (int8 for ``QuantizedPages``)."""
    return (layer.data if isinstance(layer, QuantizedPages) else layer).dtype


def constrain_pool(layer):
    """``constrain`` for one layer of the pool (its scales: the same axes less ``head_dim``)."""
    if isinstance(layer, QuantizedPages):
        return QuantizedPages(constrain(layer.data, POOL_AXES), constrain(layer.scale, POOL_AXES[:3]))
    return constrain(layer, POOL_AXES)


class SlotView(NamedTuple):
    """What attention needs to know about each slot's cache."""

    table: jax.Array  # [S, M] page ids; entries past the used ones may hold anything (masked)
    lengths: jax.Array  # [S] valid keys, this step's own included (0: idle slot)
    blocks: jax.Array  # scalar: blocks of block_pages entries to read this step


def blocks_needed(lengths: jax.Array, page_size: int, block_pages: int) -> jax.Array:
    """Blocks of ``block_pages`` table entries that cover every slot's valid keys (at least one)."""
    return jnp.maximum(-(-jnp.max(lengths) // (page_size * block_pages)), 1)


def write_prompt_pages(pool_layer, cache_layer: jax.Array, prompt_len: jax.Array, page_ids: jax.Array):
    """Left-padded prompt keys ``[B, K, P, D]`` -> their pages (``page_ids [B, P / page_size]``).

    Each prompt's real tokens are moved to the front first; ids out of range (pages a short prompt
    does not need, or prompts not admitted) are dropped.
    """
    b, kv, width, d = cache_layer.shape
    page_size = pool_layer.scale.shape[2] if isinstance(pool_layer, QuantizedPages) else pool_layer.shape[2]
    src = jnp.minimum(jnp.arange(width)[None, :] + (width - prompt_len)[:, None], width - 1)  # [B, P]
    aligned = jnp.take_along_axis(cache_layer, src[:, None, :, None], axis=2)
    pages = aligned.transpose(1, 0, 2, 3).reshape(kv, b * (width // page_size), page_size, d)
    ids = page_ids.reshape(-1)
    if isinstance(pool_layer, QuantizedPages):
        q, scale = quantize(pages)
        return QuantizedPages(
            pool_layer.data.at[:, ids].set(q, mode="drop"), pool_layer.scale.at[:, ids].set(scale, mode="drop")
        )
    return pool_layer.at[:, ids].set(pages.astype(pool_layer.dtype), mode="drop")


def write_keys(pool_layer, page: jax.Array, offset: jax.Array, new: jax.Array):
    """Each slot's new key ``new [S, K, D]`` -> page ``page[s]`` at ``offset[s]`` (ids out of range: dropped).

    Indexed by (head, page, offset) so each write is one contiguous ``head_dim`` row: a slice over
    the heads instead makes TPU layout assignment carry the pool heads-minor and copy the whole
    pool to the kernel's layout every layer and step. An int8 layer quantizes ``new`` first.
    """
    if isinstance(pool_layer, QuantizedPages):
        q, scale = quantize(new)
        return QuantizedPages(
            write_keys(pool_layer.data, page, offset, q), _write_scales(pool_layer.scale, page, offset, scale)
        )
    heads = jnp.arange(pool_layer.shape[0])[None, :]
    return pool_layer.at[heads, page[:, None], offset[:, None]].set(new.astype(pool_layer.dtype), mode="drop")


def _write_scales(scale_layer: jax.Array, page: jax.Array, offset: jax.Array, new: jax.Array):
    """Each slot's new scales ``new [S, K]`` -> ``scale_layer [K, pages, page_size]`` at (page, offset).

    Written as whole ``page_size`` rows (read, one entry replaced, written back), as ``write_keys``
    writes whole ``head_dim`` rows: element writes make TPU layout assignment carry the scales
    pages-minor and copy them to the int8 kernel's (row-major) layout every layer and step.
    """
    heads = jnp.arange(scale_layer.shape[0])[None, :]
    rows = scale_layer[heads, jnp.clip(page, 0, scale_layer.shape[1] - 1)[:, None]]  # [S, K, page_size]
    hit = jnp.arange(scale_layer.shape[2])[None, None, :] == offset[:, None, None]
    rows = jnp.where(hit, new[:, :, None].astype(scale_layer.dtype), rows)
    return scale_layer.at[heads, page[:, None]].set(rows, mode="drop")


def write_tokens(pool_layer, page: jax.Array, offset: jax.Array, new: jax.Array):
    """Many tokens' keys ``new [N, K, D]`` -> page ``page[n]`` at ``offset[n]`` (ids out of range:
    dropped); each (page, offset) at most once. `write_keys` for a whole sequence (the recompute
    after a weight update): an int8 layer's scales are written element by element, as several
    tokens may share a page."""
    heads = jnp.arange(new.shape[1])[None, :]
    at = (heads, page[:, None], offset[:, None])
    if isinstance(pool_layer, QuantizedPages):
        q, scale = quantize(new)
        return QuantizedPages(
            pool_layer.data.at[at].set(q, mode="drop"), pool_layer.scale.at[at].set(scale, mode="drop")
        )
    return pool_layer.at[at].set(new.astype(pool_layer.dtype), mode="drop")


def read_pages(pool_layer, table: jax.Array, dtype=jnp.float32) -> jax.Array:
    """The keys (or values) of each row's pages in table order: ``table [A, M]`` page ids (out of
    range: zeros) -> ``[A, K, M * page_size, D]`` in ``dtype`` (an int8 layer dequantised)."""
    a, m = table.shape

    def gather(x):  # [K, pages, ps, ...] -> [A, K, M * ps, ...]
        got = jnp.take(x, table.reshape(-1), axis=1, mode="fill", fill_value=0)
        got = got.reshape(x.shape[0], a, m * x.shape[2], *x.shape[3:])
        return jnp.moveaxis(got, 0, 1)

    if isinstance(pool_layer, QuantizedPages):
        return dequantize(gather(pool_layer.data), gather(pool_layer.scale), dtype)
    return gather(pool_layer).astype(dtype)


def copy_pages(pool: PagePool, src: jax.Array, dst: jax.Array) -> PagePool:
    """Page ``src[i]`` copied to page ``dst[i]`` in every layer (ids out of range: nothing copied)."""
    # every device copies all pages in its own replica of the pool (ids replicated, not per slot
    # shard): nothing to all-gather
    src, dst = constrain(src, (None,)), constrain(dst, (None,))
    copy = lambda x: x.at[:, dst].set(jnp.take(x, src, axis=1, mode="clip"), mode="drop")  # noqa: E731
    return jax.tree.map(copy, pool)


def paged_attention(q: jax.Array, pool_k, pool_v, view: SlotView, block_pages: int) -> jax.Array:
    """One query per slot ``q [S, H, D]`` over its pages -> ``[S, H, D]`` (plain XLA, online softmax).

    Each block's pages are gathered into a ``[K, S, slots, D]`` copy (no transpose: the pool is
    kv-head first) and read by broadcast multiply-reduces as in ``attention.cached_attention``.
    ``QuantizedPages`` are gathered as int8 with their scales and scaled inside the block.
    """
    s, h, d = q.shape
    quantized = isinstance(pool_k, QuantizedPages)
    kv, page_size = (pool_k.data if quantized else pool_k).shape[0], (pool_k.data if quantized else pool_k).shape[2]
    width = block_pages * page_size
    qk = q.reshape(s, kv, h // kv, d).transpose(1, 0, 2, 3).astype(jnp.float32)  # [K, S, G, D]
    low = jnp.finfo(jnp.float32).min

    def gather(pool, ids):  # [S, bp] page ids -> [K, S, bp * page_size, D] (int8 stays int8)
        return jnp.take(pool, ids, axis=1, mode="clip").reshape(kv, s, width, *pool.shape[3:])

    def load(pool, ids):  # -> (f32 [K, S, width, D], f32 scales [K, S, width] or 1)
        if quantized:
            x, sc = jax.lax.optimization_barrier((gather(pool.data, ids), gather(pool.scale, ids)))
            return x.astype(jnp.float32), sc
        return gather(pool, ids).astype(jnp.float32), jnp.float32(1)

    def block(j, carry):
        top, total, acc = carry
        ids = jax.lax.dynamic_slice_in_dim(view.table, j * block_pages, block_pages, axis=1)
        (kb, ks), (vb, vs) = load(pool_k, ids), load(pool_v, ids)
        if not quantized:
            kb, vb = jax.lax.optimization_barrier((kb, vb))
        valid = j * width + jnp.arange(width)[None, :] < view.lengths[:, None]  # [S, width]
        scores = jnp.sum(qk[:, :, :, None] * kb[:, :, None], axis=-1)  # [K, S, G, width]
        scores = scores * (ks[:, :, None] * (d**-0.5) if quantized else d**-0.5)
        scores = jnp.where(valid[None, :, None], scores, low)
        new_top = jnp.maximum(top, jnp.max(scores, axis=-1))
        scale = jnp.exp(top - new_top)
        e = jnp.exp(scores - new_top[..., None])
        total = total * scale + jnp.sum(e, axis=-1)
        p = e * vs[:, :, None] if quantized else e  # the value scales weight the probabilities
        acc = acc * scale[..., None] + jnp.sum(p[..., None] * vb[:, :, None], axis=-2)
        return new_top, total, acc

    init = (jnp.full((kv, s, h // kv), low), jnp.zeros((kv, s, h // kv)), jnp.zeros((kv, s, h // kv, d)))
    _, total, acc = jax.lax.fori_loop(0, view.blocks, block, init)
    return (acc / total[..., None]).transpose(1, 0, 2, 3).reshape(s, h, d).astype(q.dtype)


def choose(implementation: str, head_dim: int, pool_dtype, on: str | None = None, page_size: int | None = None) -> str:
    """``"kernel"`` (TPU), ``"gpu_kernel"`` or ``"xla"`` for ``model.attention`` on platform ``on``
    (default: the one being compiled for): auto takes the Pallas kernel of the platform where it
    serves (logging once why not), ``splash`` (the TPU kernels) insists on the TPU one, the others
    are XLA."""
    on = on or platform()
    reason = paged_kernel_unsupported(head_dim, pool_dtype, on)
    if implementation == "splash" and reason:
        raise ValueError(
            f"attention='splash' asks for the TPU kernels; the paged decode kernel cannot run "
            f"here: {reason}; use attention='auto' or 'xla'"
        )
    if implementation not in ("auto", "splash"):
        return "xla"
    if implementation == "auto" and on == "gpu":
        reason = gpu_kernel_unsupported(head_dim, pool_dtype, on, page_size)
        return _fall_back(f"paged decode: {reason}") if reason else "gpu_kernel"
    return _fall_back(f"paged decode: {reason}") if reason else "kernel"


def paged_decode_step(
    params: Any,
    config: decoder.DecoderConfig,
    tokens: jax.Array,
    positions: jax.Array,
    pool: PagePool,
    write_page: jax.Array,
    write_offset: jax.Array,
    view: SlotView,
    block_pages: int,
) -> tuple[jax.Array, PagePool]:
    """Feed one token per slot (``tokens, positions [S]``) -> (float32 logits ``[S, V]``, updated pool).

    ``params`` are ``DecodingParams`` (``models.decoding_params``). Each slot's new key/value goes to page
    ``write_page`` at ``write_offset`` (ids out of range are dropped: idle slots) before it attends.
    """
    dtype = jnp.dtype(config.dtype)
    page_size = (pool.k[0].data if isinstance(pool.k[0], QuantizedPages) else pool.k[0]).shape[2]
    kernel = choose(config.attention, config.head_dim, element_dtype(pool.k[0]), page_size=page_size)
    x = jnp.take(params.embed, tokens[:, None], axis=0).astype(dtype)  # [S, 1, E]
    x = constrain(x, ("batch", "length", None))
    rope = decoder.rope_tables(positions[:, None], config)
    new_k, new_v = [], []
    for i in range(config.num_layers):
        pk, pv = pool.k[i], pool.v[i]

        def attend(q, k, v, pk=pk, pv=pv):
            pk = write_keys(pk, write_page, write_offset, k[:, 0])
            pv = write_keys(pv, write_page, write_offset, v[:, 0])
            pk, pv = constrain_pool(pk), constrain_pool(pv)
            if kernel == "gpu_kernel":
                out = gpu_paged_attention(q[:, 0], pk, pv, view.lengths, view.table, pages_per_block=block_pages)
            elif kernel == "kernel":
                out = paged_kernel_attention(q[:, 0], pk, pv, view.lengths, view.table, pages_per_block=block_pages)
            else:
                out = paged_attention(q[:, 0], pk, pv, view, block_pages)
            return out[:, None], (pk, pv)

        x, (pk, pv) = decoder.decoder_layer(config, x, params.layers[i], rope, attend, out_in=True)
        new_k.append(pk)
        new_v.append(pv)
    x = decoder.rms_norm(x, params.final_norm, config.rms_norm_eps)
    return decoder.lm_head(params, config, x[:, 0]), PagePool(tuple(new_k), tuple(new_v))
