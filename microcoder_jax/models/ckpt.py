"""Our Orbax checkpoint of a model, CKPT: ``params/`` (Orbax, StandardCheckpointer),
``model_config.json`` (our ``DecoderConfig``) and ``hf_files/`` (tokenizer and generation files
copied from the HF dir it came from, restored on export so the exported dir is complete).

Plain functions over params, a model config and paths; the command that converts between Hugging
Face folders, GGUF files, CKPTs and training runs is ``python -m microcoder_jax.convert``
(``trainer/convert.py``).
"""

from __future__ import annotations

import glob
import os
import shutil

import jax
import orbax.checkpoint as ocp

from microcoder_jax import sharding as shd
from microcoder_jax.models import hf
from microcoder_jax.models.checkpoint import read_checkpoint_meta
from microcoder_jax.models.decoder import DecoderConfig, param_logical_axes, param_shapes

CONFIG_FILE = "model_config.json"
PARAMS_DIR = "params"
HF_FILES_DIR = "hf_files"
_SKIP_HF_FILES = {"config.json", hf.INDEX_FILE}


def abstract_params(config: DecoderConfig, mesh=None, dtype=None) -> dict:
    """ShapeDtypeStructs with target shardings: Orbax restores straight into them."""
    shapes = param_shapes(config)
    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)  # noqa: E731
    if mesh is None:
        one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        shardings = jax.tree.map(lambda _: one, shapes, is_leaf=is_shape)
    else:
        shardings = shd.logical_to_sharding(param_logical_axes(config), mesh, shapes)
    dtype = dtype or config.param_dtype
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s, jax.numpy.dtype(dtype), sharding=sh), shapes, shardings, is_leaf=is_shape
    )


def save_checkpoint(params: dict, config: DecoderConfig, path, hf_files_from=None) -> str:
    """Write ``params`` + config (+ HF tokenizer files) as CKPT; every process must call it."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path):
        raise FileExistsError(f"{path} exists; refusing to overwrite a checkpoint")
    tmp = path + ".tmp"  # same name on every process (a shared filesystem for multi-host runs)
    if jax.process_index() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(tmp, PARAMS_DIR), params)
    checkpointer.wait_until_finished()
    if jax.process_index() == 0:
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            f.write(config.to_json())
        if hf_files_from is not None:
            extras = [
                f
                for f in glob.glob(os.path.join(os.fspath(hf_files_from), "*"))
                if os.path.isfile(f) and not f.endswith(".safetensors") and os.path.basename(f) not in _SKIP_HF_FILES
            ]
            if extras:
                os.makedirs(os.path.join(tmp, HF_FILES_DIR))
                for f in extras:
                    shutil.copy2(f, os.path.join(tmp, HF_FILES_DIR))
        os.rename(tmp, path)
    return path


def load_checkpoint(
    path, mesh=None, config: DecoderConfig | None = None, step: int | None = None, **config_overrides
) -> tuple[dict, DecoderConfig]:
    """(params, config) from a CKPT written by ``save_checkpoint``, or from a training run's
    ``checkpoints`` dir (then ``config`` gives the model shape; ``step`` defaults to the newest)."""
    path = os.path.abspath(os.fspath(path))
    config_file = os.path.join(path, CONFIG_FILE)
    if os.path.exists(config_file):
        with open(config_file) as f:
            config = DecoderConfig.from_json(f.read()).replace(**config_overrides)
        target = abstract_params(config, mesh)
        params = ocp.StandardCheckpointer().restore(os.path.join(path, PARAMS_DIR), target)
        return params, config
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if config is None:
        raise ValueError(
            f"{path} has no {CONFIG_FILE}: pass the model shape (--model-config) to read it as a "
            "training checkpoint directory"
        )
    from microcoder_jax.models.checkpoint import load_params

    config = config.replace(**config_overrides)
    params, _ = load_params(path, abstract_params(config, mesh), step=step)
    return params, config


def model_config(spec: str) -> DecoderConfig:
    """A model shape from an HF dir / config.json path, our model_config.json, or a preset name."""
    from microcoder_jax.models.presets import get_preset

    if os.path.isdir(spec) and os.path.exists(os.path.join(spec, CONFIG_FILE)):
        with open(os.path.join(spec, CONFIG_FILE)) as f:
            return DecoderConfig.from_json(f.read())
    if os.path.exists(spec):
        return DecoderConfig.from_hf(spec)
    return get_preset(spec)


def holds_adapters_only(directory: str, step: int | None) -> bool:
    """Whether a training checkpoints dir is a LoRA run's (its meta names the base it was trained on)."""
    if not os.path.isdir(directory) or os.path.exists(os.path.join(directory, CONFIG_FILE)):
        return False
    try:
        return "base_fingerprint" in read_checkpoint_meta(directory, step)
    except Exception:  # noqa: BLE001 - not readable as a training checkpoint: load_checkpoint says why
        return False
