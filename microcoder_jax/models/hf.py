"""Hugging Face safetensors <-> our params, tensor by tensor.

Loading streams every parameter straight into its target ``NamedSharding``: each device's shard
is read from the memory-mapped safetensors file(s) with ``get_slice`` (layers stacked on the fly),
so a 32B model never needs a full host copy. Export writes size-capped safetensors shards, the
index and ``config.json`` into a temp dir renamed into place at the end (no partial output).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open

from microcoder_jax import sharding as shd
from microcoder_jax.models.decoder import DecoderConfig, forward, param_logical_axes, param_shapes

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

# Our leaf -> (HF name template, layout). Layouts relate our per-layer tensor to HF's 2-D/1-D one:
#   copy:      same array;                       T: transposed;
#   split_out: HF [N*hd, D] -> ours [D, N, hd];  split_in: HF [D, N*hd] -> ours [N, hd, D];
#   split_bias: HF [N*hd] -> ours [N, hd] (Qwen2's q/k/v biases).
_LAYER_KEYS = {
    "attn_norm": ("model.layers.{}.input_layernorm.weight", "copy"),
    "q_proj": ("model.layers.{}.self_attn.q_proj.weight", "split_out"),
    "k_proj": ("model.layers.{}.self_attn.k_proj.weight", "split_out"),
    "v_proj": ("model.layers.{}.self_attn.v_proj.weight", "split_out"),
    "q_norm": ("model.layers.{}.self_attn.q_norm.weight", "copy"),
    "k_norm": ("model.layers.{}.self_attn.k_norm.weight", "copy"),
    "q_bias": ("model.layers.{}.self_attn.q_proj.bias", "split_bias"),
    "k_bias": ("model.layers.{}.self_attn.k_proj.bias", "split_bias"),
    "v_bias": ("model.layers.{}.self_attn.v_proj.bias", "split_bias"),
    "o_proj": ("model.layers.{}.self_attn.o_proj.weight", "split_in"),
    "mlp_norm": ("model.layers.{}.post_attention_layernorm.weight", "copy"),
    "gate_proj": ("model.layers.{}.mlp.gate_proj.weight", "T"),
    "up_proj": ("model.layers.{}.mlp.up_proj.weight", "T"),
    "down_proj": ("model.layers.{}.mlp.down_proj.weight", "T"),
}
_TOP_KEYS = {
    "embed": ("model.embed_tokens.weight", "copy"),
    "final_norm": ("model.norm.weight", "copy"),
    "lm_head": ("lm_head.weight", "T"),
}


def hf_key_map(config: DecoderConfig) -> dict:
    """Params-shaped tree of ``(hf_names, layout)``; ``hf_names`` has one name per layer for stacked leaves."""
    ours = param_shapes(config)["layers"]  # the family's leaves: q/k norms or q/k/v biases
    layers = {
        k: ([t.format(i) for i in range(config.num_layers)], lay) for k, (t, lay) in _LAYER_KEYS.items() if k in ours
    }
    out: dict = {k: ([t], lay) for k, (t, lay) in _TOP_KEYS.items() if k != "lm_head" or not config.tie_word_embeddings}
    out["layers"] = layers
    return out


def module_name(leaf: str, layer: int) -> str:
    """The transformers module that holds one per-layer weight of ours, e.g. ``model.layers.3.self_attn.q_proj``
    (what a PEFT adapter's keys name)."""
    return _LAYER_KEYS[leaf][0].format(layer).removesuffix(".weight")


def _hf_shape(shape: tuple, layout: str) -> tuple:
    """HF shape of one (unstacked) tensor given our per-layer shape."""
    if layout == "copy":
        return shape
    if layout == "T":
        return shape[::-1]
    if layout == "split_out":
        return (shape[1] * shape[2], shape[0])
    if layout == "split_bias":
        return (shape[0] * shape[1],)
    return (shape[2], shape[0] * shape[1])  # split_in


def _read_block(sl, layout: str, shape: tuple, index: tuple) -> np.ndarray:
    """Our block ``[index]`` of one per-layer tensor, reading only the HF rows/cols it covers."""
    idx = [slice(*s.indices(n)) for s, n in zip(index, shape)]
    if layout == "copy":
        return np.asarray(sl[tuple(idx)])
    if layout == "T":
        return np.asarray(sl[tuple(idx[::-1])]).T
    if layout == "split_bias":  # ours [N, hd], HF [N*hd]
        n, h = idx
        hd = shape[1]
        return np.asarray(sl[n.start * hd : n.stop * hd]).reshape(n.stop - n.start, hd)[:, h]
    if layout == "split_out":  # ours [D, N, hd], HF [N*hd, D]
        d, n, h = idx
        hd = shape[2]
        block = np.asarray(sl[n.start * hd : n.stop * hd, d.start : d.stop]).T
        return block.reshape(block.shape[0], n.stop - n.start, hd)[:, :, h]
    n, h, d = idx  # split_in: ours [N, hd, D], HF [D, N*hd]
    hd = shape[1]
    block = np.asarray(sl[d.start : d.stop, n.start * hd : n.stop * hd]).T
    return block.reshape(n.stop - n.start, hd, block.shape[1])[:, h, :]


def _to_hf(array: np.ndarray, layout: str) -> np.ndarray:
    """One per-layer tensor of ours in HF layout."""
    if layout == "copy":
        return array
    if layout == "T":
        return array.T
    if layout == "split_out":
        return array.reshape(array.shape[0], -1).T
    if layout == "split_bias":
        return array.reshape(-1)
    return array.reshape(-1, array.shape[-1]).T  # split_in


def _weight_files(path: str) -> dict[str, str]:
    """HF tensor name -> file, from the index (sharded checkpoints) or the single safetensors file."""
    index = os.path.join(path, INDEX_FILE)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return {k: os.path.join(path, v) for k, v in weight_map.items()}
    single = os.path.join(path, SINGLE_FILE)
    if not os.path.exists(single):
        raise FileNotFoundError(f"no {SINGLE_FILE} or {INDEX_FILE} in {path}")
    with _open(single, "numpy") as f:
        return {k: single for k in f.keys()}


def _on_host():
    """Keep safetensors' temporary jax arrays in host memory (not on accelerator 0) where a CPU backend exists."""
    try:
        return jax.default_device(jax.devices("cpu")[0])
    except RuntimeError:  # JAX_PLATFORMS excludes cpu
        return contextlib.nullcontext()


def _open(file: str, framework: str):
    """``safe_open`` with an error that names the file (safetensors raises its own error types)."""
    try:
        return safe_open(file, framework)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"cannot read safetensors file {file} (truncated or corrupt?): {e}") from e


