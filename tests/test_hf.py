"""Hugging Face safetensors <-> params: sharded loading, bitwise round trip, dtypes, errors, the wrapper."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file as torch_save_file

from microcoder_jax import sharding as shd
from microcoder_jax.models import (
    DecoderConfig,
    Qwen3ForCausalLM,
    get_preset,
    load_hf_params,
    param_logical_axes,
    param_shapes,
    save_hf_params,
)
from tiny_checkpoint import make_tiny_hf_checkpoint


def _tensors(path):
    out = {}
    for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        out.update(load_file(f))
    return out


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    return make_tiny_hf_checkpoint(tmp_path_factory.mktemp("untied"), seed=3, tie_word_embeddings=False)


@pytest.mark.parametrize("mesh_axes", [None, dict(fsdp=2, tensor=4), dict(data=2, fsdp=4)])
def test_round_trip_is_bitwise(untied, tmp_path, mesh_axes):
    mesh = shd.make_mesh(**mesh_axes) if mesh_axes else None
    config = DecoderConfig.from_hf(untied)
    params = load_hf_params(untied, config, mesh=mesh)
    if mesh is not None:
        want = shd.logical_to_sharding(param_logical_axes(config), mesh, param_shapes(config))
        jax.tree.map(lambda x, s: x.sharding.is_equivalent_to(s, x.ndim) or pytest.fail(str(x.sharding)), params, want)
    out = save_hf_params(params, config, tmp_path / "out", max_shard_bytes=40_000)
    files = sorted(os.listdir(out))
    assert "model.safetensors.index.json" in files and "config.json" in files
    assert sum(f.endswith(".safetensors") for f in files) > 1
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]  # temp dir renamed away
    a, b = _tensors(untied), _tensors(out)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    assert set(index["weight_map"]) == set(a)


def test_export_loads_in_transformers_with_same_logits(untied, tmp_path):
    from transformers import AutoModelForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(untied, dtype="float32")
    model.save_pretrained(tmp_path / "export", max_shard_bytes=60_000)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32).eval()
    ids = np.random.RandomState(0).randint(0, 128, (2, 12))
    with torch.no_grad():
        ref = hf(torch.tensor(ids)).logits.numpy()
    ours = np.asarray(model(ids))
    assert ours.shape == (2, 12, 128)
    assert np.abs(ours - ref).max() / np.abs(ref).max() < 2e-5


def test_wrapper_on_a_mesh_matches_single_device(untied):
    ids = np.random.RandomState(1).randint(0, 128, (4, 10))
    mask = np.ones_like(ids)
    mask[2, :4] = 0
    single = Qwen3ForCausalLM.from_pretrained(untied, dtype="float32")
    meshed = Qwen3ForCausalLM.from_pretrained(untied, dtype="float32", mesh=shd.make_mesh(fsdp=2, tensor=4))
    np.testing.assert_allclose(np.asarray(meshed(ids, mask)), np.asarray(single(ids, mask)), rtol=2e-5, atol=2e-5)


def test_bf16_checkpoint_converts_to_fp32_and_back(tmp_path):
    path = make_tiny_hf_checkpoint(tmp_path / "fp32", seed=4)
    bf16 = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in _tensors(path).items()}
    os.makedirs(tmp_path / "bf16")
    torch_save_file(bf16, str(tmp_path / "bf16" / "model.safetensors"), metadata={"format": "pt"})
    os.link(os.path.join(path, "config.json"), tmp_path / "bf16" / "config.json")
    config = DecoderConfig.from_hf(tmp_path / "bf16")
    params = load_hf_params(tmp_path / "bf16", config, param_dtype="float32")
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype("float32")}
    embed = bf16["model.embed_tokens.weight"].float().numpy()
    assert np.array_equal(np.asarray(params["embed"]), embed)
    as_bf16 = load_hf_params(tmp_path / "bf16", config, param_dtype="bfloat16")
    out = save_hf_params(as_bf16, config, tmp_path / "out")
    back = _tensors(out)
    assert json.load(open(os.path.join(out, "config.json")))["torch_dtype"] == "bfloat16"
    for k, v in bf16.items():  # bf16 -> ours -> bf16 is bitwise too
        assert np.array_equal(back[k].view(np.uint16), v.view(torch.int16).numpy().view(np.uint16)), k


@pytest.fixture()
def broken(tmp_path):
    """A fresh tied checkpoint whose tensors a test may rewrite."""
    path = make_tiny_hf_checkpoint(tmp_path / "ck", seed=5)
    return path, _tensors(path)


def _rewrite(path, tensors):
    from safetensors.numpy import save_file

    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


def test_missing_tensor_is_named(broken):
    path, tensors = broken
    del tensors["model.layers.1.mlp.up_proj.weight"]
    _rewrite(path, tensors)
    with pytest.raises(ValueError, match=r"missing tensor.*model\.layers\.1\.mlp\.up_proj\.weight"):
        load_hf_params(path, DecoderConfig.from_hf(path))


def test_unexpected_tensor_is_named(broken):
    path, tensors = broken
    tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros(64, np.float32)
    _rewrite(path, tensors)
    with pytest.raises(ValueError, match=r"unexpected tensor.*q_proj\.bias"):
        load_hf_params(path, DecoderConfig.from_hf(path))


def test_shape_mismatch_is_named(broken):
    path, tensors = broken
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((48, 64), np.float32)
    _rewrite(path, tensors)
    with pytest.raises(ValueError, match=r"k_proj\.weight has shape \[48, 64\].*\[32, 64\]"):
        load_hf_params(path, DecoderConfig.from_hf(path))


def test_truncated_file_is_reported(broken):
    path, _ = broken
    file = os.path.join(path, "model.safetensors")
    size = os.path.getsize(file)
    with open(file, "r+b") as f:
        f.truncate(size - 1000)
    with pytest.raises(ValueError, match="truncated"):
        load_hf_params(path, DecoderConfig.from_hf(path))


def test_unsupported_architecture_and_rope_are_named(broken):
    path, _ = broken
    cfg = json.load(open(os.path.join(path, "config.json")))
    with pytest.raises(ValueError, match="LlamaForCausalLM"):
        DecoderConfig.from_hf({**cfg, "architectures": ["LlamaForCausalLM"]})
    with pytest.raises(ValueError, match="longrope"):
        DecoderConfig.from_hf({**cfg, "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0}})


def test_missing_weights_dir_is_reported(tmp_path):
    config = DecoderConfig.from_hf(make_tiny_hf_checkpoint(tmp_path / "ck"))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hf_params(tmp_path, config)


def test_failed_export_leaves_no_output(untied, tmp_path):
    config = DecoderConfig.from_hf(untied)
    params = load_hf_params(untied, config)
    wrong = DecoderConfig.from_hf(untied, tie_word_embeddings=True)  # leaf count mismatch mid-export
    with pytest.raises(ValueError):
        save_hf_params(params, wrong, tmp_path / "out")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "rope",
    [
        None,
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        {"rope_type": "linear", "factor": 2.0},
    ],
)
def test_exported_config_reads_back_through_transformers(rope):
    """Our config.json (old-style rope_theta/rope_scaling) means the same model to transformers."""
    from transformers import Qwen3Config as HFConfig

    ours = DecoderConfig.from_hf({**get_preset("qwen3-4b-instruct-2507").to_hf(), "rope_scaling": rope})
    theirs = HFConfig(**ours.to_hf())
    assert theirs.rope_parameters["rope_theta"] == ours.rope_theta
    assert theirs.rope_parameters["rope_type"] == (rope or {}).get("rope_type", "default")
    assert DecoderConfig.from_hf(theirs.to_dict()) == ours


def test_each_device_reads_only_its_shard(untied, monkeypatch):
    """With fsdp=2 x tensor=4 no read covers a whole tensor: a 32B model never needs a full host copy."""
    from microcoder_jax.models import hf

    reads = []
    original = hf._read_block

    def spy(sl, layout, shape, index):
        block = original(sl, layout, shape, index)
        reads.append((tuple(sl.get_shape()), block.size))
        return block

    monkeypatch.setattr(hf, "_read_block", spy)
    config = DecoderConfig.from_hf(untied)
    load_hf_params(untied, config, mesh=shd.make_mesh(fsdp=2, tensor=4))
    big = [(shape, size) for shape, size in reads if len(shape) == 2]  # every matrix is split 2 or 8 ways
    assert big and all(size * 2 <= np.prod(shape) for shape, size in big)
    q = [size for shape, size in reads if shape == (64, 64)]  # q_proj / o_proj: 1/8 each
    assert q and max(q) == 64 * 64 // 8
