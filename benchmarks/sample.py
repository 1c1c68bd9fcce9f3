"""Sampling throughput: the paged sampler, today's static sampler and transformers `generate`.

All run the same random weights on the same shapes: a Qwen3-0.6B-shaped model (hidden 1024,
16 heads / 8 KV heads of 128, MLP 3072) cut to `--layers` layers (default 2) with the vocabulary
shrunk to `--vocab` (default 32768 instead of 151936) so that the CPU run stays within minutes,
pure sampling at T = 1 with no stop tokens. Two workloads:
- uniform: 8 prompts x 4 samples, every row generates all 256 new tokens;
- skewed: 16 prompts x 4 samples, each row with its own length drawn from a lognormal (mean about a
  third of the 256-token cap, ~5% at the cap), standing in for RL responses that stop at different
  times. The paged sampler stops each row at its length (per-row caps are data); a static batch
  (today's sampler, transformers) computes every row until the longest one is done, so for them
  the useful tokens are the rows' lengths and the work is rows x cap.
Columns: useful tokens per second of a whole call (prefill + decode, after compilation); the
useful-token fraction (generated tokens / row-steps computed); attention key slots read per
generated token and layer (the paged sampler counts its reads; today's sampler reads each prompt
once per prompt plus each row's decode phase cache; transformers reads every row's full cache);
JAX's compile time (trace + lower + XLA compile, from jax.monitoring). The timed calls alternate
between the sides (`--repeats` rounds, best of each side), so load from other processes on a
shared machine hits all alike; the load average is printed with the table.

    python benchmarks/sample.py                       # CPU, fp32 on all sides
    python benchmarks/sample.py --dtype bfloat16 --vocab 151936 --layers 28 --skip-torch  # accelerator
    python benchmarks/sample.py --model smollm2 --samples 8 --uniform-prompts 4 --skewed-prompts 4 \
        --new-tokens 160      # the real SmolLM2-135M-Instruct at configs/smollm2.py's RL batch shape

`--model` (a Hugging Face folder, a .gguf file or `smollm2`) runs real weights instead of the
random Qwen3 shape, on both sides; prompts stay random token ids of the model's vocabulary.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax
import numpy as np

COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def _hf_model(layers: int, vocab: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model


def _prompts(num: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=int(n)).tolist() for n in rng.integers(40, 120, size=num)]


def _lognormal_lengths(rows: int, cap: int, seed: int = 0) -> np.ndarray:
    """Per-row lengths: lognormal with mean cap / 3 before clipping and P(length >= cap) = 5%."""
    sigma = 0.932  # solves ln 3 + sigma^2 / 2 = 1.645 sigma (the 95% quantile at the cap)
    mu = np.log(cap / 3) - sigma**2 / 2
    lengths = np.random.default_rng(seed).lognormal(mu, sigma, rows)
    return np.clip(np.ceil(lengths), 1, cap).astype(np.int32)


def _compile_listener():
    compile_s = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: compile_s.append(secs) if event in COMPILE_EVENTS else None
    )
    return compile_s


def bench_jax(path, prompts, lengths, args, paged: bool, compile_s: list, slots: int = 0):
    """Compile and warm up; return (row without timings, a timed full call -> (seconds, useful tokens))."""
    from microcoder_jax.models import DecoderConfig
    from microcoder_jax.models.hf import load_hf_params
    from microcoder_jax.sampling import static_sampler as sampler
    from microcoder_jax.sampling.paged_sampler import generate_paged

    config = DecoderConfig.from_hf(path, dtype=args.dtype)
    params = load_hf_params(path, config)
    seeds = iter(range(1 << 30))
    rows, cap = len(lengths), args.new_tokens
    kw = dict(num_samples=args.samples, temperature=1.0, max_new_tokens=cap, stop_token_ids=[], pad_id=0)
    stats = {}

    def run():
        start = time.perf_counter()
        if paged:
            out = generate_paged(
                params,
                config,
                prompts,
                rng=jax.random.key(next(seeds)),
                caps=lengths,
                slots=slots,
                page_size=args.page_size,
                refill_every=args.refill_every,
                stats=stats,
                **kw,
            )
        else:
            out = sampler.generate(params, config, prompts, rng=jax.random.key(next(seeds)), **kw)
        seconds = time.perf_counter() - start
        assert (np.minimum(out.lengths, lengths) == lengths).all()
        return seconds, int(lengths.sum())

    before = sum(compile_s)
    run()
    compile_time = sum(compile_s) - before
    if paged:
        useful = stats["generated"] / (stats["slot_steps"] + rows)  # + each row's first token, from prefill
        reads = stats["reads"] / stats["generated"]
        name = f"jax paged (S={slots}, pages {args.page_size}, refill {args.refill_every})"
    else:
        width = sampler.prompt_bucket(max(map(len, prompts)))
        ends = np.asarray(sampler.phase_ends(cap, 4))
        per_step = len(prompts) * width + rows * ends[np.searchsorted(ends, np.arange(1, cap + 1))]
        useful, reads = lengths.sum() / (rows * cap), per_step.sum() / lengths.sum()
        name = "jax static generate (today)"
    return dict(name=f"{name} ({args.dtype})", compile=compile_time, useful=useful, reads=reads), run


def bench_torch(model, prompts, lengths, args):
    """Warm up; return (row without timings, a timed full call -> (seconds, useful tokens))."""
    import torch

    width, cap = max(map(len, prompts)), args.new_tokens
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = dict(
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_return_sequences=args.samples,
        use_cache=True,
        pad_token_id=0,
        eos_token_id=None,
    )

    def run(new_tokens=cap):
        with torch.inference_mode():
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        return time.perf_counter() - start, int(lengths.sum())

    run(1)  # warm-up
    rows = len(lengths)
    reads = rows * (width + np.arange(1, cap + 1)).sum() / lengths.sum()
    return dict(
        name=f"torch {torch.__version__} generate (float32, {torch.get_num_threads()} threads)",
        compile=None,
        useful=lengths.sum() / (rows * cap),
        reads=reads,
    ), run


def run_workload(name, model, path, args, num_prompts, lengths, slots, compile_s):
    prompts = _prompts(num_prompts, args.vocab)
    sides = [
        bench_jax(path, prompts, lengths, args, paged=True, compile_s=compile_s, slots=slots),
        bench_jax(path, prompts, lengths, args, paged=False, compile_s=compile_s),
    ]
    if not args.skip_torch:
        sides.append(bench_torch(model, prompts, lengths, args))
    times = [[] for _ in sides]
    for _ in range(args.repeats):  # round-robin, so load that comes and goes hits every side alike
        for side, (_, run) in zip(times, sides):
            side.append(run())
    rows = [dict(row, seconds=min(t for t, _ in timed), tokens=timed[0][1]) for (row, _), timed in zip(sides, times)]
    load = os.getloadavg()[0]
    print(
        f"\n{name}: {num_prompts} prompts x {args.samples} samples, cap {args.new_tokens}, mean length "
        f"{lengths.mean():.1f}, {np.mean(lengths == args.new_tokens):.0%} at the cap; load average {load:.1f}"
    )
    print(
        f"{'implementation':<58} {'tokens/s':>9} {'call s':>7} {'useful':>7} {'reads/token':>12} "
        f"{'compile s':>10} {'vs today':>9}"
    )
    rate = lambda r: r["tokens"] / r["seconds"]  # noqa: E731
    today = rows[1]
    for r in rows:
        comp = f"{r['compile']:.1f}" if r["compile"] is not None else "-"
        print(
            f"{r['name']:<58} {rate(r):>9.1f} {r['seconds']:>7.2f} {r['useful']:>7.1%} {r['reads']:>12.0f} "
            f"{comp:>10} {rate(r) / rate(today):>8.2f}x"
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="real weights: a HF folder, a .gguf file or 'smollm2'")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--uniform-prompts", type=int, default=8)
    parser.add_argument("--skewed-prompts", type=int, default=16)
    parser.add_argument("--workloads", default="uniform,skewed")
    parser.add_argument("--uniform-slots", type=int, default=0, help="paged sampler slots (default: all rows)")
    parser.add_argument("--skewed-slots", type=int, default=0, help="paged sampler slots (default: rows / 4)")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--refill-every", type=int, default=4)
    parser.add_argument("--dtype", default="float32", help="JAX compute dtype (the torch side stays fp32)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    compile_s = _compile_listener()
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            from transformers import AutoModelForCausalLM

            from microcoder_jax.models.gguf import resolve_model_path

            path = resolve_model_path(args.model)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            args.vocab = model.config.vocab_size
            shape = (
                f"{os.path.basename(path.rstrip('/'))} ({model.config.num_hidden_layers} layers, vocab {args.vocab})"
            )
        else:
            path, model = tmp, _hf_model(args.layers, args.vocab)
            model.save_pretrained(path)
            shape = f"Qwen3-0.6B shape, {args.layers} layers, vocab {args.vocab}"
        print(f"{shape}; jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs")
        results = {}
        for name in args.workloads.split(","):
            if name == "uniform":
                n = args.uniform_prompts
                lengths = np.full(n * args.samples, args.new_tokens, np.int32)
                slots = args.uniform_slots or len(lengths)
            elif name == "skewed":
                n = args.skewed_prompts
                lengths = _lognormal_lengths(n * args.samples, args.new_tokens)
                slots = args.skewed_slots or max(1, len(lengths) // 4)
            else:
                parser.error(f"unknown workload {name!r}; use uniform and/or skewed")
            results[name] = run_workload(name, model, path, args, n, lengths, slots, compile_s)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
