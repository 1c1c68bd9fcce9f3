"""Qwen3 as pure functions over a params pytree, presets, and Hugging Face conversion."""
from microcoder_jax.models.hf import Qwen3ForCausalLM, load_hf_params, save_hf_params
from microcoder_jax.models.presets import PRESETS, get_preset
from microcoder_jax.models.qwen3 import (
    KVCache,
    Qwen3Config,
    SharedPrefix,
    decoding_params,
    forward,
    init_cache,
    init_params,
    lm_head,
    param_logical_axes,
    param_shapes,
)

__all__ = [
    "KVCache", "PRESETS", "Qwen3Config", "Qwen3ForCausalLM", "SharedPrefix", "decoding_params", "forward", "get_preset", "init_cache", "init_params",
    "lm_head", "load_hf_params", "param_logical_axes", "param_shapes", "save_hf_params",
]
