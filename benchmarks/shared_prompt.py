"""Shared prompts (rl.share_prompts) and the prompt block against padded rows: the learner's share
of an RL step, side by side.

The G samples of a prompt begin with the same prompt tokens; with rl.share_prompts the old-log-prob
pass and the train step run those columns once per group inside each micro-batch and the answers
attend to their keys (models.forward_shared_prompt). On configs/smollm2.py's shape (prompts of a
384-token bucket, 160 answer tokens, G = 8) the prompt is ~70% of every row, so this is most of
the learner's work on the real model. Whether shared or not, no loss reads the prompt's own
log-probs: the learner's prompt block (`shared = (w, 1)`, trainer/learner.prompt_block) skips the
LM head on those columns. Sides, on the same weights and batch, in one process:

- padded: every column through the LM head (the learner before the prompt block), micro-batch 4;
- block: padded rows, the prompt's columns skip the LM head (rl.share_prompts=False today);
- shared: the same micro-batch of 4 rows, 4 of a group share one prompt (and skip its LM head);
- shared-m8: micro-batch 8, the whole group shares it (fewer, larger micro-batches).

Timed round-robin (one of each side per round, the order rotated, median over rounds): one train
step (forward + backward + AdamW) and one old-log-prob pass at the step's micro-batch. Also: the
train step's FLOPs per micro-batch and temporaries by XLA's cost and memory analysis (counts, no
timing noise; XLA counts a loop body once), each side's first loss, and the accuracy check: the
old log-probs of one group, padded and shared, in float32 and bfloat16, against float32 padded
(shared is exact in float32; in bfloat16 both differ from float32 by rounding alike).

    python benchmarks/shared_prompt.py                      # SmolLM2, 16 rows, 3 rounds (~15 min, 2 cores)
    python benchmarks/shared_prompt.py --rounds 2 --sides padded,block   # the prompt block alone (~10 min)
    python benchmarks/shared_prompt.py --model tiny-llama --rounds 2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

SIDES = {"padded": ("none", 4), "block": ("block", 4), "shared": ("shared", 4), "shared-m8": ("shared", 8)}


def grouped_batch(prompts: int, group: int, prompt: int, response: int, vocab: int, seed: int = 0) -> dict:
    """Each prompt (75-100% of the bucket, left-padded) repeated over its group's rows; answers of
    mixed lengths, right-padded; one temperature."""
    rng = np.random.default_rng(seed)
    rows, seq = prompts * group, prompt + response
    tokens, attn, resp = (np.zeros((rows, seq), np.int32) for _ in range(3))
    lengths = rng.integers(response // 4, response + 1, rows).astype(np.int32)
    for g in range(prompts):
        p = int(rng.integers(prompt * 3 // 4, prompt + 1))
        text = rng.integers(3, vocab, p)
        for i in range(g * group, (g + 1) * group):
            tokens[i, prompt - p : prompt] = text
            tokens[i, prompt : prompt + lengths[i]] = rng.integers(3, vocab, lengths[i])
            attn[i, prompt - p : prompt + lengths[i]] = 1
            resp[i, prompt : prompt + lengths[i]] = 1
    return {
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp,
        "rewards": rng.random(rows).astype(np.float32),
        "passed": rng.random(rows) < 0.3,
        "no_code": np.zeros(rows, bool),
        "truncated": lengths == response,
        "response_lengths": lengths,
        "temperature": np.full(rows, 0.7, np.float32),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="smollm2 (the wheel's real model) or a preset name")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--response", type=int, default=160)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, from {', '.join(SIDES)}")
    p.add_argument("--json", help="also write the table as JSON here")
    args = p.parse_args()

    import jax

    from microcoder_jax import models
    from microcoder_jax.rl.logprobs import compute_logprobs, shared_prompt_width
    from microcoder_jax.rl.presets import make_rl_config
    from microcoder_jax.rl.step import init_train_state, make_train_step

    runtime = dict(dtype="bfloat16", remat="none")
    if args.model == "smollm2":
        path = models.resolve_model_path("smollm2")
        mc = models.DecoderConfig.from_hf(path, **runtime)
        params = models.load_hf_params(path, mc)
    else:
        mc = models.get_preset(args.model, **runtime)
        params = models.init_params(mc, jax.random.PRNGKey(0))
    host = grouped_batch(args.prompts, args.group, args.prompt, args.response, mc.vocab_size)
    rows = (host["tokens"], host["attention_mask"], host["temperature"])
    width = shared_prompt_width(*rows, args.group, (args.prompt,))
    assert width == args.prompt, width
    sides, out = args.sides.split(","), {}
    for name in sides:
        layout, micro = SIDES[name]
        cfg = make_rl_config(group_size=args.group, num_minibatches=1, micro_batch_size=micro, learning_rate=1e-5)
        shared = {"none": None, "block": (width, 1), "shared": (width, args.group)}[layout]
        old = compute_logprobs(params, mc, *rows, micro_batch=micro, shared=shared)
        batch = jax.device_put({**host, "old_logprobs": np.asarray(old)})
        state = [init_train_state(params, cfg)]
        t0 = time.perf_counter()
        compiled = make_train_step(mc, cfg).lower(state[0], batch, shared=shared).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        side = {
            "compile_s": time.perf_counter() - t0,
            "gflop": cost.get("flops", float("nan")) / 1e9,
            "temp_mb": compiled.memory_analysis().temp_size_in_bytes / 2**20,
            "old_logprobs": np.asarray(old),
            "step": [],
            "logprob": [],
            "loss": None,
        }

        def run_step(compiled=compiled, state=state, batch=batch, side=side):
            state[0], metrics = compiled(state[0], batch)
            jax.block_until_ready(state[0])
            side["loss"] = side["loss"] if side["loss"] is not None else float(metrics["loss"])

        def run_logprob(micro=micro, shared=shared):
            jax.block_until_ready(compute_logprobs(params, mc, *rows, micro_batch=micro, shared=shared))

        side["fns"] = (run_step, run_logprob)
        run_step()  # warm: the first call pays allocation
        out[name] = side
        print(f"built {name}: compile {side['compile_s']:.0f} s", flush=True)
    for r in range(args.rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        for name in order:
            for key, fn in zip(("step", "logprob"), out[name]["fns"]):
                t0 = time.perf_counter()
                fn()
                out[name][key].append(time.perf_counter() - t0)
        print(f"round {r + 1}: " + ", ".join(f"{n} {out[n]['step'][-1]:.1f} s" for n in sides), flush=True)

    accuracy = accuracy_check(mc, params, args)
    keep = host["response_mask"] > 0
    base = out[sides[0]]
    base_t = np.median(base["step"]) + np.median(base["logprob"])
    print(
        f"\n{args.model}: {args.prompts} prompts x G={args.group}, prompt bucket {args.prompt}, "
        f"{args.response} answer tokens, median of {args.rounds} rounds"
    )
    print(
        "| side | train step s | old log-probs s | learner s | speed-up | XLA GFLOP per micro-batch | "
        "XLA temp MB | first loss | max old-logprob diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    table = []
    for name in sides:
        s = out[name]
        step, lp = float(np.median(s["step"])), float(np.median(s["logprob"]))
        diff = float(np.abs(np.where(keep, s["old_logprobs"] - base["old_logprobs"], 0)).max())
        row = dict(side=name, step_s=step, logprob_s=lp, speedup=base_t / (step + lp), gflop=s["gflop"])
        row.update(temp_mb=s["temp_mb"], first_loss=s["loss"], max_diff=diff, rounds=s["step"])
        table.append(row)
        print(
            f"| {name} | {step:.2f} | {lp:.2f} | {step + lp:.2f} | {row['speedup']:.2f}x | {s['gflop']:.0f} | "
            f"{s['temp_mb']:,.0f} | {s['loss']:.6f} | {diff:.4f} |"
        )
    print(
        "rounds (train step s): "
        + "; ".join(f"{r['side']} " + " / ".join(f"{t:.1f}" for t in r["rounds"]) for r in table)
    )
    print("\nold log-probs of one group against float32 padded rows (answer tokens): mean / max |difference|")
    for key, (mean, top) in accuracy.items():
        print(f"  {key}: {mean:.2e} / {top:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "accuracy": accuracy}, f, indent=1)


def accuracy_check(mc, params, args) -> dict:
    """Mean and max |log p - float32 padded log p| over one group's answer tokens, padded and shared,
    in float32 and in the model's bfloat16 (float32 params, the compute dtype changed)."""
    from microcoder_jax.rl.logprobs import compute_logprobs

    b = grouped_batch(1, args.group, args.prompt, args.response, mc.vocab_size, seed=1)
    rows = (b["tokens"], b["attention_mask"], b["temperature"])
    keep = b["response_mask"] > 0
    out = {}
    for dtype in ("float32", mc.dtype):
        for name, shared in (("padded", None), ("shared", (args.prompt, args.group))):
            lp = compute_logprobs(params, mc.replace(dtype=dtype), *rows, micro_batch=args.group, shared=shared)
            out[f"{dtype} {name}"] = np.asarray(lp)
    ref = out["float32 padded"]
    return {k: (float(np.abs(v - ref)[keep].mean()), float(np.abs(v - ref)[keep].max())) for k, v in out.items()}


if __name__ == "__main__":
    main()
