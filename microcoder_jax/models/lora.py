"""LoRA adapters and a frozen (optionally int8) base: the `lora.*` block and the params it adds.

A LoRA model is the same params dict with, per adapted projection ``NAME`` of every layer, two
more stacked leaves: ``NAME_lora_a [layers, *in, rank]`` and ``NAME_lora_b [layers, rank, *out]``
(PEFT's A and B, transposed to our (in, out) layout). The layer adds ``(x A) B * alpha / rank`` to
``x W`` (decoder.decoder_layer); B starts at zero, so a fresh adapter leaves the base's logits exactly as
they were. Only adapter leaves are trained (`split`/`join`: the train step differentiates them and
nothing else); the base is stored once in the compute dtype, or as int8 with one float32 scale
per output channel (``NAME_scale [layers, *out]``, lora.base_dtype=int8). The forward-only passes
read merged weights: the sampler (``decoding_params`` folds adapters and scales into its
compute-dtype copy; lora.decode=unmerged keeps the stored base and adds (x A) B instead) and the
learner's old- and reference-log-prob pass (``for_scoring``, inside its jit), so they cost one
matmul per projection, as without adapters.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from microcoder_jax.blocks import Block, knob
from microcoder_jax.models.config import BASE_DTYPES, INPUT_DIMS, LORA_DECODES, PROJECTIONS

# Short names (`lora.targets`) -> the stored projection they adapt.
TARGETS = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "gate": "gate_proj",
    "up": "up_proj",
    "down": "down_proj",
}
assert tuple(TARGETS.values()) == PROJECTIONS  # every projection has a short name; an int8 base quantises them all
A, B, SCALE = "_lora_a", "_lora_b", "_scale"


@dataclasses.dataclass(frozen=True)
class LoRAConfig(Block):
    """The `lora.*` block: rank 0 trains every weight (full fine-tuning, the default)."""

    PREFIX = "lora"

    rank: int = knob(0, "adapter rank r (0 = full fine-tuning: no adapters, every weight trained)", at_least=0)
    alpha: float = knob(32.0, "adapter scale numerator: the update is (x A) B * alpha / rank", at_least=0.0)
    targets: tuple = knob(
        ("q", "k", "v", "o", "gate", "up", "down"),
        f"projections that get an adapter, from {', '.join(TARGETS)}",
    )
    base_dtype: str = knob(
        "",
        "storage of the frozen base under adapters: '' = the compute dtype (model.dtype), int8 = per-output-channel "
        "int8 with float32 scales (QLoRA-style; the embedding and norms stay in the compute dtype)",
        choices=BASE_DTYPES,
    )

    decode: str = knob(
        "merged",
        "what the sampler reads: merged = one compute-dtype copy with the adapters folded in (one matmul a "
        "projection); unmerged = the stored base (int8 stays int8: half the bytes a decode step reads) plus "
        "(x A) B, no merged copy",
        choices=LORA_DECODES,
    )

    def check(self) -> None:
        if self.decode != "merged" and not self.rank:
            self.fail("decode", self.decode, "unmerged decoding reads adapters: set lora.rank > 0")
        unknown = [t for t in self.targets if t not in TARGETS]
        if unknown or not self.targets or len(set(self.targets)) != len(self.targets):
            self.fail("targets", self.targets, f"expected distinct names from {', '.join(TARGETS)}")
        if self.base_dtype and not self.rank:
            self.fail("base_dtype", self.base_dtype, "a quantised base needs adapters: set lora.rank > 0")


def model_fields(cfg: LoRAConfig | None) -> dict:
    """The DecoderConfig fields this block sets (none when it is absent or rank 0)."""
    if cfg is None or not cfg.rank:
        return {}
    return dict(
        lora_rank=cfg.rank,
        lora_alpha=float(cfg.alpha),
        lora_targets=tuple(TARGETS[t] for t in cfg.targets),
        base_dtype=cfg.base_dtype,
        lora_decode=cfg.decode,
    )


def scale(config) -> float:
    """alpha / rank: what the adapter product is multiplied by."""
    return config.lora_alpha / config.lora_rank


# ----------------------------------------------------------------------------------- which leaves


def is_adapter(name: str) -> bool:
    return name.endswith(A) or name.endswith(B)


def has_adapters(params) -> bool:
    """Whether a stored params dict carries adapter leaves (then only they are trained)."""
    layers = params.get("layers") if isinstance(params, dict) else None
    return isinstance(layers, dict) and any(is_adapter(k) for k in layers)


def split(params: dict) -> tuple[dict, dict | None]:
    """(trainable, frozen): the adapter leaves and the rest, or (params, None) without adapters."""
    if not has_adapters(params):
        return params, None
    layers = params["layers"]
    trainable = {"layers": {k: v for k, v in layers.items() if is_adapter(k)}}
    frozen = {k: v for k, v in params.items() if k != "layers"}
    frozen["layers"] = {k: v for k, v in layers.items() if not is_adapter(k)}
    return trainable, frozen


def join(trainable: dict, frozen: dict | None) -> dict:
    """The inverse of `split`."""
    if frozen is None:
        return trainable
    return {**frozen, "layers": {**frozen["layers"], **trainable["layers"]}}


# ------------------------------------------------------------------------------------ the leaves


def extra_specs(config, spec_of: dict, make) -> dict:
    """Adapter and int8-scale specs added to the layer specs (`spec_of`: name -> ParamSpec of the
    stored matrix; `make(*dims)` builds a ParamSpec from (size, axis) pairs)."""
    out = {}
    for name in config.lora_targets if config.lora_rank else ():
        s = spec_of[name]
        n_in = INPUT_DIMS[name]
        dims = list(zip(s.shape, s.axes))
        rank = (config.lora_rank, None)
        out[name + A] = make(dims[0], *dims[1 : 1 + n_in], rank)
        out[name + B] = make(dims[0], rank, *dims[1 + n_in :])
    if config.base_dtype == "int8":
        for name in PROJECTIONS:
            s = spec_of[name]
            dims = list(zip(s.shape, s.axes))
            out[name + SCALE] = make(dims[0], *dims[1 + INPUT_DIMS[name] :])
    return out


def leaf_dtype(config, name: str):
    """The stored dtype of one leaf: adapters float32, an int8 base's matrices int8, its scales
    float32, other matrices (embedding, head, biases) the compute dtype they are cast to anyway;
    None = the model's param_dtype (no adapters; norms, which the forward reads in float32)."""
    if not config.lora_rank or "norm" in name:
        return None
    if is_adapter(name) or name.endswith(SCALE):
        return jnp.float32
    if config.base_dtype == "int8" and name in PROJECTIONS:
        return jnp.int8
    return jnp.dtype(config.dtype)


