"""`convert` on a LoRA run: `--to-hf` writes base + adapters merged (transformers loads it as the
plain family class), `--to-peft` the adapters as a PEFT folder (peft loads it onto the
transformers base); both give our adapter forward's logits. Bad input is one line, nothing written."""

import json
import os

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from microcoder_jax import config as config_lib
from microcoder_jax import models
from microcoder_jax.data import demo_task
from microcoder_jax import convert
from microcoder_jax.models import lora
from microcoder_jax.models.checkpoint import Checkpointer
from microcoder_jax.trainer.resume import record_config
from tiny_checkpoint import make_tiny_hf_checkpoint

TOL = 1e-4  # fp32 rounding of a 2-layer model (measured: ~1e-6)


@pytest.fixture(scope="module")
def tokenizer():
    c = config_lib.demo_config()
    d = c.demo
    problems = demo_task.make_problems(d.ops, d.problems_per_op, d.tests_per_problem, c.seed, d.phrasings)
    return demo_task.build_tokenizer(problems, d.ops, c.data, d.vocab_size)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, tokenizer):
    """A tiny random Qwen3 in HF format with the demo's vocabulary: the run's model.path."""
    return make_tiny_hf_checkpoint(tmp_path_factory.mktemp("base"), seed=3, vocab_size=len(tokenizer))


def run_config(model_path: str, rank: int = 4, **lora_fields):
    c = config_lib.demo_config()
    c.model.path = model_path
    c.lora.rank, c.lora.alpha = rank, 8.0
    for k, v in lora_fields.items():
        c.lora[k] = v
    return c


def write_run(workdir, c, tokenizer, params=None, step: int = 3) -> str:
    """A workdir as training leaves it: config.json, tokenizer/, and (with `params`) a checkpoint
    of the adapters only, its meta naming the base's fingerprint."""
    workdir = str(workdir)
    record_config(workdir, config_lib.to_dict(c), log_fn=lambda m: None)
    tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))
    if params is not None:
        trainable, frozen = lora.split(params)
        ck = Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
        meta = {"step": step, "base_fingerprint": lora.fingerprint(frozen)}
        ck.save(step, {"params": trainable, "step": np.int32(step)}, meta)
        ck.close()
    return workdir


def trained(base: dict, config, seed: int = 0) -> dict:
    """LoRA params on `base` with nonzero adapters (B random: a fresh B = 0 would hide a wrong layout)."""
    params = lora.attach(base, config, jax.random.PRNGKey(seed))
    layers = dict(params["layers"])
    for i, name in enumerate(config.lora_targets):
        b = layers[name + lora.B]
        layers[name + lora.B] = 0.1 * jax.random.normal(jax.random.PRNGKey(100 + i), b.shape, b.dtype)
    return {**params, "layers": layers}


def lora_run(tmp_path_factory, tokenizer, base_dir, name, **lora_fields):
    """(workdir, LoRA config, joined params) of a LoRA run on the tiny base."""
    c = run_config(str(base_dir), **lora_fields)
    config = models.model_config_from(c, None)
    base = models.load_hf_params(base_dir, lora.base_config(config))
    params = trained(base, config)
    return write_run(tmp_path_factory.mktemp(name), c, tokenizer, params), config, params


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer, base_dir):
    return lora_run(tmp_path_factory, tokenizer, base_dir, "lora_run")


@pytest.fixture(scope="module")
def ids(tokenizer):
    return np.random.default_rng(0).integers(0, len(tokenizer), (2, 12)).astype(np.int32)


def ours(params, config, ids) -> np.ndarray:
    return np.asarray(models.forward(params, config, jax.numpy.asarray(ids))[0])


def torch_logits(model, ids) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.numpy()