class _Reader:
    """Open safetensors files lazily (memory-mapped) and hand out per-tensor slices on the CPU."""

    def __init__(self, files: dict[str, str], stack: contextlib.ExitStack):
        self.files, self.stack, self.handles = files, stack, {}

    def slice(self, name: str):
        file = self.files[name]
        if file not in self.handles:
            self.handles[file] = self.stack.enter_context(_open(file, "flax"))
        return self.handles[file].get_slice(name)


def load_hf_params(path, config: DecoderConfig, mesh=None, param_dtype=None) -> dict:
    """Read an HF checkpoint directory (Qwen3, Qwen2, Llama) into our params, each leaf placed in its sharding.

    Without a mesh every leaf lands on the default device. ``param_dtype`` (default
    ``config.param_dtype``) converts on the fly, e.g. bf16 checkpoint -> fp32 params.
    """
    path = os.fspath(path)
    dtype = jnp.dtype(param_dtype or config.param_dtype)
    files = _weight_files(path)
    keys = hf_key_map(config)
    shapes = param_shapes(config)
    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)  # noqa: E731
    if mesh is None:
        device = jax.devices()[0]
        shardings = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(device), shapes, is_leaf=is_shape)
    else:
        shardings = shd.logical_to_sharding(param_logical_axes(config), mesh, shapes)

    expected = {n for names, _ in jax.tree.leaves(keys, is_leaf=_is_key_leaf) for n in names}
    missing = sorted(expected - set(files))
    optional = {"lm_head.weight"} if config.tie_word_embeddings else set()  # some tied exports keep a copy
    unexpected = sorted(set(files) - expected - optional)
    if missing:
        raise ValueError(f"checkpoint {path} is missing tensor(s): {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        raise ValueError(
            f"checkpoint {path} has unexpected tensor(s): {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}"
        )

    with contextlib.ExitStack() as stack, _on_host():
        reader = _Reader(files, stack)

        def load_leaf(key_leaf, shape, sharding):
            names, layout = key_leaf
            per_shape = shape[1:] if _stacked(names) else shape
            want = _hf_shape(per_shape, layout)
            slices = []
            for name in names:
                sl = reader.slice(name)
                got = tuple(sl.get_shape())
                if got != want:
                    raise ValueError(f"tensor {name} has shape {list(got)}, config expects {list(want)}")
                slices.append(sl)

            def callback(index):
                if not _stacked(names):
                    return _read_block(slices[0], layout, per_shape, index).astype(dtype)
                layer_ids = range(*index[0].indices(shape[0]))
                return np.stack([_read_block(slices[i], layout, per_shape, index[1:]) for i in layer_ids]).astype(dtype)

            return jax.make_array_from_callback(shape, sharding, callback)

        return jax.tree.map(load_leaf, keys, shapes, shardings, is_leaf=_is_key_leaf)


