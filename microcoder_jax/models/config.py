"""The decoder's shapes and numerics (`DecoderConfig`), read from and written to Hugging Face config.json.

One config covers the dense families we train: Qwen3 (per-head RMSNorm on q and k, no biases),
Qwen2 / Qwen2.5 (biases on q, k, v, no q/k norm: DeepSeek-R1-Distill-Qwen, Qwen2.5-Coder) and
Llama (neither: SmolLM2, Llama 2/3). The rest of the architecture is the same, so a family is a
name for a few named features (`FamilyFeatures`), and ``family`` switches only those pieces."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import cast

from microcoder_jax.models import attention as attn_lib

# How many leading dims of each stored matrix are its input (its other dims are its output).
INPUT_DIMS = {
    "q_proj": 1,
    "k_proj": 1,
    "v_proj": 1,
    "o_proj": 2,
    "gate_proj": 1,
    "up_proj": 1,
    "down_proj": 1,
    "lm_head": 1,
}
PROJECTIONS = tuple(n for n in INPUT_DIMS if n != "lm_head")  # a layer's matrices: what LoRA may adapt
BASE_DTYPES = ("", "int8")  # a LoRA base's storage: the compute dtype, or int8 + per-channel scales
LORA_DECODES = ("merged", "unmerged")  # what the sampler reads under adapters (models/decoding.py)
ROPE_TYPES = ("default", "linear", "yarn", "llama3")
REMAT_POLICIES = ("none", "full", "dots", "dots_saveable")


@dataclasses.dataclass(frozen=True)
class FamilyFeatures:
    """What sets one family apart: its Hugging Face names and the pieces of the layer it has.

    ``hf_flags`` are config.json fields the family's HF config class reads that must stay false
    (written on export, a true value refused on import with the field's name).
    """

    architecture: str  # config.json "architectures"[0]
    model_type: str  # config.json "model_type"
    qk_norm: bool  # per-head RMSNorm on q and k before rotary embeddings
    qkv_bias: bool  # biases on the q, k and v projections (o_proj never has one)
    hf_flags: tuple[str, ...] = ()


FAMILIES = {
    "qwen3": FamilyFeatures("Qwen3ForCausalLM", "qwen3", qk_norm=True, qkv_bias=False, hf_flags=("attention_bias",)),
    "qwen2": FamilyFeatures("Qwen2ForCausalLM", "qwen2", qk_norm=False, qkv_bias=True),
    "llama": FamilyFeatures(
        "LlamaForCausalLM", "llama", qk_norm=False, qkv_bias=False, hf_flags=("attention_bias", "mlp_bias")
    ),
}
_SLIDING_WINDOW = ("qwen3", "qwen2")  # families whose HF config has use_sliding_window (refused when true)


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Decoder shapes and numerics; frozen and hashable so it can be a static jit argument.

    ``family`` is ``qwen3``, ``qwen2`` or ``llama`` (see FAMILIES): the same math but for q/k norms
    (Qwen3), q/k/v biases (Qwen2) or neither (Llama).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rope_scaling: tuple | None = None  # sorted (key, value) items of HF's rope_scaling, or None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 40960
    param_dtype: str = "float32"
    dtype: str = "bfloat16"
    remat: str = "full"
    attention: str = "auto"
    family: str = "qwen3"
    # LoRA (models/lora.py; the `lora.*` block): adapters of this rank on these projections, the
    # base frozen in the compute dtype or int8 ("base_dtype"); rank 0 = plain full fine-tuning.
    lora_rank: int = 0
    lora_alpha: float = 32.0
    lora_targets: tuple = ()
    base_dtype: str = ""
    lora_decode: str = "merged"  # the sampler's weights: one merged copy, or the stored base + adapters

    @property
    def features(self) -> FamilyFeatures:
        """The family's named features (FAMILIES[family])."""
        return FAMILIES[self.family]

    @property
    def qk_norm(self) -> bool:
        """Per-head RMSNorm on q and k before rotary embeddings (Qwen3)."""
        return self.features.qk_norm

    @property
    def attention_bias(self) -> bool:
        """Biases on the q, k and v projections (Qwen2); o_proj never has one."""
        return self.features.qkv_bias

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {tuple(FAMILIES)}, got {self.family!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {self.remat!r}")
        if self.attention not in attn_lib.IMPLEMENTATIONS:
            raise ValueError(f"attention must be one of {attn_lib.IMPLEMENTATIONS}, got {self.attention!r}")
        if isinstance(self.rope_scaling, dict):  # accept a dict, store a hashable tuple
            object.__setattr__(self, "rope_scaling", tuple(sorted(self.rope_scaling.items())))
        rope_type = dict(self.rope_scaling or ()).get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"unsupported rope_scaling type {rope_type!r}; supported: {ROPE_TYPES}")
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))  # from_json gives a list
        if self.lora_rank < 0 or (self.lora_rank and not self.lora_targets):
            raise ValueError(f"lora_rank={self.lora_rank} needs rank >= 0 and, when > 0, lora_targets")
        if any(t not in PROJECTIONS for t in self.lora_targets):
            raise ValueError(f"lora_targets must be from {PROJECTIONS}, got {self.lora_targets}")
        if self.base_dtype not in BASE_DTYPES or (self.base_dtype and not self.lora_rank):
            raise ValueError(f"base_dtype must be one of {BASE_DTYPES} (int8 only with lora_rank > 0)")
        if self.lora_decode not in LORA_DECODES or (self.lora_decode != "merged" and not self.lora_rank):
            raise ValueError(f"lora_decode must be one of {LORA_DECODES} (unmerged only with lora_rank > 0)")

    def replace(self, **changes) -> "DecoderConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf(cls, config: dict | str | os.PathLike, **overrides) -> "DecoderConfig":
        """From a Hugging Face ``config.json`` (dict, file, or checkpoint directory)."""
        if not isinstance(config, dict):
            path = os.fspath(config)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            with open(path) as f:
                config = cast(dict, json.load(f))
        model_type = config.get("model_type", "qwen3")
        family = {f.model_type: name for name, f in FAMILIES.items()}.get(model_type)
        archs = config.get("architectures") or [FAMILIES[family or "qwen3"].architecture]
        if family is None or FAMILIES[family].architecture not in archs:
            names = [f.architecture for f in FAMILIES.values()]
            raise ValueError(
                f"unsupported architecture {archs} / model_type {model_type!r}: supported are dense "
                f"{', '.join(names[:-1])} and {names[-1]}"
            )
        if family in _SLIDING_WINDOW and config.get("use_sliding_window"):
            raise ValueError("config field use_sliding_window=true is not supported")
        for flag in FAMILIES[family].hf_flags:
            if config.get(flag):
                raise ValueError(
                    f"config field {flag}={config[flag]!r} is not supported "
                    f"({FAMILIES[family].architecture} here has no such biases)"
                )
        if config.get("hidden_act", "silu") != "silu":
            raise ValueError(f"config field hidden_act={config['hidden_act']!r} is not supported (need silu)")
        rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
        rope_theta = rope.pop("rope_theta", config.get("rope_theta", 10000.0))
        rope_type = rope.pop("rope_type", rope.pop("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise ValueError(
                f"config field rope_scaling.rope_type={rope_type!r} is not supported; supported: {ROPE_TYPES}"
            )
        rope_scaling = None
        if rope_type != "default":
            rope = {k: v for k, v in rope.items() if v is not None}
            if "factor" not in rope:
                raise ValueError(f"config field rope_scaling.factor is required for rope_type={rope_type!r}")
            if rope_type == "yarn":
                rope.setdefault("original_max_position_embeddings", config.get("max_position_embeddings"))
            if rope_type == "llama3":
                needed = ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
                for key in needed:
                    if key not in rope:
                        raise ValueError(f"config field rope_scaling.{key} is required for rope_type='llama3'")
            rope_scaling = tuple(sorted({**rope, "rope_type": rope_type}.items()))
        try:
            fields = dict(
                vocab_size=config["vocab_size"],
                hidden_size=config["hidden_size"],
                intermediate_size=config["intermediate_size"],
                num_layers=config["num_hidden_layers"],
                num_heads=config["num_attention_heads"],
                num_kv_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
                head_dim=config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
                rope_theta=float(rope_theta),
                rope_scaling=rope_scaling,
                rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                max_position_embeddings=int(config.get("max_position_embeddings", 40960)),
                family=family,
            )
        except KeyError as e:
            raise ValueError(f"config.json is missing required field {e.args[0]!r}") from None
        return cls(**{**fields, **overrides})

    def to_hf(self) -> dict:
        """A ``config.json`` dict that transformers loads as the family's class (``FAMILIES``)."""
        features = self.features
        architecture, model_type = features.architecture, features.model_type
        flags = {flag: False for flag in features.hf_flags}
        sliding = {"use_sliding_window": False} if self.family in _SLIDING_WINDOW else {}
        return {
            "architectures": [architecture],
            "model_type": model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": dict(self.rope_scaling) if self.rope_scaling else None,
            "tie_word_embeddings": self.tie_word_embeddings,
            **flags,
            "attention_dropout": 0.0,
            **sliding,
            "torch_dtype": self.param_dtype,
        }

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling else None
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DecoderConfig":
        return cls(**json.loads(text))

    def num_params(self) -> int:
        """Total parameter count (embedding counted once when tied)."""
        d, h, k, hd, f, layers = (
            self.hidden_size,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.intermediate_size,
            self.num_layers,
        )
        per_layer = d * hd * (h + 2 * k) + h * hd * d + 3 * d * f + 2 * d
        per_layer += 2 * hd if self.qk_norm else 0
        per_layer += hd * (h + 2 * k) if self.attention_bias else 0
        head = 0 if self.tie_word_embeddings else d * self.vocab_size
        return self.vocab_size * d + layers * per_layer + d + head

    def projection_dims(self) -> dict[str, tuple[int, int]]:
        """(inputs, outputs) of each of a layer's seven projections, by name."""
        d, hd, f = self.hidden_size, self.head_dim, self.intermediate_size
        return {
            "q_proj": (d, self.num_heads * hd),
            "k_proj": (d, self.num_kv_heads * hd),
            "v_proj": (d, self.num_kv_heads * hd),
            "o_proj": (self.num_heads * hd, d),
            "gate_proj": (d, f),
            "up_proj": (d, f),
            "down_proj": (f, d),
        }

    def num_adapter_params(self) -> int:
        """Trainable adapter parameters (0 without LoRA): r * (in + out) per adapted projection and layer."""
        in_out = self.projection_dims()
        return self.num_layers * self.lora_rank * sum(sum(in_out[t]) for t in self.lora_targets)


Qwen3Config = DecoderConfig  # its name before Qwen2 joined; kept for users' code for a release
