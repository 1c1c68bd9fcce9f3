"""What a Hugging Face export carries besides the weights: tokenizer files (chat template
included) and a generation config, from an HF dir or a tokenizer object.

Without them `AutoTokenizer` on an export silently builds a useless tokenizer, so `convert`
always passes these files along (`save_hf_params(extra_files=...)`). Each file is a writer, a
function of the destination path; a training run's files are chosen by `trainer/export_run.py`.
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


def tokenizer_files(tokenizer) -> Writers:
    """Writers of the files `tokenizer.save_pretrained` writes (chat template included)."""
    writers: Writers = {}
    with tempfile.TemporaryDirectory(prefix="microcoder-tokenizer-") as saved:
        tokenizer.save_pretrained(saved)
        for name in os.listdir(saved):
            with open(os.path.join(saved, name), "rb") as f:
                writers[name] = functools.partial(_write_bytes, data=f.read())
    return writers


def generation_config(tokenizer, max_new_tokens: int, temperature: float, top_p: float) -> dict:
    """A generation_config.json: the tokenizer's stop tokens and a sampling setting (greedy at 0)."""
    from microcoder_jax.data.tokenizer import pad_token_id, stop_token_ids

    gen = {
        "eos_token_id": stop_token_ids(tokenizer),
        "pad_token_id": pad_token_id(tokenizer),
        "max_new_tokens": int(max_new_tokens),
    }
    if temperature > 0:
        gen.update(do_sample=True, temperature=float(temperature), top_p=float(top_p))
    else:
        gen["do_sample"] = False
    return gen


def json_file(value: dict) -> Callable[[str], None]:
    """A writer of ``value`` as an indented JSON file."""
    return functools.partial(_write_json, value=value)


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _write_json(path: str, value: dict) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
