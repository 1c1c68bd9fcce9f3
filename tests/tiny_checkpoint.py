"""Tiny random Qwen3 (or, with family="qwen2", Qwen2) checkpoints in Hugging Face format, for tests (no downloads).

from tiny_checkpoint import make_tiny_hf_checkpoint
path = make_tiny_hf_checkpoint(tmp_path / "hf", seed=0, tie_word_embeddings=False)
"""

from __future__ import annotations

import os

TINY_HF_CONFIG = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def make_tiny_hf_model(seed: int = 0, family: str = "qwen3", **config_overrides):
    """A transformers ``Qwen3ForCausalLM`` (or ``Qwen2ForCausalLM``) in fp32 with random weights (norm
    weights and biases randomised too)."""
    import torch
    import transformers

    Config, Model = (
        (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)
        if family == "qwen3"
        else (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)
    )
    kwargs = {**TINY_HF_CONFIG, **config_overrides}
    if family == "qwen2":  # Qwen2 has no head_dim field: hidden / heads
        kwargs.pop("head_dim", None)
    if "rope_scaling" in kwargs or "rope_theta" in kwargs:  # transformers 5 spells it rope_parameters
        scaling = dict(kwargs.pop("rope_scaling", None) or {})
        scaling.setdefault("rope_type", scaling.pop("type", "default"))
        scaling["rope_theta"] = kwargs.pop("rope_theta", 10000.0)
        kwargs["rope_parameters"] = scaling
    config = Config(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Model(config).to(torch.float32).eval()
    with torch.no_grad():  # HF inits norms to ones; random norms make the parity tests meaningful
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    return model


def make_tiny_hf_checkpoint(path, seed: int = 0, family: str = "qwen3", **config_overrides):
    """Save a tiny random fp32 Qwen3 (or Qwen2) as safetensors (+ config.json) under ``path``; returns ``path``."""
    model = make_tiny_hf_model(seed, family, **config_overrides)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    return path


def saved_tiny_model(path, seed: int = 0, **config_overrides):
    """Save a tiny model at `path` and load it back as ours: (transformers model, fp32 DecoderConfig, params)."""
    from microcoder_jax.models import DecoderConfig, load_hf_params

    hf = make_tiny_hf_model(seed=seed, **config_overrides)
    hf.save_pretrained(path)
    config = DecoderConfig.from_hf(path, dtype="float32")
    return hf, config, load_hf_params(path, config)


def hf_greedy(hf, prompt, max_new_tokens: int, stop_ids, pad_id: int) -> list[int]:
    """transformers' greedy continuation of one unpadded prompt (the reference for our samplers)."""
    import torch

    ids = torch.tensor([list(prompt)])
    out = hf.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=list(stop_ids),
        pad_token_id=pad_id,
    )
    return out[0, len(prompt) :].tolist()
