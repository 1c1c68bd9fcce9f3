"""Prefill throughput: our jitted Qwen3 forward vs transformers' PyTorch Qwen3, same weights and shapes.

    python benchmarks/forward.py [--layers 2] [--vocab 16384] [--batch 4] [--seq 512] [--reps 3]

Qwen3-0.6B layer shapes (hidden 1024, 16 heads / 8 kv heads x 128, MLP 3072) cut to a few layers,
fp32 in both frameworks, on whatever this machine has. Also measures the machine's jitted fp32
matmul peak and reports our achieved FLOP/s as a fraction of it. Prints a table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def _best_times(fns, reps: int) -> list[float]:
    """Best wall time of each function; runs are interleaved so load from other processes hits all alike."""
    for fn in fns:
        fn()  # warm-up / compile
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [min(ts) for ts in times]


def matmul_peak_fn(n: int):
    """One large jitted fp32 matmul (the machine's practical peak for this workload) and its FLOPs."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    return (lambda: mm(a, b).block_until_ready()), 2 * n**3


def forward_flops(config, batch: int, seq: int) -> float:
    """Matmul FLOPs of one prefill: projections, MLP and LM head, plus scores and values over the full
    T x T (what the einsum path computes); the embedding lookup and norms are not counted."""
    c = config
    attn_params = c.hidden_size * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads)  # q, k, v, o
    per_layer = attn_params + 3 * c.hidden_size * c.intermediate_size
    matmul_params = c.num_layers * per_layer + c.vocab_size * c.hidden_size
    attention = 4 * batch * seq * seq * c.num_heads * c.head_dim * c.num_layers
    return 2 * matmul_params * batch * seq + attention


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=16384, help="shrunk from 151936 to keep the run short")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()

    import torch

    from microcoder_jax.models import DecoderConfig, forward
    from microcoder_jax.models.hf import load_hf_params
    from tiny_checkpoint import make_tiny_hf_model

    torch.set_num_threads(args.threads)
    hf_shape = dict(
        vocab_size=args.vocab,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=args.layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
    )
    model = make_tiny_hf_model(seed=0, **hf_shape)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        config = DecoderConfig.from_hf(tmp, dtype="float32", attention="xla")
        params = load_hf_params(tmp, config)

    ids = np.random.RandomState(0).randint(0, args.vocab, (args.batch, args.seq))
    jax_ids = jnp.asarray(ids)
    fwd = jax.jit(lambda p, x: forward(p, config, x)[0])
    torch_ids = torch.tensor(ids)
    model.config._attn_implementation = "sdpa"

    def run_torch():
        with torch.inference_mode():
            model(torch_ids, logits_to_keep=0)

    peak_fn, peak_flops = matmul_peak_fn(4096)
    ours, theirs, t_peak = _best_times(
        [lambda: fwd(params, jax_ids).block_until_ready(), run_torch, peak_fn], args.reps
    )
    peak = peak_flops / t_peak
    with torch.inference_mode():
        ref = model(torch_ids[:1, :64]).logits.numpy()
    got = np.asarray(fwd(params, jax_ids[:1, :64]))
    rel = float(np.abs(got - ref).max() / np.abs(ref).max())

    flops = forward_flops(config, args.batch, args.seq)
    tokens = args.batch * args.seq
    print(
        f"\nQwen3-0.6B shapes, {args.layers} layers, vocab {args.vocab} (real: 151936), batch {args.batch} x "
        f"{args.seq} tokens, fp32, {jax.devices()[0].platform} x{jax.device_count()}, torch threads "
        f"{torch.get_num_threads()}, max rel logit diff {rel:.1e}\n"
    )
    print(f"| {'implementation':<24} | {'time (s)':>9} | {'tokens/s':>9} | {'GFLOP/s':>8} | {'% matmul peak':>13} |")
    print(f"|{'-' * 26}|{'-' * 11}|{'-' * 11}|{'-' * 10}|{'-' * 15}|")
    for name, t in (("microcoder_jax (jit)", ours), ("transformers (PyTorch)", theirs)):
        rate = flops / t
        print(f"| {name:<24} | {t:>9.3f} | {tokens / t:>9.0f} | {rate / 1e9:>8.1f} | {100 * rate / peak:>12.1f}% |")
    print(f"| {'jitted fp32 matmul 4096²':<24} | {'':>9} | {'':>9} | {peak / 1e9:>8.1f} | {100.0:>12.1f}% |")
    print(f"\nspeed-up vs PyTorch: {theirs / ours:.2f}x; model FLOPs per prefill: {flops / 1e9:.1f} G")


if __name__ == "__main__":
    main()