def quantize(w: jax.Array, n_in: int) -> tuple[jax.Array, jax.Array]:
    """Symmetric per-output-channel int8 of a stacked ``[layers, *in, *out]`` matrix -> (int8,
    float32 scale ``[layers, *out]``)."""
    w = w.astype(jnp.float32)
    amax = jnp.max(jnp.abs(w), axis=tuple(range(1, 1 + n_in)))
    s = jnp.where(amax > 0, amax / 127.0, 1.0)
    expand = s.reshape(s.shape[0], *(1,) * n_in, *s.shape[1:])
    return jnp.clip(jnp.round(w / expand), -127, 127).astype(jnp.int8), s


def dequantize(q: jax.Array, s: jax.Array, n_in: int, dtype) -> jax.Array:
    """The stacked matrix an int8 leaf and its scale stand for, in ``dtype``."""
    expand = s.reshape(s.shape[0], *(1,) * n_in, *s.shape[1:])
    return (q.astype(jnp.float32) * expand).astype(dtype)


def init_adapter(key, shape_a: tuple, shape_b: tuple, n_in: int) -> tuple[jax.Array, jax.Array]:
    """A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PEFT's kaiming-uniform default), B = 0, float32."""
    fan_in = math.prod(shape_a[1 : 1 + n_in])
    bound = 1.0 / math.sqrt(fan_in)
    return jax.random.uniform(key, shape_a, jnp.float32, -bound, bound), jnp.zeros(shape_b, jnp.float32)


def attach(base: dict, config, rng: jax.Array) -> dict:
    """A LoRA config's params from plain (full fine-tuning) params of the same model: the base in
    its storage dtype (compute dtype or int8 + scales) and fresh adapters (B = 0). Jittable."""
    if not config.lora_rank:
        return base
    stored = lambda name, w: w.astype(leaf_dtype(config, name) or config.param_dtype)  # noqa: E731
    layers = {}
    for name, w in base["layers"].items():
        if config.base_dtype == "int8" and name in PROJECTIONS:
            layers[name], layers[name + SCALE] = quantize(w, INPUT_DIMS[name])
        else:
            layers[name] = stored(name, w)
    keys = jax.random.split(rng, len(config.lora_targets))
    for key, name in zip(keys, config.lora_targets):
        w, n_in = base["layers"][name], INPUT_DIMS[name]
        shape_a = (*w.shape[: 1 + n_in], config.lora_rank)
        shape_b = (w.shape[0], config.lora_rank, *w.shape[1 + n_in :])
        layers[name + A], layers[name + B] = init_adapter(key, shape_a, shape_b, n_in)
    out = {k: stored(k, v) for k, v in base.items() if k != "layers"}
    out["layers"] = layers
    return out


