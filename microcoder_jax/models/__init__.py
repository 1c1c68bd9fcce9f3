"""The model families (Qwen3, Qwen2, Llama) as pure functions over a params pytree, presets, Hugging Face
conversion and Orbax checkpoints: everything outside models/ reaches a model through these names.

The Flax NNX module over the same params is ``microcoder_jax.models.flax_decoder.Decoder`` (imported
on demand, so the functional path does not load flax).
"""

from microcoder_jax.models.hf import Qwen3ForCausalLM, load_hf_params, save_hf_params
from microcoder_jax.models.config import Qwen3Config
from microcoder_jax.models.decoding import DecodingParams
from microcoder_jax.models.gguf import gguf_to_hf, resolve_model_path
from microcoder_jax.models.presets import PRESETS, get_preset, model_config_from
from microcoder_jax.models.decoder import (
    KVCache,
    ParamSpec,
    DecoderConfig,
    SharedPrefix,
    decoding_params,
    forward,
    forward_shared_prompt,
    head_weight,
    init_cache,
    init_params,
    lm_head,
    param_logical_axes,
    param_shapes,
    param_specs,
)

__all__ = [
    "gguf_to_hf",
    "resolve_model_path",
    "DecoderConfig",
    "DecodingParams",
    "KVCache",
    "PRESETS",
    "ParamSpec",
    "Qwen3Config",
    "Qwen3ForCausalLM",
    "SharedPrefix",
    "decoding_params",
    "forward",
    "forward_shared_prompt",
    "get_preset",
    "head_weight",
    "init_cache",
    "init_params",
    "lm_head",
    "load_hf_params",
    "model_config_from",
    "param_logical_axes",
    "param_shapes",
    "param_specs",
    "save_hf_params",
]