def load_hf(path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


def test_merged_export_is_the_adapter_model(run, base_dir, ids, tmp_path):
    workdir, config, params = run
    out = tmp_path / "merged"
    assert convert.main(["--from", workdir, "--to-hf", str(out)]) == 0
    hf_config = json.load(open(out / "config.json"))
    assert hf_config["architectures"] == ["Qwen3ForCausalLM"] and not any("lora" in k for k in hf_config)
    model = load_hf(out)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    want = ours(params, config, ids)
    diff = np.abs(torch_logits(model, ids) - want).max()
    assert diff < TOL, diff
    base_gap = np.abs(torch_logits(load_hf(base_dir), ids) - want).max()
    assert base_gap > 100 * TOL, base_gap  # the adapters move the logits: a dropped adapter fails above


def test_peft_adapter_loads_onto_the_transformers_base(run, base_dir, ids, tmp_path, capsys):
    from peft import PeftModel

    workdir, config, params = run
    out = tmp_path / "adapter"
    assert convert.main(["--from", workdir, "--to-peft", str(out), "--step", "3"]) == 0
    assert "PEFT LoRA adapter, r=4" in capsys.readouterr().out
    cfg = json.load(open(out / "adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM" and cfg["r"] == 4
    assert cfg["lora_alpha"] == 8 and cfg["base_model_name_or_path"] == os.path.abspath(base_dir)
    assert sorted(cfg["target_modules"]) == sorted(lora.PROJECTIONS)
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert len(tensors) == 2 * 7 * config.num_layers and {str(t.dtype) for t in tensors.values()} == {"float32"}
    q = "base_model.model.model.layers.1.self_attn.q_proj"
    assert tensors[q + ".lora_A.weight"].shape == (4, config.hidden_size)
    assert tensors[q + ".lora_B.weight"].shape == (config.num_heads * config.head_dim, 4)
    assert tensors["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"].shape == (4, 128)
    model = PeftModel.from_pretrained(load_hf(base_dir), str(out)).eval()
    diff = np.abs(torch_logits(model, ids) - ours(params, config, ids)).max()
    assert diff < TOL, diff
    assert os.path.exists(out / "tokenizer.json")  # the run's tokenizer travels with it


@pytest.mark.slow  # keeps the quick tier under 6 minutes
def test_int8_base_merged_export_is_exact(tmp_path_factory, tokenizer, base_dir, ids, tmp_path, capsys):
    """An int8 base: the merged export holds the dequantised base + adapters, what the run trained;
    a PEFT export says it adapts the dequantised base."""
    workdir, config, params = lora_run(
        tmp_path_factory, tokenizer, base_dir, "int8_run", base_dtype="int8", targets=("q", "o", "down")
    )
    out = tmp_path / "merged"
    assert convert.main(["--from", workdir, "--to-hf", str(out)]) == 0
    diff = np.abs(torch_logits(load_hf(out), ids) - ours(params, config, ids)).max()
    assert diff < TOL, diff
    assert convert.main(["--from", workdir, "--to-peft", str(tmp_path / "adapter")]) == 0
    assert "int8-dequantised" in capsys.readouterr().err
    cfg = json.load(open(tmp_path / "adapter" / "adapter_config.json"))
    assert sorted(cfg["target_modules"]) == ["down_proj", "o_proj", "q_proj"]


@pytest.mark.slow  # keeps the quick tier under 6 minutes
def test_random_init_base_is_rebuilt_from_the_seed(tmp_path, tokenizer, ids, capsys):
    """model.path='': the base is the seeded init the run started from (as training builds it)."""
    c = run_config("")
    c.train.warm_start_steps = 0
    c.demo.problems_per_op = 2
    config = models.model_config_from(c, len(tokenizer))
    base = models.init_params(lora.base_config(config), jax.random.PRNGKey(c.seed))
    params = trained(base, config)  # the frozen part is what training's attach stores, whatever the adapter key
    workdir = write_run(tmp_path / "run", c, tokenizer, params)
    out = tmp_path / "merged"
    assert convert.main(["--from", workdir, "--to-hf", str(out)]) == 0  # the base rebuilt by the trainer's set-up
    diff = np.abs(torch_logits(load_hf(out), ids) - ours(params, config, ids)).max()
    assert diff < TOL, diff
    assert convert.main(["--from", workdir, "--to-peft", str(tmp_path / "adapter")]) == 0
    assert "random init" in capsys.readouterr().err
    assert json.load(open(tmp_path / "adapter" / "adapter_config.json"))["base_model_name_or_path"] == ""


def test_bad_input_is_one_line_and_writes_nothing(run, base_dir, tokenizer, tmp_path, capsys):
    workdir, _, _ = run
    out = tmp_path / "out"

    def fails(args, *words, code=1):
        assert convert.main(args) == code
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and all(w in err for w in words), err
        assert not out.exists()

    full = write_run(tmp_path / "full", run_config(str(base_dir), rank=0), tokenizer)
    fails(["--from", full, "--to-peft", str(out)], "no adapters", "--to-hf")
    fails(["--from", str(base_dir), "--to-peft", str(out)], "no training run", "--to-hf")
    with pytest.raises(SystemExit):
        convert.main(["--from-hf", str(base_dir), "--to-peft", str(out)])
    assert "--from RUN" in capsys.readouterr().err

    # the base moved: named, and --model-config says where it is now
    moved = write_run(tmp_path / "moved", run_config(str(tmp_path / "gone")), tokenizer)
    os.symlink(os.path.join(workdir, "checkpoints"), os.path.join(moved, "checkpoints"))
    fails(["--from", moved, "--to-hf", str(out)], "gone", "--model-config")
    fails(["--from", moved, "--to-hf", str(out), "--model-config", "tiny"], "Hugging Face folder")
    other = make_tiny_hf_checkpoint(tmp_path / "other", seed=4, vocab_size=len(tokenizer))
    capsys.readouterr()  # transformers' own save progress
    fails(["--from", moved, "--to-peft", str(out), "--model-config", str(other)], "another base", "--model-config")
    assert convert.main(["--from", moved, "--to-peft", str(out), "--model-config", str(base_dir)]) == 0
    assert json.load(open(out / "adapter_config.json"))["base_model_name_or_path"] == os.path.abspath(base_dir)
    os.rename(out, tmp_path / "done")

    # adapters without their run's config.json: the base is unknown
    bare = tmp_path / "bare"
    os.makedirs(bare)
    os.symlink(os.path.join(workdir, "checkpoints"), bare / "ckpts")
    fails(["--from", str(bare / "ckpts"), "--to-hf", str(out), "--model-config", str(base_dir)], "workdir")
    fails(["--from", workdir, "--to-hf", str(out), "--step", "9"], "step 9", "kept steps: 3")
