"""Sampling throughput: our jitted sampler vs transformers `generate` (PyTorch, KV cache on).

Both run the same random weights on the same shapes: a Qwen3-0.6B-shaped model (hidden 1024,
16 heads / 8 KV heads of 128, MLP 3072) cut to `--layers` layers (default 2) with the vocabulary
shrunk to `--vocab` (default 32768 instead of 151936) so that the CPU run stays within a few
minutes, 8 prompts x 4 samples, 256 new tokens, pure sampling at T = 1 with no stop tokens so
every row generates all 256. Columns: generated tokens per second of a whole call (prefill +
decode, after compilation); decode-only tokens per second (the call minus a prefill-only run:
for us `_prefill` on the same inputs, for transformers a 1-token generate); the prefill seconds;
JAX's compile time (trace + lower + XLA compile, from jax.monitoring). transformers prefills all
prompts x samples rows; we prefill each prompt once and share its cache over its G samples. The
timed calls alternate between the sides (`--repeats` rounds, best of each side), so load from
other processes on a shared machine hits both alike.

    python benchmarks/sample.py                       # CPU, fp32 on both sides
    python benchmarks/sample.py --dtype bfloat16 --vocab 151936 --layers 28 --skip-torch  # accelerator
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax
import numpy as np

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


def _hf_model(layers: int, vocab: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab, hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                         tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model


def _prompts(num: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=int(n)).tolist() for n in rng.integers(40, 120, size=num)]


def bench_jax(path, prompts, args):
    """Compile and warm up; return (row without timings, a timed full call -> (seconds, tokens))."""
    from microcoder_jax.models import Qwen3Config
    from microcoder_jax.models.hf import load_hf_params
    from microcoder_jax.sampling import sampler
    from microcoder_jax.sampling.sampler import generate

    config = Qwen3Config.from_hf(path, dtype=args.dtype)
    params = load_hf_params(path, config)
    compile_s = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: compile_s.append(secs) if event in COMPILE_EVENTS else None)
    seeds = iter(range(1 << 30))

    def run():
        start = time.perf_counter()
        out = generate(params, config, prompts, num_samples=args.samples, temperature=1.0,
                       max_new_tokens=args.new_tokens, stop_token_ids=[], pad_id=0,
                       rng=jax.random.key(next(seeds)))
        return time.perf_counter() - start, int(out.lengths.sum())

    run()
    compile_time = sum(compile_s)
    ids, mask = sampler.left_pad(prompts, sampler.prompt_bucket(max(map(len, prompts))), 0)
    prefill = []
    for _ in range(args.repeats):  # the same (already compiled) prefill program generate ran
        start = time.perf_counter()
        jax.block_until_ready(sampler._prefill(params, ids, mask, config=config, num_samples=args.samples))
        prefill.append(time.perf_counter() - start)
    return dict(name=f"jax generate ({args.dtype})", compile=compile_time, prefill=min(prefill)), run


def bench_torch(model, prompts, args):
    """Warm up; return (row without timings, a timed full call -> (seconds, tokens))."""
    import torch

    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = dict(attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
              num_return_sequences=args.samples, use_cache=True, pad_token_id=0, eos_token_id=None)

    def run(new_tokens=args.new_tokens):
        with torch.inference_mode():
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        return time.perf_counter() - start, (out.shape[1] - width) * out.shape[0]

    prefill = min(run(1)[0] for _ in range(args.repeats))  # also the warm-up
    return dict(name=f"torch {torch.__version__} generate (float32, {torch.get_num_threads()} threads)",
                compile=None, prefill=prefill), run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--dtype", default="float32", help="JAX compute dtype (the torch side stays fp32)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    model = _hf_model(args.layers, args.vocab)
    prompts = _prompts(args.prompts, args.vocab)
    sides = []
    with tempfile.TemporaryDirectory() as path:
        model.save_pretrained(path)
        sides.append(bench_jax(path, prompts, args))
    if not args.skip_torch:
        sides.append(bench_torch(model, prompts, args))
    times = [[] for _ in sides]
    for _ in range(args.repeats):  # round-robin, so load that comes and goes hits every side alike
        for side, (_, run) in zip(times, sides):
            side.append(run())
    rows = [dict(row, seconds=min(t for t, _ in timed), tokens=timed[0][1]) for (row, _), timed in zip(sides, times)]

    print(f"\nQwen3-0.6B shape, {args.layers} layers, vocab {args.vocab}; {args.prompts} prompts x {args.samples} "
          f"samples x {args.new_tokens} new tokens; jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'implementation':<50} {'tokens/s':>9} {'decode tok/s':>13} {'call s':>7} {'prefill s':>10} "
          f"{'compile s':>10} {'speed-up':>9} {'decode speed-up':>16}")
    rate = lambda r: r["tokens"] / r["seconds"]  # noqa: E731
    decode = lambda r: r["tokens"] * (1 - 1 / args.new_tokens) / (r["seconds"] - r["prefill"])  # noqa: E731
    base = rows[-1]
    for r in rows:
        comp = f"{r['compile']:.1f}" if r["compile"] is not None else "-"
        print(f"{r['name']:<50} {rate(r):>9.1f} {decode(r):>13.1f} {r['seconds']:>7.2f} {r['prefill']:>10.2f} "
              f"{comp:>10} {rate(r) / rate(base):>8.2f}x {decode(r) / decode(base):>15.2f}x")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
