"""The decoder of every model family as pure functions over a plain params dict: dense Qwen3, Qwen2
(its q/k/v-bias sibling) and Llama (SmolLM2; neither q/k norms nor biases), ``DecoderConfig.family``.

The decoder layers are stacked on a leading ``layers`` axis and run with one ``lax.scan`` (28 layers
compile as one body) under ``jax.checkpoint`` with a configurable remat policy. Plain functions
keep the params tree a plain nested dict (no boxes to strip) that optax, Orbax and the Hugging
Face converter use as is; ``param_specs`` gives every param's shape and logical axes. The Flax
NNX module in ``flax_decoder`` wraps these functions and arrays for Flax and Tunix users.

Math follows transformers' ``modeling_qwen3.py``: pre-norm blocks, RMSNorm in fp32, per-head
RMSNorm on q and k before rotary embeddings (``rotate_half`` layout), grouped-query attention with
scale ``head_dim ** -0.5``, SwiGLU MLP, tied or untied LM head. Qwen2 (``modeling_qwen2.py``) has
biases on the q, k and v projections instead of the q/k norms, Llama (``modeling_llama.py``) has
neither; nothing else differs.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax.models import attention as attn_lib
from microcoder_jax.models import lora
from microcoder_jax.models.config import DecoderConfig
from microcoder_jax.models.decoding import INPUT_DIMS, DecodingParams, decoding_params, is_decoding  # noqa: F401
from microcoder_jax.sharding import constrain


class KVCache(NamedTuple):
    """Preallocated keys and values: one ``[batch, kv_heads, max_len, head_dim]`` array per layer.

    Per-layer buffers and an unrolled layer loop (not the stacked, scanned layout of the weights)
    because a decode step must read each layer's cache and then write one slot of it in place:
    inside a layer scan XLA copied the whole stacked cache every layer and step, which cost more
    than the model. Heads come before slots so each head's keys are one contiguous block.
    """

    k: tuple
    v: tuple


class SharedPrefix(NamedTuple):
    """A prompt block that groups of consecutive rows all attend to, stored once per prompt.

    ``cache`` holds ``[prompts, K, P, D]`` per layer, ``mask [prompts, P]`` marks real tokens; row
    ``r`` of a batch of ``B`` rows reads prompt ``r // (B // prompts)``. The sampler keeps its
    prefill here so the G samples of a prompt share one copy (memory and attention reads / G).
    """

    cache: KVCache
    mask: jax.Array


# ----------------------------------------------------------------------------------------- params


class ParamSpec(NamedTuple):
    """One parameter's shape and the logical name of each of its dims (see sharding.py)."""

    shape: tuple
    axes: tuple


def param_specs(config: DecoderConfig) -> dict:
    """Shape and logical axes of every parameter: the one table the params tree is built from."""
    c = config
    spec = lambda *dims: ParamSpec(tuple(n for n, _ in dims), tuple(a for _, a in dims))  # noqa: E731
    layer, embed, head_dim = (c.num_layers, "layers"), (c.hidden_size, "embed"), (c.head_dim, "head_dim")
    heads, kv_heads, mlp = (c.num_heads, "heads"), (c.num_kv_heads, "kv_heads"), (c.intermediate_size, "mlp")
    layers = {
        "attn_norm": spec(layer, embed),
        "q_proj": spec(layer, embed, heads, head_dim),
        "k_proj": spec(layer, embed, kv_heads, head_dim),
        "v_proj": spec(layer, embed, kv_heads, head_dim),
        "o_proj": spec(layer, heads, head_dim, embed),
        "mlp_norm": spec(layer, embed),
        "gate_proj": spec(layer, embed, mlp),
        "up_proj": spec(layer, embed, mlp),
        "down_proj": spec(layer, mlp, embed),
    }
    if c.qk_norm:
        layers.update(q_norm=spec(layer, head_dim), k_norm=spec(layer, head_dim))
    if c.attention_bias:
        layers.update(
            q_bias=spec(layer, heads, head_dim),
            k_bias=spec(layer, kv_heads, head_dim),
            v_bias=spec(layer, kv_heads, head_dim),
        )
    layers.update(lora.extra_specs(c, layers, spec))  # LoRA adapters, an int8 base's scales
    vocab = (c.vocab_size, "vocab")
    specs = {"embed": spec(vocab, embed), "layers": layers, "final_norm": spec(embed)}
    if not c.tie_word_embeddings:
        specs["lm_head"] = spec(embed, vocab)
    return specs


