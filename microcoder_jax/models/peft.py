"""PEFT's LoRA adapter format: the folder `peft.PeftModel.from_pretrained(base_model, DIR)` loads.

``adapter_config.json`` (peft_type LORA, r, lora_alpha, target_modules, ...) and
``adapter_model.safetensors`` with, per layer and adapted module, ``base_model.model.<HF module>.
lora_A.weight [r, in]`` and ``lora_B.weight [out, r]``: our stacked ``NAME_lora_a [layers, *in, r]``
and ``NAME_lora_b [layers, r, *out]`` flattened to 2-D and transposed into torch's (out, in) Linear
layout. PEFT adds ``B(A(x)) * lora_alpha / r``, what our layer adds (models/lora.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax.models import hf, lora

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."  # PeftModel's wrapper + LoraModel's: where the transformers model sits


def adapter_config(config, base_model: str) -> dict:
    """adapter_config.json of a LoRA DecoderConfig; ``base_model``: the HF folder it adapts ('' = none on disk)."""
    alpha = float(config.lora_alpha)
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": int(config.lora_rank),
        "lora_alpha": int(alpha) if alpha.is_integer() else alpha,
        "target_modules": list(config.lora_targets),  # our stored names are the HF module names
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "base_model_name_or_path": base_model,
        "revision": None,
        "inference_mode": True,
    }


def adapter_tensors(params: dict, config):
    """Yield ``(PEFT key, float32 numpy array)`` for every adapter matrix, one layer at a time."""
    layers, r = params["layers"], config.lora_rank
    for name in config.lora_targets:
        a, b = layers[name + lora.A], layers[name + lora.B]
        for i in range(config.num_layers):
            module = PREFIX + hf.module_name(name, i)
            yield module + ".lora_A.weight", np.asarray(hf._host_array(a[i]), np.float32).reshape(-1, r).T
            yield module + ".lora_B.weight", np.asarray(hf._host_array(b[i]), np.float32).reshape(r, -1).T


def save_adapter(
    params: dict,
    config,
    path,
    base_model: str = "",
    dtype=None,
    extra_files: dict[str, Callable[[str], object]] | None = None,
) -> str:
    """Write the adapters of LoRA ``params`` as a PEFT folder (float32, or ``dtype``); returns ``path``.

    Only process 0 writes; every process must call it. The folder appears atomically (an existing
    one is replaced only once the new one is complete)."""
    from safetensors.flax import save_file

    if not config.lora_rank or not lora.has_adapters(params):
        raise ValueError("these params carry no LoRA adapters (lora.rank=0): nothing to write as a PEFT adapter")
    path = os.path.abspath(os.fspath(path))
    tensors = {k: np.ascontiguousarray(v) for k, v in adapter_tensors(params, config)}  # every process gathers
    if jax.process_index() != 0:
        return path
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(path) + "-", dir=parent)
    try:
        with hf._on_host():
            arrays = {k: jnp.asarray(v, jnp.dtype(dtype or jnp.float32)) for k, v in tensors.items()}
            save_file(arrays, os.path.join(tmp, WEIGHTS_FILE), metadata={"format": "pt"})
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            json.dump(adapter_config(config, base_model), f, indent=2)
        for fname, write in (extra_files or {}).items():
            write(os.path.join(tmp, fname))
        hf._umask_modes(tmp)
        hf.swap_in(tmp, path)
        tmp = None
        return path
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