def _is_key_leaf(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], list)


def _stacked(names: list) -> bool:
    """Whether a leaf carries the leading ``layers`` axis (true even for a 1-layer model)."""
    return ".layers." in names[0]


def _host_array(x: jax.Array) -> np.ndarray:
    """A full host copy of one (possibly multi-host sharded) array."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def iter_hf_tensors(params: dict, config: DecoderConfig):
    """Yield ``(hf_name, numpy array)`` for every tensor, one stacked leaf at a time."""
    keys = hf_key_map(config)
    key_leaves = jax.tree.leaves(keys, is_leaf=_is_key_leaf)
    param_leaves = jax.tree.leaves(params)
    if len(key_leaves) != len(param_leaves):
        raise ValueError(f"params have {len(param_leaves)} leaves, config {config} expects {len(key_leaves)}")
    for (names, layout), leaf in zip(key_leaves, param_leaves):
        if _stacked(names):  # one layer at a time: host memory stays at one tensor
            for i, name in enumerate(names):
                yield name, np.ascontiguousarray(_to_hf(_host_array(leaf[i]), layout))
        else:
            yield names[0], np.ascontiguousarray(_to_hf(_host_array(leaf), layout))


def save_hf_params(
    params: dict,
    config: DecoderConfig,
    path,
    max_shard_bytes: int = 5 * 1024**3,
    dtype=None,
    extra_files: dict[str, Callable[[str], object]] | None = None,
) -> str:
    """Write ``params`` as an HF checkpoint dir (safetensors shards + index + config.json); returns ``path``.

    ``dtype`` converts on export (default: the params' own dtype). Only process 0 writes; every
    process must call it (multi-host arrays are gathered). The output appears atomically.
    """
    from safetensors.flax import save_file

    path = os.path.abspath(os.fspath(path))
    is_writer = jax.process_index() == 0
    parent = os.path.dirname(path)
    if is_writer:
        os.makedirs(parent, exist_ok=True)  # `--to-hf out/demo` on a fresh clone: out/ is made too
    tmp = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(path) + "-", dir=parent) if is_writer else None
    try:
        shards: list[dict[str, np.ndarray]] = [{}]
        sizes = [0]
        out_dtype = None
        for name, array in iter_hf_tensors(params, config):  # every process joins the gathers
            if not is_writer:
                continue
            if dtype is not None:
                array = array.astype(jnp.dtype(dtype))
            out_dtype = out_dtype or array.dtype
            if sizes[-1] and sizes[-1] + array.nbytes > max_shard_bytes:
                _flush(shards, tmp, save_file)
                shards.append({})
                sizes.append(0)
            shards[-1][name] = array
            sizes[-1] += array.nbytes
        if not is_writer:
            return path
        assert tmp is not None  # made above, by the writer
        _flush(shards, tmp, save_file)
        n = len(shards)
        names = [SINGLE_FILE] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        weight_map = {}
        for i, final in enumerate(names):
            os.rename(os.path.join(tmp, f"part-{i}.safetensors"), os.path.join(tmp, final))
        if n > 1:
            for final in names:
                with safe_open(os.path.join(tmp, final), "numpy") as f:
                    weight_map.update({k: final for k in f.keys()})
            with open(os.path.join(tmp, INDEX_FILE), "w") as f:
                json.dump(
                    {"metadata": {"total_size": int(sum(sizes))}, "weight_map": dict(sorted(weight_map.items()))},
                    f,
                    indent=2,
                )
        hf_config = config.to_hf()
        hf_config["torch_dtype"] = np.dtype(out_dtype).name
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(hf_config, f, indent=2)
        for fname, write in (extra_files or {}).items():
            write(os.path.join(tmp, fname))
        _umask_modes(tmp)
        swap_in(tmp, path)
        tmp = None
        return path
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def swap_in(tmp: str, path: str) -> None:
    """Rename a finished folder into place, replacing an existing one (the export appears whole)."""
    if os.path.exists(path):
        old = path + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)


def _umask_modes(root: str) -> None:
    """The modes an ordinary mkdir / open gives under this process's umask, for ``root`` and all
    in it: mkdtemp makes 0700, so without this a server running as another user (vLLM) cannot
    read the export."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(root, 0o777 & ~mask)
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o777 & ~mask)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o666 & ~mask)


