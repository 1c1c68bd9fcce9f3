"""Attention kernels behind one call: XLA einsum (everywhere), cuDNN (GPU), Pallas flash (TPU).

Shapes: ``q [B, T, H, D]``, ``k, v [B, S, K, D]`` with ``H = K * G`` (grouped-query attention).
``mask [B, T, S]`` is a boolean "query may see key"; rows with no visible key give finite garbage
(uniform weights over masked keys), never NaN — they are padding and get ignored downstream.
``segment_ids [B, T]`` (packed rows, see rl.packing): a query sees earlier keys of its own
segment only (block-diagonal causal); segment 0 is padding.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

IMPLEMENTATIONS = ("auto", "xla", "cudnn", "splash")
FLASH_BLOCK = 128  # the Pallas TPU kernel's default block: sequence and head dims must be multiples

_log = logging.getLogger(__name__)
_logged: set[str] = set()


def xla_attention(q, k, v, mask):
    """Plain einsum attention with an fp32 softmax; GQA without materialising repeated K/V.

    Heads are moved in front of the sequence dims first, so both matmuls are plain batched
    ``[T, D] x [D, S]`` products (XLA:CPU runs them ~2x faster than the strided einsum).
    """
    return head_first_attention(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), mask)


def head_first_attention(q, k, v, mask):
    """``xla_attention`` with keys and values already head-first, ``[B, K, S, D]`` (the cache layout)."""
    b, t, h, d = q.shape
    kv = k.shape[1]
    qh = q.reshape(b, t, kv, h // kv, d).transpose(0, 2, 3, 1, 4)  # [B, K, G, T, D]
    scores = jnp.einsum("bkgtd,bksd->bkgts", qh, k, preferred_element_type=jnp.float32) * (d**-0.5)
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bksd->bkgtd", probs, v)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)


def flash_attention(q, k, v, token_mask):
    """Pallas TPU flash attention, causal, for the no-cache case; padding via segment ids.

    ``token_mask [B, T]`` is 0/1 (padding) or packed rows' segment ids (0 = padding): the kernel
    takes it as its segment ids either way, so a query sees keys of its own segment only.

    Under a mesh (``jax.set_mesh``) the kernel runs inside ``jax.shard_map``, since Mosaic kernels
    cannot be partitioned automatically: rows over ``data`` + ``fsdp`` (as far as they divide the
    batch) and heads over ``tensor`` (see ``_kernel_specs``). Runs on CPU in Pallas's TPU interpret
    mode (``pltpu.force_tpu_interpret_mode()``), which the exactness tests use.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return _flash_kernel(q, k, v, token_mask)
    q_spec, kv_spec, mask_spec, repeat_first = _kernel_specs(mesh, q.shape, k.shape)
    if repeat_first:  # kv heads do not split over `tensor` but q heads do: give each q head its own kv
        k, v = (jnp.repeat(x, q.shape[2] // k.shape[2], axis=2) for x in (k, v))
    return jax.shard_map(
        _flash_kernel, in_specs=(q_spec, kv_spec, kv_spec, mask_spec), out_specs=q_spec, check_vma=False
    )(q, k, v, token_mask)


def _kernel_specs(mesh, q_shape, kv_shape):
    """shard_map specs (q, k/v, token mask) and whether k/v must be repeated to q's heads first.

    Rows split over the data axes that divide the batch (``sharding.logical_to_spec``'s rule); q
    heads over ``tensor`` when it divides them, kv heads too when it divides those (then the local
    q heads are exactly the ones grouped on the local kv heads). Otherwise heads stay whole.
    """
    from microcoder_jax.sharding import logical_to_spec

    (b, _, h, _), kv = q_shape, kv_shape[2]
    rows = logical_to_spec(("batch",), mesh, (b,))[0]
    tensor = dict(mesh.shape).get("tensor", 1)
    heads = "tensor" if tensor > 1 and h % tensor == 0 else None
    repeat_first = heads is not None and kv % tensor != 0
    return P(rows, None, heads, None), P(rows, None, heads, None), P(rows, None), repeat_first


def _flash_kernel(q, k, v, token_mask):
    """The Pallas call on one shard: ``[B, T, H, D]`` in and out, GQA by repeating k/v locally."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    h, kv = q.shape[2], k.shape[2]
    if h != kv:
        k = jnp.repeat(k, h // kv, axis=2)
        v = jnp.repeat(v, h // kv, axis=2)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # [B, H, T, D]
    segments = token_mask.astype(jnp.int32)  # pad queries see pad keys only: no empty rows
    out = fa.flash_attention(
        q, k, v, segment_ids=fa.SegmentIds(q=segments, kv=segments), causal=True, sm_scale=q.shape[-1] ** -0.5
    )
    return out.transpose(0, 2, 1, 3)


def cudnn_mask(token_mask, segment_ids=None):
    """The boolean mask ``[B, 1, T, T]`` for ``fused_attention``: key padding, and with ``segment_ids``
    keys of the query's own segment only (causality is cuDNN's ``is_causal`` flag).

    cuDNN takes a mask as an additive bias that must span both sequence dims (``[B, N|1, T, S]``):
    a ``[B, 1, 1, S]`` key mask is rejected. Its ``key_value_seq_lengths`` would be cheaper but
    means right padding, and our rows are left-padded (prompt, then completion).
    """
    b, t = token_mask.shape
    keys = token_mask.astype(bool)[:, None, None, :]
    if segment_ids is None:
        return jnp.broadcast_to(keys, (b, 1, t, t))
    return keys & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])


def fused_attention(q, k, v, token_mask, implementation: str = "cudnn", segment_ids=None):
    """``jax.nn.dot_product_attention`` (cuDNN on GPU): causal flag + the dense ``cudnn_mask``, GQA native.

    Correct for any padding and packing, not the fastest: the mask is a ``[B, 1, T, T]`` bias."""
    return jax.nn.dot_product_attention(
        q, k, v, mask=cudnn_mask(token_mask, segment_ids), is_causal=True, implementation=cast(Any, implementation)
    )  # 'xla' or 'cudnn'


def platform() -> str:
    """The platform being compiled for: the active mesh's devices (AOT topologies too), else the default."""
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else getattr(mesh, "abstract_device", None)
    return device.platform if device is not None else jax.devices()[0].platform


def _tpu_interpret_mode() -> bool:
    """True inside ``pltpu.force_tpu_interpret_mode()``: TPU kernels then run on any backend."""
    from jax._src import config

    flag = getattr(config, "pallas_tpu_interpret_mode_context_manager", None)
    return bool(flag is not None and flag.value)


def flash_unsupported(seq_len: int, head_dim: int, on: str) -> str | None:
    """Why the TPU flash kernel cannot serve this shape on platform ``on``, or None if it can."""
    if on != "tpu" and not _tpu_interpret_mode():
        return f"platform is {on}, not tpu"
    if seq_len % FLASH_BLOCK or head_dim % FLASH_BLOCK:
        return (
            f"sequence length {seq_len} and head_dim {head_dim} must be multiples of the kernel's "
            f"{FLASH_BLOCK}-wide blocks"
        )
    return None


def _fall_back(reason: str) -> str:
    if reason not in _logged:  # one line per distinct reason, not one per layer or trace
        _logged.add(reason)
        _log.info("attention=auto uses the XLA path: %s", reason)
    return "xla"


def choose(implementation: str, *, cached: bool, seq_len: int, head_dim: int, dtype=jnp.bfloat16) -> str:
    """Resolve ``"auto"`` by platform, dtype and shape; kernels only serve the no-cache causal case.

    ``auto`` takes the TPU flash kernel only where it compiles (TPU, 128-multiples), cuDNN on GPU
    for half precision (head_dim a multiple of 8 up to 128, an even length: cuDNN's rule for a
    masked backward pass), else XLA, logging once why. An explicit ``"splash"`` or ``"cudnn"`` that
    cannot compile here raises, naming the reason.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if cached:
        return "xla"
    on = platform()
    if implementation == "splash":
        reason = flash_unsupported(seq_len, head_dim, on)
        if reason:
            raise ValueError(
                f"attention='splash' (the TPU flash kernel) cannot run here: {reason}; use attention='auto' or 'xla'"
            )
        return "splash"
    if implementation == "cudnn":
        if on != "gpu":
            raise ValueError(
                f"attention='cudnn' needs a GPU, this program compiles for {on}; use attention='auto' or 'xla'"
            )
        if seq_len % 2:
            raise ValueError(
                f"attention='cudnn' trains with a mask only at even sequence lengths, got {seq_len}; "
                "pad the rows to an even length or use attention='auto'"
            )
        return "cudnn"
    if implementation == "xla":
        return "xla"
    if on == "tpu":
        reason = flash_unsupported(seq_len, head_dim, on)
        return _fall_back(reason) if reason else "splash"
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    if on == "gpu" and half and head_dim % 8 == 0 and head_dim <= 128 and seq_len % 2 == 0:
        return "cudnn"
    return "xla"


def causal_attention(q, k, v, token_mask, implementation: str = "auto", segment_ids=None):
    """Self-attention over one sequence block, causal and with ``token_mask [B, T]`` (1 = real token).

    ``segment_ids [B, T]`` (packed rows): block-diagonal causal, 0 = padding (``token_mask`` must
    then be ``segment_ids > 0``)."""
    t = q.shape[1]
    impl = choose(implementation, cached=False, seq_len=t, head_dim=q.shape[-1], dtype=q.dtype)
    if impl == "xla":
        mask = jnp.tril(jnp.ones((t, t), bool))[None] & token_mask[:, None, :].astype(bool)
        if segment_ids is not None:
            mask = mask & (segment_ids[:, :, None] == segment_ids[:, None, :])
        return xla_attention(q, k, v, mask)
    if impl == "splash":
        out = flash_attention(q, k, v, token_mask if segment_ids is None else segment_ids)
    else:
        out = fused_attention(q, k, v, token_mask, segment_ids=segment_ids)
    # Padding queries can have no visible key in a kernel: zero them so no NaN reaches later layers.
    return jnp.where(token_mask[:, :, None, None].astype(bool), out, 0).astype(q.dtype)


def cached_attention(q, k_cache, v_cache, key_mask, query_slots, prefix=None):
    """Queries ``q [B, T, H, D]`` at cache ``query_slots [T]`` over one layer's cache ``[B, K, S, D]``.

    The cache already holds the queries' own keys; ``key_mask [B, S]`` marks valid slots and a
    query sees valid slots up to its own. ``prefix = (k, v, mask)``, keys ``[Bp, K, P, D]`` and
    mask ``[Bp, P]``, is a prompt block every query also sees, shared by ``B // Bp`` consecutive
    rows (the G samples of a prompt): it is read once per prompt, not once per row.

    One query per row (decode) is a matrix-vector product per head: a broadcast multiply-reduce
    reads the cache once, ~5x faster than a batched matmul of one row on CPU.
    """
    b, t, h, d = q.shape
    kv, s = k_cache.shape[1], k_cache.shape[2]
    mask = (jnp.arange(s)[None, :] <= query_slots[:, None])[None] & key_mask[:, None, :].astype(bool)  # [B, T, S]
    if t > 1:
        if prefix is not None:  # multi-token chunks are rare here: repeat the prefix per row
            pk, pv, pmask = (jnp.repeat(x, b // x.shape[0], axis=0) for x in prefix)
            k_cache, v_cache = jnp.concatenate([pk, k_cache], 2), jnp.concatenate([pv, v_cache], 2)
            mask = jnp.concatenate([jnp.broadcast_to(pmask[:, None].astype(bool), (b, t, pk.shape[2])), mask], -1)
        return head_first_attention(q, k_cache, v_cache, mask)
    low = jnp.finfo(jnp.float32).min
    qh = q.reshape(b, kv, h // kv, 1, d).astype(jnp.float32)  # [B, K, G, 1, D] against [B, K, 1, S, D]
    # (scale the scores, not q: a scaled q made XLA:CPU's fused multiply-reduce ~4x slower)
    scores = jnp.sum(qh * k_cache[:, :, None].astype(jnp.float32), axis=-1) * (d**-0.5)  # [B, K, G, S]
    scores = jnp.where(mask[:, :1, None], scores, low)
    top = jnp.max(scores, -1)
    if prefix is not None:  # the shared prompt block, read once for all the rows of its prompt
        pk, pv, pmask = prefix
        bp, p = pk.shape[0], pk.shape[2]
        qp = qh.reshape(bp, b // bp, kv, h // kv, d)  # [Bp, R, K, G, D]
        pre = jnp.einsum("brkgd,bkpd->brkgp", qp, pk.astype(jnp.float32)) * (d**-0.5)
        pre = jnp.where(pmask[:, None, None, None, :].astype(bool), pre, low).reshape(b, kv, h // kv, p)
        top = jnp.maximum(top, jnp.max(pre, -1))  # one softmax over both blocks
    e_own = jnp.exp(scores - top[..., None])
    total = jnp.sum(e_own, -1)
    out = jnp.sum(e_own[..., None] * v_cache[:, :, None].astype(jnp.float32), axis=-2)  # [B, K, G, D]
    if prefix is not None:
        e_pre = jnp.exp(pre - top[..., None])
        total = total + jnp.sum(e_pre, -1)
        e_pre = e_pre.reshape(bp, b // bp, kv, h // kv, p, 1)  # a multiply-reduce here: ~4x the einsum on CPU
        out = out + jnp.sum(e_pre * pv[:, None, :, None].astype(jnp.float32), axis=-2).reshape(b, kv, h // kv, d)
    return (out / total[..., None]).reshape(b, 1, h, d).astype(q.dtype)


def shared_prefix_attention(q, k, v, token_mask, prefix):
    """Causal self-attention of ``q, k, v [B, T, ...]`` that also sees a prompt block shared by groups
    of consecutive rows: the training forward of G samples whose prompt was computed once.

    ``prefix = (pk, pv, pmask)``: keys and values ``[Bp, P, K, D]`` and ``pmask [Bp, P]``, read by
    ``B // Bp`` consecutive rows each. ``token_mask [B, T]`` marks the rows' own real keys. One
    softmax over both blocks (each block's max and sum combined), fp32; nothing is repeated per
    row, so the gradient of the shared keys sums over the rows that read them.
    """
    b, t, h, d = q.shape
    pk, pv, pmask = prefix
    bp, kv = pk.shape[0], k.shape[2]
    f, g = b // bp, h // kv
    low, scale = jnp.finfo(jnp.float32).min, d**-0.5
    qo = q.reshape(b, t, kv, g, d).transpose(0, 2, 3, 1, 4)  # [B, K, G, T, D]
    own = jnp.einsum("bkgtd,bksd->bkgts", qo, k.transpose(0, 2, 1, 3), preferred_element_type=jnp.float32) * scale
    mask = jnp.tril(jnp.ones((t, t), bool))[None] & token_mask[:, None, :].astype(bool)  # [B, T, T]
    own = jnp.where(mask[:, None, None], own, low)
    qp = qo.reshape(bp, f, kv, g, t, d).transpose(0, 2, 1, 3, 4, 5)  # [Bp, K, f, G, T, D]
    pre = jnp.einsum("bkfgtd,bkpd->bkfgtp", qp, pk.transpose(0, 2, 1, 3), preferred_element_type=jnp.float32) * scale
    pre = jnp.where(pmask[:, None, None, None, None, :].astype(bool), pre, low)
    to_rows = lambda x: x.swapaxes(1, 2).reshape(b, kv, *x.shape[3:])  # noqa: E731  [Bp, K, f, ...] -> [B, K, ...]
    top = jax.lax.stop_gradient(jnp.maximum(jnp.max(own, -1), to_rows(jnp.max(pre, -1))))  # [B, K, G, T]
    e_own = jnp.exp(own - top[..., None])
    e_pre = jnp.exp(pre - top.reshape(bp, f, kv, g, t).swapaxes(1, 2)[..., None])
    total = jnp.sum(e_own, -1) + to_rows(jnp.sum(e_pre, -1))
    out = jnp.einsum(
        "bkgts,bksd->bkgtd", e_own.astype(v.dtype), v.transpose(0, 2, 1, 3), preferred_element_type=jnp.float32
    )
    out_pre = jnp.einsum(
        "bkfgtp,bkpd->bkfgtd", e_pre.astype(pv.dtype), pv.transpose(0, 2, 1, 3), preferred_element_type=jnp.float32
    )
    out = (out + to_rows(out_pre)) / total[..., None]
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d).astype(q.dtype)