def _is_spec(x) -> bool:
    return isinstance(x, ParamSpec)


def param_shapes(config: DecoderConfig) -> dict:
    """Shape of every parameter (same structure as ``init_params``), from ``param_specs``."""
    return jax.tree.map(lambda s: s.shape, param_specs(config), is_leaf=_is_spec)


def param_logical_axes(config: DecoderConfig) -> dict:
    """Logical axis names of every parameter (same structure as ``init_params``), from ``param_specs``."""
    return jax.tree.map(lambda s: s.axes, param_specs(config), is_leaf=_is_spec)


def _is_shape(x) -> bool:
    return isinstance(x, tuple) and all(isinstance(d, int) for d in x)


def init_params(config: DecoderConfig, rng: jax.Array) -> dict:
    """Random params: norms at 1, biases at 0, matrices ~ N(0, 0.02^2) (HF's initializer_range), in ``param_dtype``.

    With LoRA (``config.lora_rank``): that base, stored as the config says, and fresh adapters (B = 0)."""
    if config.lora_rank:
        base_key, adapter_key = jax.random.split(rng)
        return lora.attach(init_params(lora.base_config(config), base_key), config, adapter_key)
    shapes = param_shapes(config)
    leaves, treedef = jax.tree.flatten(shapes, is_leaf=_is_shape)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(shapes, is_leaf=_is_shape)[0]]
    keys = jax.random.split(rng, len(leaves))
    dtype = jnp.dtype(config.param_dtype)
    out = [
        jnp.ones(s, dtype)
        if "norm" in p
        else jnp.zeros(s, dtype)
        if "bias" in p
        else (0.02 * jax.random.normal(k, s, jnp.float32)).astype(dtype)
        for p, s, k in zip(paths, leaves, keys)
    ]
    return jax.tree.unflatten(treedef, out)


def init_cache(config: DecoderConfig, batch: int, max_len: int, dtype: Any = None) -> KVCache:
    """Zeroed KV cache in the compute dtype (or ``dtype``)."""
    shape = (batch, config.num_kv_heads, max_len, config.head_dim)
    dtype = jnp.dtype(dtype or config.dtype)
    zeros = lambda: tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers))  # noqa: E731
    return KVCache(zeros(), zeros())


# ------------------------------------------------------------------------------------------- math


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last dim, computed in fp32, returned in ``x.dtype``."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * weight.astype(jnp.float32)).astype(x.dtype)