def _flush(shards, tmp, save_file):
    """Write the last shard to disk and drop its arrays (keeps peak host memory at one shard)."""
    i = len(shards) - 1
    with _on_host():
        tensors = {k: jnp.asarray(v) for k, v in shards[-1].items()}
        save_file(tensors, os.path.join(tmp, f"part-{i}.safetensors"), metadata={"format": "pt"})
    shards[-1] = {k: None for k in shards[-1]}


class Qwen3ForCausalLM:
    """A thin holder of ``config``, ``params`` and ``mesh`` with the familiar HF entry points."""

    def __init__(self, config: DecoderConfig, params: dict, mesh=None):
        self.config, self.params, self.mesh = config, params, mesh
        self._forward = jax.jit(_logits, static_argnums=1)

    @classmethod
    def from_pretrained(
        cls, path, dtype: str = "bfloat16", param_dtype: str = "float32", mesh=None, **config_overrides
    ) -> "Qwen3ForCausalLM":
        """Load an HF checkpoint dir; ``dtype`` is the compute dtype, ``param_dtype`` the stored one."""
        config = DecoderConfig.from_hf(path, dtype=dtype, param_dtype=param_dtype, **config_overrides)
        return cls(config, load_hf_params(path, config, mesh=mesh), mesh)

    def __call__(self, input_ids, attention_mask=None) -> jax.Array:
        """Float32 logits ``[B, T, vocab]``; ``attention_mask`` 1 = real token (left padding 0)."""
        input_ids = jnp.asarray(input_ids, jnp.int32)
        mask = jnp.ones_like(input_ids) if attention_mask is None else jnp.asarray(attention_mask, jnp.int32)
        if self.mesh is None:
            return self._forward(self.params, self.config, input_ids, mask)
        spec = shd.logical_to_spec(("batch", "length"), self.mesh, input_ids.shape)
        rows = jax.sharding.NamedSharding(self.mesh, spec)
        input_ids, mask = jax.device_put((input_ids, mask), rows)
        with jax.set_mesh(self.mesh):
            return self._forward(self.params, self.config, input_ids, mask)

    def save_pretrained(self, path, max_shard_bytes: int = 5 * 1024**3, dtype=None) -> str:
        return save_hf_params(self.params, self.config, path, max_shard_bytes=max_shard_bytes, dtype=dtype)


def _logits(params, config, input_ids, attention_mask):
    return forward(params, config, input_ids, attention_mask=attention_mask)[0]
