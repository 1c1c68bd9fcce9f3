"""The decode layout of the decoder's weights: ``DecodingParams``, made once per sampling call.

A decode step is one token per row: the weights are read whole every step, so the layout decides
what a step costs. ``decoding_params`` casts the matrices to the compute dtype, makes each one 2-D
(out, in) and splits the stacked layers into a tuple (a loop of cached ``forward`` steps then
never re-casts, re-slices or re-lays-out a weight). Under LoRA it folds the adapters in (one
matmul a projection), or with ``lora_decode="unmerged"`` keeps the stored base (an int8 base stays
int8, its scales beside it) and the adapters as 2-D ``[in, r]`` / ``[r, out]``, and the layer adds
``(x A) B`` (decoder.decoder_layer). ``decoding_layout`` names every dim of the
result with the training params' logical axes, so a mesh can place it; the sampler places it with
the FSDP dim replicated (``sampling.static_sampler.DECODE_AXIS_RULES``), which leaves a step no weight to
gather.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class DecodingParams(NamedTuple):
    """The decoder's weights for cached decoding; ``forward`` and ``lm_head`` take it where they take params.

    embed ``[vocab, hidden]`` (compute dtype), layers: one dict per layer whose matrices are 2-D
    ``(out, in)`` in the compute dtype (norms keep the param dtype), final_norm ``[hidden]``,
    lm_head ``[vocab, hidden]`` or None when the embedding is tied.
    """

    embed: Any
    layers: tuple
    final_norm: Any
    lm_head: Any = None


from microcoder_jax.models.config import INPUT_DIMS  # noqa: E402  (the stored layout, shared with lora.py)


def _out_in(value, stacked: bool, n_in: int):
    """``[layers?, *in, *out]`` -> ``[layers?, prod(out), prod(in)]``."""
    lead = int(stacked)
    dims = value.shape[lead:]
    perm = (*range(lead), *(lead + i for i in range(n_in, len(dims))), *(lead + i for i in range(n_in)))
    return jnp.transpose(value, perm).reshape(*value.shape[:lead], math.prod(dims[n_in:]), math.prod(dims[:n_in]))


def decoding_params(params: dict, config) -> DecodingParams:
    """The stored params (stacked layers, fp32 or any param dtype) in the decode layout.

    Call it once before a loop of cached ``forward`` steps, not inside it: otherwise every step
    re-casts the weights and slices each layer out of the stacked arrays. The (out, in) layout
    makes one-token matmuls ~15% faster on CPU and keeps XLA from copying 3-D attention weights to
    a canonical layout inside the loop. Costs one compute-dtype copy of the weights; same results.
    """

    from microcoder_jax.models import lora

    if config.lora_rank and config.lora_decode == "merged":  # adapters folded in, an int8 base dequantised
        params = lora.merge(params, config, config.dtype)

    def convert(name, value, stacked):
        lead = int(stacked)
        if name.endswith(lora.A):  # unmerged: [*in, r] -> [in, r] in the compute dtype
            return value.astype(config.dtype).reshape(*value.shape[:lead], -1, value.shape[-1])
        if name.endswith(lora.B):  # unmerged: [r, *out] -> [r, out] in the compute dtype
            return value.astype(config.dtype).reshape(*value.shape[: lead + 1], -1)
        if name.endswith(lora.SCALE):  # unmerged int8 base: [*out] -> [out], float32 as stored
            return value.reshape(*value.shape[:lead], -1)
        if name not in INPUT_DIMS and name != "embed":
            return value  # norms stay in the param dtype, as forward reads them
        if value.dtype != jnp.int8:  # an unmerged int8 base stays int8: a decode step reads half the bytes
            value = value.astype(config.dtype)
        return _out_in(value, stacked, INPUT_DIMS[name]) if name in INPUT_DIMS else value

    stacked = {name: convert(name, value, True) for name, value in params["layers"].items()}
    layers = tuple({k: v[i] for k, v in stacked.items()} for i in range(config.num_layers))
    lm_head = convert("lm_head", params["lm_head"], False) if "lm_head" in params else None
    return DecodingParams(convert("embed", params["embed"], False), layers, params["final_norm"], lm_head)


def decoding_layout(config, axes: dict, shapes: dict) -> tuple[DecodingParams, DecodingParams]:
    """(logical axes, divisibility shapes) of every ``DecodingParams`` leaf, for ``sharding.logical_to_sharding``,
    from the stored params' ``param_logical_axes(config)`` and ``param_shapes(config)``.

    A merged dim is named by its first stored dim (``heads`` for ``heads x head_dim``) and its
    divisibility size is that dim's size, so ``tensor`` splits whole heads or nothing.
    """

    from microcoder_jax.models import lora

    def convert(name, ax, shape, stacked):
        ax, shape = ax[int(stacked) :], shape[int(stacked) :]
        if name.endswith(lora.A):  # [in, rank]
            return (ax[0], ax[-1]), (shape[0], shape[-1])
        if name.endswith(lora.B) or name.endswith(lora.SCALE):  # [rank, out], [out]
            n = 2 if name.endswith(lora.B) else 1
            return ax[:n], shape[:n]
        if name not in INPUT_DIMS:
            return ax, shape
        n_in = INPUT_DIMS[name]
        return (ax[n_in], ax[0]), (shape[n_in], shape[0])

    merged = config.lora_decode == "merged"
    plain = [n for n in axes["layers"] if not merged or not (lora.is_adapter(n) or n.endswith(lora.SCALE))]
    layer = {name: convert(name, axes["layers"][name], shapes["layers"][name], True) for name in plain}
    top = {name: convert(name, axes[name], shapes[name], False) for name in axes if name != "layers"}
    pick = lambda j: DecodingParams(  # noqa: E731
        top["embed"][j],
        tuple({k: v[j] for k, v in layer.items()} for _ in range(config.num_layers)),
        top["final_norm"][j],
        top["lm_head"][j] if "lm_head" in top else None,
    )
    return pick(0), pick(1)


def is_decoding(params) -> bool:
    """True for ``DecodingParams`` (the decode layout), False for the stored params dict."""
    return isinstance(params, DecodingParams)


def free(prepared: DecodingParams, source) -> None:
    """Delete the decode copy's device buffers now, keeping any leaf that is ``source``'s own array.

    (jit hands an unchanged input back as the same array, e.g. norms already in place.)
    """
    keep = {id(x) for x in jax.tree.leaves(source)}
    for leaf in jax.tree.leaves(prepared):
        if isinstance(leaf, jax.Array) and id(leaf) not in keep and not leaf.is_deleted():
            leaf.delete()