def rope_frequencies(config: DecoderConfig) -> tuple[np.ndarray, float]:
    """Inverse frequencies ``[head_dim / 2]`` and the cos/sin scale (YaRN's attention factor)."""
    dim, base = config.head_dim, config.rope_theta
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    scaling = dict(config.rope_scaling or ())
    rope_type = scaling.get("rope_type", "default")
    if rope_type == "default":
        return inv_freq.astype(np.float32), 1.0
    factor = float(scaling["factor"])
    if rope_type == "linear":
        return (inv_freq / np.float32(factor)).astype(np.float32), 1.0
    if rope_type == "llama3":  # Llama 3.1's band-wise scaling, as in transformers' _compute_llama3_parameters
        old_len = float(scaling["original_max_position_embeddings"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return np.where(medium, smoothed, scaled).astype(np.float32), 1.0
    # YaRN (https://arxiv.org/abs/2309.00071), as in transformers' _compute_yarn_parameters.
    orig_max = scaling["original_max_position_embeddings"]
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        get = lambda s, m=1.0: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0  # noqa: E731
        attention_factor = get(factor, mscale) / get(factor, mscale_all) if mscale and mscale_all else get(factor)
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1
    corr = lambda rot: dim * math.log(orig_max / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = corr(beta_fast), corr(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    inv_freq = (inv_freq / np.float32(factor)) * (1 - extrapolation) + inv_freq * extrapolation
    return inv_freq.astype(np.float32), float(attention_factor)


def rope_tables(positions: jax.Array, config: DecoderConfig) -> tuple[jax.Array, jax.Array]:
    """fp32 ``cos, sin [B, T, 1, head_dim]`` for ``positions [B, T]``; computed once, shared by all layers."""
    inv_freq, scale = rope_frequencies(config)
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    return jnp.cos(emb) * scale, jnp.sin(emb) * scale


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotary embedding on ``x [B, T, N, D]`` (HF's rotate_half layout), fp32 math, returned in ``x.dtype``."""
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)


def _remat(fn, policy: str):
    if policy == "none":
        return fn
    policies = {
        "full": None,
        "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
        "dots_saveable": jax.checkpoint_policies.dots_saveable,
    }
    return jax.checkpoint(fn, policy=policies[policy], prevent_cse=False)


# Every projection runs as one 2-D matmul, tokens flattened to rows and head dims merged (the
# stored matrix's leading INPUT_DIMS[name] dims are its input): a weight gradient then contracts one
# dim, and XLA:CPU does not copy 3-D weights to a canonical layout around each dot (on CPU these
# transposed copies cost ~20% of the MLP backward and ~10% of a decode step).
_INPUT_DIMS = INPUT_DIMS


def decoder_layer(config: DecoderConfig, x, p, rope, attend, out_in: bool = False):
    """One decoder block -> (x, aux). ``attend(q, k, v) -> (out [B, T, H, D], aux)`` hides the cache.

    ``out_in``: the matrices are in the ``DecodingParams`` (out, in) layout.
    """
    b, t, d = x.shape
    dtype = x.dtype

    def proj(name, a):  # [tokens, ...in] -> [tokens, out], one 2-D matmul (see _INPUT_DIMS), + Qwen2's bias
        w = p[name].astype(dtype)
        a = a.reshape(a.shape[0], -1)
        if out_in:  # DecodingParams: already 2-D (out, in); adapters merged unless lora_decode=unmerged
            y = jnp.einsum("ni,oi->no", a, w)
        else:
            w = w.reshape(math.prod(w.shape[: _INPUT_DIMS[name]]), -1)
            y = jnp.einsum("ni,io->no", a, w)
        if name + lora.SCALE in p:  # int8 base: per-output-channel scale after the matmul
            y = y * p[name + lora.SCALE].astype(dtype).reshape(-1)
        if name + lora.A in p:  # LoRA: + (x A) B * alpha / rank, never forming A B
            la, lb = p[name + lora.A].astype(dtype), p[name + lora.B].astype(dtype)
            low = jnp.einsum("ni,ir->nr", a, la.reshape(-1, la.shape[-1]))
            up = jnp.einsum("nr,ro->no", low, lb.reshape(lb.shape[0], -1))
            y = y + up * jnp.asarray(lora.scale(config), dtype)
        bias = p.get(name.replace("_proj", "_bias"))
        return y if bias is None else y + bias.astype(dtype).reshape(-1)

    heads = lambda a: a.reshape(b, t, -1, config.head_dim)  # noqa: E731  [B*T, ...] -> [B, T, N, K]
    h = rms_norm(x, p["attn_norm"], config.rms_norm_eps).reshape(b * t, d)
    q, k, v = heads(proj("q_proj", h)), heads(proj("k_proj", h)), heads(proj("v_proj", h))
    q = constrain(q, ("batch", "length", "heads", "head_dim"))
    if config.qk_norm:
        q, k = rms_norm(q, p["q_norm"], config.rms_norm_eps), rms_norm(k, p["k_norm"], config.rms_norm_eps)
    q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    out, aux = attend(q, k, v)
    x = x + proj("o_proj", out.reshape(b * t, *out.shape[2:])).reshape(b, t, d)
    x = constrain(x, ("batch", "length", None))
    h = rms_norm(x, p["mlp_norm"], config.rms_norm_eps).reshape(b * t, d)
    act = jax.nn.silu(proj("gate_proj", h)) * proj("up_proj", h)
    act = constrain(act.reshape(b, t, -1), ("batch", "length", "mlp")).reshape(b * t, -1)
    x = x + proj("down_proj", act).reshape(b, t, d)
    return constrain(x, ("batch", "length", None)), aux


def _get(params, name: str):
    """One top-level weight of the stored params dict or of ``DecodingParams``."""
    return getattr(params, name) if is_decoding(params) else params[name]


def head_weight(params: dict, config: DecoderConfig) -> tuple[jax.Array, tuple, str, int]:
    """The stored params' vocab projection: (weight, its logical axes, the einsum from flattened
    hidden states [n, d] to logits [n, v], the weight's vocab dim), tied or not."""
    if config.tie_word_embeddings:
        return params["embed"], ("vocab", "embed"), "nd,vd->nv", 0
    return params["lm_head"], ("embed", "vocab"), "nd,dv->nv", 1


def lm_head(params: dict | DecodingParams, config: DecoderConfig, hidden: jax.Array) -> jax.Array:
    """Float32 logits ``[..., vocab]`` from final-normed hidden states (stored or ``DecodingParams``).

    Tokens are flattened to one dim first, as in ``decoder_layer`` (the embedding gradient then
    contracts one dim: no transposed copy of the [tokens, vocab] logit gradient on CPU).
    """
    tied, out_in = config.tie_word_embeddings, is_decoding(params)
    weight = _get(params, "embed" if tied else "lm_head")
    spec = "nd,vd->nv" if tied or out_in else "nd,dv->nv"
    logits = jnp.einsum(
        spec, hidden.reshape(-1, hidden.shape[-1]), weight.astype(hidden.dtype), preferred_element_type=jnp.float32
    )
    return logits.reshape(*hidden.shape[:-1], -1)


def forward(
    params: dict | DecodingParams,
    config: DecoderConfig,
    input_ids: jax.Array,
    *,
    attention_mask: jax.Array | None = None,
    positions: jax.Array | None = None,
    cache: KVCache | None = None,
    cache_index: jax.Array | int | None = None,
    prefix: SharedPrefix | None = None,
    return_hidden: bool = False,
    segment_ids: jax.Array | None = None,
):
    """Logits (float32 ``[B, T, vocab]``) or final hidden states, and the updated cache.

    Without a cache ``attention_mask [B, T]`` marks real tokens (left padding = 0) and positions
    default to ``cumsum(mask) - 1``. With a cache the ``T`` inputs are written at slots
    ``[cache_index, cache_index + T)``, ``attention_mask [B, max_len]`` marks valid cache slots and
    ``positions [B, T]`` are required; a query at slot ``s`` sees valid keys at slots ``<= s``;
    there ``params`` may also be ``DecodingParams`` (``decoding_params(params, config)``), and every query also sees the
    valid slots of ``prefix`` (a ``SharedPrefix``: ``cache`` slots then come after the prompt).
    ``segment_ids [B, T]`` (no cache; packed rows, see rl.packing): tokens attend within their
    segment only, 0 = padding; ``positions`` (restarting per segment) are then required.
    """
    dtype = jnp.dtype(config.dtype)
    b, t = input_ids.shape
    x = jnp.take(_get(params, "embed"), input_ids, axis=0).astype(dtype)
    x = constrain(x, ("batch", "length", None))

    if cache is None:
        mask = jnp.ones((b, t), bool) if attention_mask is None else attention_mask.astype(bool)
        if segment_ids is not None:
            if positions is None:
                raise ValueError("forward with segment_ids needs the positions of each segment [B, T]")
            mask = segment_ids > 0
        if positions is None:
            positions = jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)
        rope = rope_tables(positions, config)

        def body(x, p):
            attend = lambda q, k, v: (
                attn_lib.causal_attention(
                    q,
                    k,
                    v,
                    mask,
                    config.attention,  # noqa: E731
                    segment_ids=segment_ids,
                ),
                None,
            )
            return decoder_layer(config, x, p, rope, attend)[0], None

        if is_decoding(params):
            raise ValueError("DecodingParams are for cached decoding; pass the stored (stacked) params without a cache")
        x, _ = jax.lax.scan(_remat(body, config.remat), x, _get(params, "layers"))
    else:
        if positions is None:
            raise ValueError("forward with a cache needs explicit positions [B, T]")
        if prefix is not None and b % prefix.mask.shape[0]:
            raise ValueError(f"batch of {b} rows is not a multiple of the {prefix.mask.shape[0]} shared prompts")
        rope = rope_tables(positions, config)
        max_len = cache.k[0].shape[2]
        key_mask = jnp.ones((b, max_len), bool) if attention_mask is None else attention_mask.astype(bool)
        cache_index = jnp.asarray(0 if cache_index is None else cache_index, jnp.int32)
        start, slots = (0, 0, cache_index, 0), cache_index + jnp.arange(t)
        head_first = lambda new, buf: new.astype(buf.dtype).transpose(0, 2, 1, 3)  # noqa: E731
        new_k, new_v, layers, out_in = [], [], _get(params, "layers"), is_decoding(params)
        for i in range(config.num_layers):  # unrolled: see KVCache
            p = layers[i] if out_in else {k: w[i] for k, w in layers.items()}
            ck, cv = cache.k[i], cache.v[i]
            shared = None if prefix is None else (prefix.cache.k[i], prefix.cache.v[i], prefix.mask)

            def attend(q, k, v, ck=ck, cv=cv, shared=shared):  # write the new keys in place, then read
                ck = jax.lax.dynamic_update_slice(ck, head_first(k, ck), start)
                cv = jax.lax.dynamic_update_slice(cv, head_first(v, cv), start)
                return attn_lib.cached_attention(q, ck, cv, key_mask, slots, shared), (ck, cv)

            x, (ck, cv) = decoder_layer(config, x, p, rope, attend, out_in=out_in)
            new_k.append(ck)
            new_v.append(cv)
        cache = KVCache(tuple(new_k), tuple(new_v))

    x = rms_norm(x, _get(params, "final_norm"), config.rms_norm_eps)
    if return_hidden:
        return x, cache
    logits = constrain(lm_head(params, config, x), ("batch", "length", "vocab"))
    return logits, cache


def forward_shared_prompt(
    params: dict, config: DecoderConfig, input_ids: jax.Array, attention_mask: jax.Array, prefix_width: int, rows: int
) -> tuple[jax.Array, jax.Array]:
    """The no-cache forward of rows whose first ``prefix_width`` columns are the same in each group
    of ``rows`` consecutive rows (the G samples of a prompt), computing those columns once a group.

    Returns final-normed hidden states: the prefix ``[B / rows, prefix_width, D]`` (from each
    group's first row) and the rest ``[B, S - prefix_width, D]``, equal to ``forward``'s to float
    rounding. The rest's attention sees its group's prefix (``attention.shared_prefix_attention``).
    """
    b, s = input_ids.shape
    w = prefix_width
    if not 0 < w < s or b % rows:
        raise ValueError(f"a shared prefix of {w} of {s} columns in groups of {rows} of {b} rows does not split them")
    dtype = jnp.dtype(config.dtype)
    mask = attention_mask.astype(bool)
    positions = jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)
    first = slice(None, None, rows)  # each group's first row holds its prefix
    ids_p, mask_p, rope_p = input_ids[first, :w], mask[first, :w], rope_tables(positions[first, :w], config)
    ids_r, mask_r, rope_r = input_ids[:, w:], mask[:, w:], rope_tables(positions[:, w:], config)
    embed = lambda ids: constrain(jnp.take(params["embed"], ids, axis=0).astype(dtype), ("batch", "length", None))  # noqa: E731

    def body(carry, p):
        x_p, x_r = carry

        def attend_p(q, k, v):
            return attn_lib.causal_attention(q, k, v, mask_p, config.attention), (k, v)

        x_p, (k_p, v_p) = decoder_layer(config, x_p, p, rope_p, attend_p)
        attend_r = lambda q, k, v: (attn_lib.shared_prefix_attention(q, k, v, mask_r, (k_p, v_p, mask_p)), None)  # noqa: E731
        x_r, _ = decoder_layer(config, x_r, p, rope_r, attend_r)
        return (x_p, x_r), None

    (x_p, x_r), _ = jax.lax.scan(_remat(body, config.remat), (embed(ids_p), embed(ids_r)), params["layers"])
    norm = lambda x: rms_norm(x, params["final_norm"], config.rms_norm_eps)  # noqa: E731
    return norm(x_p), norm(x_r)
