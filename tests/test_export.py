"""`convert --from RUN --to-hf` uses the run's own config.json (the demo's layout) and the export
carries tokenizer, chat template and generation config: transformers loads it and generates."""

import json
import os

import jax
import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax import models
from microcoder_jax import convert
from microcoder_jax.trainer import setup as run_setup
from microcoder_jax.models.checkpoint import Checkpointer
from microcoder_jax.data import demo_task
from microcoder_jax.trainer.resume import record_config


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """A workdir laid out as the demo writes it: config.json, tokenizer/, checkpoints/N."""
    workdir = str(tmp_path_factory.mktemp("demo_run"))
    c = config_lib.demo_config()
    record_config(workdir, config_lib.to_dict(c), log_fn=lambda m: None)
    d = c.demo
    problems = demo_task.make_problems(d.ops, d.problems_per_op, d.tests_per_problem, c.seed, d.phrasings)
    tokenizer = demo_task.build_tokenizer(problems, d.ops, c.data, d.vocab_size)
    tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))
    params = models.init_params(models.model_config_from(c, len(tokenizer)), jax.random.PRNGKey(1))
    ck = Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
    ck.save(4, {"params": params, "step": np.int32(4)}, {"step": 4})
    ck.close()
    return workdir, tokenizer, params


@pytest.mark.parametrize("suffix", ["", "checkpoints"])
def test_run_export_loads_in_transformers_and_generates(demo_run, tmp_path, suffix):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    workdir, ours, params = demo_run
    out = str(tmp_path / "hf")
    assert convert.main(["--from", os.path.join(workdir, suffix), "--to-hf", out]) == 0
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == len(ours) and tok.chat_template == ours.chat_template
    messages = [{"role": "user", "content": "Read a and b, print a + b."}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    assert ids[0].tolist() == ours.encode(text, add_special_tokens=False)
    gen = GenerationConfig.from_pretrained(out)
    assert ours.convert_tokens_to_ids("<|im_end|>") in gen.eos_token_id and gen.do_sample is False
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert model.config.vocab_size == len(ours)
    new = model.generate(ids, max_new_tokens=6, min_new_tokens=6)[0, ids.shape[1] :]
    assert len(new) == 6 and isinstance(tok.decode(new), str)
    # the first greedy token is the one our model picks from the same params
    logits, _ = models.forward(
        params, models.model_config_from(config_lib.demo_config(), len(ours)), jax.numpy.asarray(ids.numpy())
    )
    assert int(new[0]) == int(np.argmax(np.asarray(logits)[0, -1]))


def test_training_dir_without_any_config_warns_about_the_tokenizer(demo_run, tmp_path, capsys):
    workdir, ours, _ = demo_run
    shape = models.model_config_from(config_lib.demo_config(), len(ours))
    bare = tmp_path / "bare"
    os.makedirs(bare)
    os.symlink(os.path.join(workdir, "checkpoints"), bare / "checkpoints")
    with open(bare / "model_config.json", "w") as f:  # not a run: our CKPT-style shape file only
        f.write(shape.to_json())
    out = tmp_path / "hf"
    code = convert.main(["--from", str(bare / "checkpoints"), "--to-hf", str(out), "--model-config", str(bare)])
    assert code == 0 and "no tokenizer files" in capsys.readouterr().err


def test_export_makes_missing_parents_and_files_readable_as_the_umask_allows(demo_run, tmp_path):
    """The README's `--to-hf out/demo` on a fresh clone: out/ does not exist. The export is as
    readable as an ordinary mkdir / open makes it (mkdtemp alone gives 0700 and 0600)."""
    workdir, _, _ = demo_run
    out = tmp_path / "out" / "nested" / "demo"
    old_mask = os.umask(0o022)
    try:
        assert convert.main(["--from", workdir, "--to-hf", str(out)]) == 0
    finally:
        os.umask(old_mask)
    modes = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*")}
    assert out.stat().st_mode & 0o777 == 0o755
    assert modes and all(m == (0o755 if (out / p).is_dir() else 0o644) for p, m in modes.items()), modes
    assert "model.safetensors" in modes and "config.json" in modes


def test_a_failed_export_keeps_the_previous_one(demo_run, tmp_path, monkeypatch, capsys):
    """--overwrite builds the new export beside the old one and swaps it in only when complete."""
    workdir, _, _ = demo_run
    out = tmp_path / "hf"
    assert convert.main(["--from", workdir, "--to-hf", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())

    def fail(root):
        raise OSError("disk full")

    monkeypatch.setattr(models.hf, "_umask_modes", fail)
    assert convert.main(["--from", workdir, "--to-hf", str(out), "--overwrite"]) == 1
    assert "convert: error: disk full" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temp folder left behind


def test_convert_without_torch_prints_no_transformers_notice(demo_run, tmp_path):
    """Command 1 of the README installs no torch: transformers' import notice "PyTorch was not
    found" is filtered where the package loads, so no command prints it."""
    import subprocess
    import sys

    workdir, _, _ = demo_run
    code = (
        "import sys, runpy; sys.modules['torch'] = None; "  # as if torch were not installed
        f"sys.argv = ['convert', '--from', {workdir!r}, '--to-hf', {str(tmp_path / 'hf')!r}]; "
        "runpy.run_module('microcoder_jax.convert', run_name='__main__')"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert out.returncode == 0 and "wrote" in out.stdout, out.stderr[-3000:]
    assert "PyTorch was not found" not in out.stderr and "[transformers]" not in out.stderr, out.stderr[-3000:]