def base_config(config):
    """The plain model the LoRA config adapts (what a Hugging Face checkpoint holds)."""
    return config.replace(lora_rank=0, base_dtype="", lora_decode="merged")


def merge(params: dict, config, dtype=None) -> dict:
    """Plain params (no adapters, no int8): W + A B * alpha/rank per adapted projection, the int8
    base dequantised; in ``dtype`` (default float32; norms keep theirs, as the forward reads them
    in float32). What export writes and the sampler decodes."""
    dtype = jnp.dtype(dtype or jnp.float32)
    layers = params["layers"]
    cast = lambda name, x: x if "norm" in name else x.astype(dtype)  # noqa: E731
    out_layers = {}
    for name, w in layers.items():
        if is_adapter(name) or name.endswith(SCALE):
            continue
        if name + SCALE in layers:
            w = dequantize(w, layers[name + SCALE], INPUT_DIMS[name], jnp.float32)
        if name + A in layers:
            w = w.astype(jnp.float32) + delta(layers[name + A], layers[name + B], INPUT_DIMS[name], scale(config))
        out_layers[name] = cast(name, w)
    out = {k: cast(k, v) for k, v in params.items() if k != "layers"}
    out["layers"] = out_layers
    return out


def merged_layer_leaves(params: dict) -> list:
    """The layer weights ``merge`` writes a copy of: every layer leaf but the adapters and the int8
    scales (the planner sizes the merged copy from them)."""
    layers = params["layers"]
    return [x for name, x in layers.items() if not is_adapter(name) and not name.endswith(SCALE)]


def for_scoring(params: dict, config, logical_axes) -> tuple[dict, object]:
    """(params, config) for a forward-only pass: with adapters, ``merge`` into the compute dtype
    (an int8 base dequantised) and the plain ``base_config``, so each projection is one matmul
    instead of the base's plus ``(x A) B``; without adapters the arguments themselves (rank 0:
    no change of program). Traced inside the pass's jit, the merged copy is a temporary of that
    pass (one compute-dtype copy of the adapted and int8 matrices, placed as the stored ones are
    on a mesh); the stored base is not copied beyond it. Equal to the adapter forward to float
    rounding (in bf16: the merged weight is rounded once, where the adapter forward rounds the
    base's product and the adapters' separately). `logical_axes(config)`: the params' logical axes
    (decoder.param_logical_axes, passed in: the decoder imports this module)."""
    if not config.lora_rank:
        return params, config
    from microcoder_jax import sharding

    plain = base_config(config)
    merged = merge(params, config, config.dtype)
    axes = logical_axes(plain)
    is_axes = lambda x: isinstance(x, tuple)  # noqa: E731
    return jax.tree.map(lambda ax, x: sharding.constrain(x, ax), axes, merged, is_leaf=is_axes), plain


def delta(a: jax.Array, b: jax.Array, n_in: int, s: float) -> jax.Array:
    """The stacked weight update ``A B * s`` in the stored ``[layers, *in, *out]`` layout, float32."""
    lead, in_dims, out_dims = a.shape[0], a.shape[1 : 1 + n_in], b.shape[2:]
    a2 = a.astype(jnp.float32).reshape(lead, -1, a.shape[-1])
    b2 = b.astype(jnp.float32).reshape(lead, b.shape[1], -1)
    return (jnp.einsum("lir,lro->lio", a2, b2) * s).reshape(lead, *in_dims, *out_dims)


# ------------------------------------------------------------------------------ the base's identity


def fingerprint(frozen: dict) -> list[float]:
    """Per-leaf (sum, sum of |x|) of the frozen base in float64 on the host: stored with every
    checkpoint so a resume on a different base is refused instead of silently mixing them."""
    sums = [(jnp.sum(x.astype(jnp.float32)), jnp.sum(jnp.abs(x.astype(jnp.float32)))) for x in jax.tree.leaves(frozen)]
    return [float(v) for pair in jax.device_get(sums) for v in pair]


def same_base(saved: list, now: list, rtol: float = 1e-5) -> bool:
    """Whether two fingerprints describe the same base (reductions may round differently across devices)."""
    if len(saved) != len(now):
        return False
    return all(abs(a - b) <= rtol * max(abs(a), abs(b), 1.0) for a, b in zip(saved, now))
