"""Train-step throughput: our jitted RL step vs the same loss and update in transformers + PyTorch.

Both sides run the same random weights: a Qwen3-0.6B-shaped model (hidden 1024, 16 heads / 8 KV
heads of 128, MLP 3072, tied embeddings) cut to `--layers` layers (default 2) with the vocabulary
cut to `--vocab` (default 16384 instead of 151936) so the CPU run stays short. One step =
token-mean clipped-surrogate loss at per-row temperatures over `--rows` x `--seq` tokens, gradients
accumulated over micro-batches of `--micro` rows, global-norm clipping, one AdamW update; old
log-probs are given (not recomputed) on both sides. Columns: tokens/s (all rows x seq positions
per step, after compilation / warm-up), model FLOP/s (6 x matmul params x tokens + attention,
recompute not counted) as a fraction of this machine's measured jitted f32 matmul peak (best
of the measurements taken between rounds), and peak resident memory of each side's own process
(ru_maxrss; includes the runtime itself). Each side lives in its own process and the steps are
timed round-robin (one step of each side per round, median over rounds), so load from other
processes on a shared machine hits every side alike.
JAX runs with remat "full" (the training default) and "none"; PyTorch with and without
per-layer gradient checkpointing (the like-for-like pairs).

`--workload skewed` times our step and the old-log-prob pass on padded vs packed rows
(rl.packing) instead, side by side in one run: response lengths from a lognormal with mean 45% of
the cap and 5% at the cap, prompts spread over the upper half of a bucket of seq/4 tokens; the
columns are useful (real) tokens/s, and each side's first-step loss and log-probs checksum show
both compute the same thing.

    python benchmarks/train_step.py                      # CPU, fp32 on both sides
    python benchmarks/train_step.py --dtype bfloat16 --layers 28 --vocab 151936 --skip-torch
    python benchmarks/train_step.py --workload skewed --rows 32 --seq 512 --micro 2
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM = 1024, 3072, 16, 8, 128


def model_flops_per_step(layers: int, vocab: int, rows: int, seq: int) -> float:
    """Forward + backward model FLOPs: 6 per matmul parameter per token, plus causal attention."""
    matmul_params = layers * (HIDDEN * HEAD_DIM * (2 * HEADS + 2 * KV_HEADS) + 3 * HIDDEN * INTER)
    matmul_params += HIDDEN * vocab  # LM head
    attention = layers * 2 * 2 * HEADS * HEAD_DIM * seq / 2  # QK^T and PV, half the keys (causal)
    return 3 * rows * seq * (2 * matmul_params + attention)


def make_batch(rows: int, seq: int, vocab: int, seed: int = 0) -> dict:
    """Left-padded prompts of up to seq/4 tokens, right-padded responses, random everything else."""
    rng = np.random.default_rng(seed)
    prompt = seq // 4
    tokens = rng.integers(3, vocab, (rows, seq)).astype(np.int32)
    attn, resp = np.zeros((rows, seq), np.int32), np.zeros((rows, seq), np.int32)
    lengths = rng.integers(seq // 2, seq - prompt + 1, rows).astype(np.int32)
    for i in range(rows):
        start = rng.integers(0, prompt // 2)
        attn[i, start : prompt + lengths[i]] = 1
        resp[i, prompt : prompt + lengths[i]] = 1
    return {
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp,
        "rewards": rng.integers(0, 2, rows).astype(np.float32),
        "passed": rng.random(rows) < 0.5,
        "no_code": np.zeros(rows, bool),
        "truncated": lengths == seq - prompt,
        "response_lengths": lengths,
        "temperature": np.full(rows, 1.2, np.float32),
        "old_logprobs": rng.normal(-5.0, 0.1, (rows, seq)).astype(np.float32),
    }


def lognormal_lengths(rng, n: int, cap: int, mean_frac: float = 0.45, at_cap: float = 0.05):
    """n lengths in [1, cap]: a lognormal with P(X >= cap) = at_cap and E[min(X, cap)] = mean_frac cap."""
    z = math.sqrt(2) * _erfinv(1 - 2 * at_cap)  # the normal quantile of 1 - at_cap
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    clipped_mean = lambda s: math.exp(-z * s + s * s / 2) * phi(z - s) + at_cap  # noqa: E731  (in units of cap)
    sigma = min((i / 1000 for i in range(1, 3000)), key=lambda s: abs(clipped_mean(s) - mean_frac))
    x = rng.lognormal(math.log(cap) - z * sigma, sigma, n)
    return np.clip(np.round(x), 1, cap).astype(np.int32)


def _erfinv(y: float) -> float:
    lo, hi = -6.0, 6.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid) < y else (lo, mid)
    return (lo + hi) / 2


def skewed_batch(rows: int, seq: int, vocab: int, seed: int = 0) -> dict:
    """make_batch's layout with skewed lengths: prompts in [bucket/2, bucket], lognormal responses."""
    rng = np.random.default_rng(seed)
    prompt = seq // 4
    batch = make_batch(rows, seq, vocab, seed)
    lengths = lognormal_lengths(rng, rows, seq - prompt)
    attn, resp = np.zeros((rows, seq), np.int32), np.zeros((rows, seq), np.int32)
    for i in range(rows):
        attn[i, prompt - rng.integers(prompt // 2, prompt + 1) : prompt + lengths[i]] = 1
        resp[i, prompt : prompt + lengths[i]] = 1
    return {
        **batch,
        "attention_mask": attn,
        "response_mask": resp,
        "response_lengths": lengths,
        "truncated": lengths == seq - prompt,
    }


def build_skewed(args, path: str, packed: bool):
    """Our step and old-log-prob pass on the skewed batch, padded or packed; (info, step)."""
    import jax

    from microcoder_jax.models import DecoderConfig
    from microcoder_jax.models.hf import load_hf_params
    from microcoder_jax.rl import packing
    from microcoder_jax.rl.logprobs import compute_logprobs
    from microcoder_jax.rl.presets import make_rl_config
    from microcoder_jax.rl.step import init_train_state, make_train_step

    mc = DecoderConfig.from_hf(path, dtype=args.dtype, remat="full")
    cfg = make_rl_config(
        "dapo",
        truncation="none",
        group_size=args.rows // 2,
        num_minibatches=1,
        micro_batch_size=args.micro,
        logprob_chunk=args.chunk,
        learning_rate=1e-5,
        packing=packed,
    )
    params = load_hf_params(path, mc)
    state = [init_train_state(params, cfg)]
    host = skewed_batch(args.rows, args.seq, args.vocab)
    batch = dict(host)
    lp_pack, lp_micro = packing.for_logprobs(host["attention_mask"], cfg) if packed else (None, args.micro)
    if packed:
        batch["packing"] = packing.for_step(host["attention_mask"], cfg)
    batch = jax.device_put(batch)
    t0 = time.perf_counter()
    compiled = make_train_step(mc, cfg).lower(state[0], batch).compile()
    lp_args = (params, mc, batch["tokens"], batch["attention_mask"], batch["temperature"])
    lp_kw = dict(chunk=args.chunk, micro_batch=lp_micro, packing=lp_pack)
    logprobs = compute_logprobs.jitted.lower(*lp_args, **lp_kw).compile()
    run_logprobs = lambda: logprobs(params, *lp_args[2:], packing=lp_pack)  # noqa: E731
    lp = np.asarray(run_logprobs())
    useful = int(host["attention_mask"].sum())
    computed = batch["packing"].src.size if packed else host["attention_mask"].size
    info = {
        "name": "packed" if packed else "padded",
        "compile_s": time.perf_counter() - t0,
        "useful_tokens": useful,
        "computed_tokens": int(computed),
        "logprob_checksum": float((lp * host["response_mask"]).sum()),
    }

    def step():
        t = time.perf_counter()
        state[0], metrics = compiled(state[0], batch)
        jax.block_until_ready(metrics)
        t_step = time.perf_counter() - t
        info.setdefault("first_loss", float(metrics["loss"]))
        t = time.perf_counter()
        jax.block_until_ready(run_logprobs())
        return [t_step, time.perf_counter() - t]

    return info, step


def hf_model(layers: int, vocab: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        tie_word_embeddings=True,
        max_position_embeddings=40960,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model


def matmul_peak(n: int = 2048, reps: int = 10) -> float:
    """Best f32 FLOP/s of one jitted n x n matmul on this machine."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(reps))
    return 2 * n**3 / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def build_jax(args, path: str, remat: str):
    """Compile our step; returns (info, run-one-step callable)."""
    import jax

    from microcoder_jax.models import DecoderConfig
    from microcoder_jax.models.hf import load_hf_params
    from microcoder_jax.rl.presets import make_rl_config
    from microcoder_jax.rl.step import init_train_state, make_train_step

    mc = DecoderConfig.from_hf(path, dtype=args.dtype, remat=remat)
    cfg = make_rl_config(
        "dapo",
        truncation="none",
        group_size=args.rows // 2,
        num_minibatches=1,
        micro_batch_size=args.micro,
        logprob_chunk=args.chunk,
        learning_rate=1e-5,
    )
    state = [init_train_state(load_hf_params(path, mc), cfg)]
    batch = jax.device_put(make_batch(args.rows, args.seq, args.vocab))
    t0 = time.perf_counter()
    compiled = make_train_step(mc, cfg).lower(state[0], batch).compile()
    info = {
        "name": f"jax (remat={remat})",
        "compile_s": time.perf_counter() - t0,
        "xla_temp_mb": compiled.memory_analysis().temp_size_in_bytes / 2**20,
    }

    def step():
        state[0], metrics = compiled(state[0], batch)
        jax.block_until_ready(metrics)

    return info, step


def build_torch(args, path: str, checkpointing: bool):
    """The same loss and update in transformers + PyTorch; returns (info, run-one-step callable)."""
    import torch
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train()
    if checkpointing:  # per-layer recompute, the counterpart of our remat="full"
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), weight_decay=0.01)
    b = {k: torch.from_numpy(v) for k, v in make_batch(args.rows, args.seq, args.vocab).items()}
    position_ids = (b["attention_mask"].cumsum(-1) - 1).clamp(min=0)

    def step():
        mask = b["response_mask"][:, 1:].float()
        total = mask.sum()
        for s in range(0, args.rows, args.micro):
            sl = slice(s, s + args.micro)
            logits = (
                model(input_ids=b["tokens"][sl], attention_mask=b["attention_mask"][sl], position_ids=position_ids[sl])
                .logits[:, :-1]
                .float()
            )
            logp = torch.log_softmax(logits / b["temperature"][sl, None, None], dim=-1)
            logp = logp.gather(-1, b["tokens"][sl, 1:, None].long())[..., 0]
            adv = (b["rewards"][sl] - 0.5)[:, None]
            ratio = torch.exp(logp - b["old_logprobs"][sl, 1:])
            loss = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.28) * adv)
            ((loss * mask[sl]).sum() / total).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    name = "torch (checkpointing)" if checkpointing else "transformers + torch"
    return {"name": name}, step


def child(args) -> None:
    """Build one side, warm it up, then time one step per "step" line read from stdin."""
    if args.framework.startswith("torch"):
        info, step = build_torch(args, args.path, checkpointing=args.framework == "torch:ckpt")
    elif args.framework.startswith("skew"):
        info, step = build_skewed(args, args.path, packed=args.framework == "skew:packed")
    else:
        info, step = build_jax(args, args.path, args.framework.split(":")[1])
    step()
    print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        times = step() if args.framework.startswith("skew") else [_timed(step)]
        print("TIME " + " ".join(map(str, times)), flush=True)
    info["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(info), flush=True)


def _read(proc, prefix: str) -> str:
    for line in proc.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    proc.err.seek(0)
    sys.exit(f"a benchmark child exited early:\n{proc.err.read()[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--workload", choices=("uniform", "skewed"), default="uniform")
    p.add_argument("--framework", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.framework:
        return child(args)

    with tempfile.TemporaryDirectory() as path:
        hf_model(args.layers, args.vocab).save_pretrained(path)
        frameworks = ["jax:full", "jax:none"] + ([] if args.skip_torch else ["torch:ckpt", "torch"])
        if args.workload == "skewed":
            frameworks = ["skew:padded", "skew:packed"]
        procs = []
        for fw in frameworks:  # one process each (own peak memory), built one after the other
            cmd = [sys.executable, __file__, "--framework", fw, "--path", path] + sys.argv[1:]
            err = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty child never blocks
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True))
            procs[-1].err = err
            _read(procs[-1], "READY")
        # Round-robin timing: load from other processes on the machine hits every side alike.
        times = [[] for _ in procs]
        peaks = []
        for _ in range(args.steps):
            peaks.append(matmul_peak(reps=3))
            for proc, t in zip(procs, times):
                proc.stdin.write("step\n")
                proc.stdin.flush()
                t.append([float(x) for x in _read(proc, "TIME").split()])
        results = []
        for proc, t in zip(procs, times):
            proc.stdin.write("done\n")
            proc.stdin.flush()
            results.append(
                {
                    **json.loads(_read(proc, "RESULT")),
                    "step_s": float(np.median([x[0] for x in t])),
                    "logprob_s": float(np.median([x[-1] for x in t])),
                }
            )
            proc.wait()
    if args.workload == "skewed":
        return report_skewed(args, results)
    peak = max(peaks)
    flops = model_flops_per_step(args.layers, args.vocab, args.rows, args.seq)
    tokens = args.rows * args.seq
    print(
        f"\nQwen3-0.6B shape, {args.layers} layers, vocab {args.vocab}, {args.rows} rows x "
        f"{args.seq} tokens, micro-batch {args.micro}, {args.dtype}; "
        f"jitted f32 matmul peak {peak / 1e9:.1f} GFLOP/s; model FLOPs/step {flops / 1e9:.1f} G"
    )
    print(
        f"{'':24s} {'step s':>8s} {'tokens/s':>9s} {'GFLOP/s':>8s} {'of peak':>8s} "
        f"{'peak RSS MB':>11s} {'XLA temp MB':>11s} {'compile s':>9s}"
    )
    for r in results:
        print(
            f"{r['name']:24s} {r['step_s']:8.2f} {tokens / r['step_s']:9.0f} "
            f"{flops / r['step_s'] / 1e9:8.1f} {flops / r['step_s'] / peak:8.1%} "
            f"{r['peak_rss_mb']:11.0f} {r.get('xla_temp_mb', float('nan')):11.0f} "
            f"{r.get('compile_s', float('nan')):9.1f}"
        )


def report_skewed(args, results) -> None:
    pad, pack = results
    useful = pad["useful_tokens"]
    print(
        f"\nQwen3-0.6B shape, {args.layers} layers, vocab {args.vocab}, {args.rows} rows x {args.seq} "
        f"(prompt bucket {args.seq // 4}), micro-batch {args.micro}, {args.dtype}; skewed lengths: "
        f"{useful} useful tokens = {useful / pad['computed_tokens']:.1%} of padded, "
        f"{useful / pack['computed_tokens']:.1%} of packed positions"
    )
    print(
        f"{'':8s} {'step s':>8s} {'useful tok/s':>12s} {'logprob s':>9s} {'useful tok/s':>12s} "
        f"{'first loss':>12s} {'logp checksum':>14s} {'compile s':>9s}"
    )
    for r in results:
        print(
            f"{r['name']:8s} {r['step_s']:8.2f} {useful / r['step_s']:12.0f} {r['logprob_s']:9.2f} "
            f"{useful / r['logprob_s']:12.0f} {r['first_loss']:12.6g} {r['logprob_checksum']:14.6g} "
            f"{r['compile_s']:9.1f}"
        )
    print(
        f"packed / padded: step {pad['step_s'] / pack['step_s']:.2f}x, log-prob pass "
        f"{pad['logprob_s'] / pack['logprob_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
