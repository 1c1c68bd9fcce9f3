"""The convert CLI: HF -> Orbax -> HF round trip, training checkpoints, and bad input."""

import glob
import json
import os

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from microcoder_jax import convert
from microcoder_jax.models.ckpt import load_checkpoint
from microcoder_jax.models import DecoderConfig, load_hf_params
from tiny_checkpoint import make_tiny_hf_checkpoint


def _tensors(path):
    out = {}
    for f in glob.glob(os.path.join(path, "*.safetensors")):
        out.update(load_file(f))
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    path = make_tiny_hf_checkpoint(tmp_path_factory.mktemp("hf"), seed=7, tie_word_embeddings=False)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:  # travels through CKPT/hf_files
        json.dump({"model_max_length": 256}, f)
    return path


def test_cli_round_trip_is_bitwise(hf_dir, tmp_path, capsys):
    ckpt, out = tmp_path / "ckpt", tmp_path / "hf_out"
    assert convert.main(["--from-hf", str(hf_dir), "--to", str(ckpt), "--mesh", "fsdp=2,tensor=4"]) == 0
    assert sorted(os.listdir(ckpt)) == ["hf_files", "model_config.json", "params"]
    params, config = load_checkpoint(ckpt)
    assert config == DecoderConfig.from_hf(hf_dir)
    assert convert.main(["--from", str(ckpt), "--to-hf", str(out), "--max-shard-gb", "0.00005"]) == 0
    assert "wrote" in capsys.readouterr().out
    a, b = _tensors(hf_dir), _tensors(out)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    assert os.path.exists(out / "model.safetensors.index.json")
    assert json.load(open(out / "tokenizer_config.json")) == {"model_max_length": 256}
    assert DecoderConfig.from_hf(out) == config


def test_bf16_checkpoint_and_export(hf_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    assert convert.main(["--from-hf", str(hf_dir), "--to", str(ckpt), "--param-dtype", "bfloat16"]) == 0
    params, config = load_checkpoint(ckpt)
    assert config.param_dtype == "bfloat16"
    assert {str(x.dtype) for x in jax.tree.leaves(params)} == {"bfloat16"}
    assert convert.main(["--from", str(ckpt), "--to-hf", str(tmp_path / "out")]) == 0
    assert json.load(open(tmp_path / "out" / "config.json"))["torch_dtype"] == "bfloat16"


def test_training_checkpoint_exports_to_hf(hf_dir, tmp_path):
    from microcoder_jax.models.checkpoint import Checkpointer

    config = DecoderConfig.from_hf(hf_dir)
    params = load_hf_params(hf_dir, config)
    ckpt = Checkpointer(str(tmp_path / "run" / "checkpoints"), async_save=False)
    ckpt.save(3, {"params": params, "step": np.int32(3)}, {"note": "test"})
    ckpt.close()
    out = tmp_path / "hf_out"
    args = ["--from", str(tmp_path / "run" / "checkpoints"), "--to-hf", str(out)]
    assert convert.main(args + ["--model-config", str(hf_dir)]) == 0
    a, b = _tensors(hf_dir), _tensors(out)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = ["--from", str(tmp_path / "run" / "checkpoints"), "--to-hf", str(tmp_path / "other")]
    assert convert.main(other) == 1  # without the model shape it cannot be read
    assert not os.path.exists(tmp_path / "other")


def test_bad_input(hf_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        convert.main(["--from-hf", str(tmp_path / "missing"), "--to", str(tmp_path / "c")])
    assert "no such directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        convert.main(["--from-hf", str(hf_dir), "--to-hf", str(tmp_path / "x")])
    with pytest.raises(SystemExit):
        convert.main(["--from", str(hf_dir), "--to-hf", str(hf_dir)])  # exists, no --overwrite
    assert "--overwrite" in capsys.readouterr().err

    assert convert.main(["--from-hf", str(hf_dir), "--to", str(tmp_path / "c"), "--mesh", "fsdp=3"]) == 1
    assert "needs 3 devices" in capsys.readouterr().err
    assert convert.main(["--from-hf", str(hf_dir), "--to", str(tmp_path / "c"), "--mesh", "pipeline=2"]) == 1

    llama = tmp_path / "mistral"
    llama.mkdir()
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    json.dump(
        {**cfg, "architectures": ["MistralForCausalLM"], "model_type": "mistral"}, open(llama / "config.json", "w")
    )
    assert convert.main(["--from-hf", str(llama), "--to", str(tmp_path / "c")]) == 1
    assert "MistralForCausalLM" in capsys.readouterr().err

    existing = tmp_path / "exists"
    existing.mkdir()
    assert convert.main(["--from-hf", str(hf_dir), "--to", str(existing)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "c")  # no failed run left a partial checkpoint
