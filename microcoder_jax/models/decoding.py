"""The decode layout of the decoder's weights: ``DecodingParams``, made once per sampling call.

A decode step is one token per row: the weights are read whole every step, so the layout decides
what a step costs. ``decoding_params`` casts the matrices to the compute dtype, makes each one 2-D
(out, in) and splits the stacked layers into a tuple (a loop of cached ``forward`` steps then
never re-casts, re-slices or re-lays-out a weight). ``decoding_layout`` names every dim of the
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

    if config.lora_rank:  # adapters folded in, an int8 base dequantised: decoding reads plain weights
        from microcoder_jax.models import lora

        params = lora.merge(params, config, config.dtype)

    def convert(name, value, stacked):
        if name not in INPUT_DIMS and name != "embed":
            return value  # norms stay in the param dtype, as forward reads them
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

    def convert(name, ax, shape, stacked):
        ax, shape = ax[int(stacked) :], shape[int(stacked) :]
        if name not in INPUT_DIMS:
            return ax, shape
        n_in = INPUT_DIMS[name]
        return (ax[n_in], ax[0]), (shape[n_in], shape[0])

    from microcoder_jax.models import lora

    plain = [n for n in axes["layers"] if not lora.is_adapter(n) and not n.endswith(lora.SCALE)]  # merged away
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
