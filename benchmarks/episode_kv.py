"""Multi-turn episodes: the later turns' prefill with each row's KV kept, against the whole
conversation prefilled again, counted side by side on the same episodes.

A tiny random Qwen3 (fp32) plays episodes of `--turns` answers on the paged engine: prompts of
`--prompt` tokens or fewer, each answer runs to a drawn length (long-tailed, no stop token, so the
counts do not depend on the weights), and every answer but the last is followed by a feedback
turn of up to `--feedback` tokens. Both sides sample the same rows with the same lengths:

* kept KV (`env.kind=feedback` on `sampling.engine=paged`): one session holds every row's KV;
  a continued row prefills only its answer's last token and the feedback turn (`extend`, a fixed
  chunk of 1 + feedback tokens rounded to the page);
* prefilled again (the static engine's way, `trainer/episodes.PrefilledTurns`): each later turn
  is a new call whose prompts are the whole conversations, prefilled at their bucket.

Printed per side: token columns prefilled for the later turns (padding included: what the chip
computes), the prefill FLOPs they cost on the model the flags name (2 x params per column plus
attention; a count, not a time), and this CPU's seconds for the later turns (noisy; the counts are
the result).

    python benchmarks/episode_kv.py                      # 8 prompts x 4, 3 turns, answers <= 256
    python benchmarks/episode_kv.py --cap 1024 --flops-model qwen3-1.7b
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

NO_STOP = [10**6]  # never sampled: answers end at their drawn length
PAGE = 16


def workload(args):
    """Prompts, per turn the answers' lengths, and per turn the feedback turns' tokens."""
    rng = np.random.default_rng(args.seed)
    rows = args.prompts * args.group
    prompts = [
        rng.integers(3, 120, size=int(rng.integers(args.prompt // 2, args.prompt + 1))).tolist()
        for _ in range(args.prompts)
    ]
    lengths = [
        np.clip(np.ceil(rng.lognormal(math.log(args.cap / 4), 0.8, rows)), 1, args.cap).astype(np.int32)
        for _ in range(args.turns)
    ]
    feedback = [
        [rng.integers(3, 120, size=int(rng.integers(8, args.feedback + 1))).tolist() for _ in range(rows)]
        for _ in range(args.turns - 1)
    ]
    return prompts, lengths, feedback


def buckets(args) -> tuple[int, ...]:
    """The turn buckets (trainer/episodes.turn_buckets' rule): the prompt's, then + t x (answer + feedback)."""
    up = lambda x: -(-x // PAGE) * PAGE  # noqa: E731
    return tuple(
        sorted({up(args.prompt)} | {up(args.prompt + t * (args.cap + args.feedback)) for t in range(1, args.turns)})
    )


def kept(params, config, prompts, lengths, feedback, args) -> tuple[int, float, list]:
    import jax

    from microcoder_jax.sampling.paged_sampler import PagedSession, held_session_pages

    g, rows = args.group, args.prompts * args.group
    widest = max(buckets(args))
    session = PagedSession(
        params, config, num_samples=g, max_prompts=args.prompts + rows * (args.turns - 1), max_new_tokens=args.cap,
        prompt_width=widest, stop_token_ids=NO_STOP, pad_id=0, rng=jax.random.key(0), slots=args.slots,
        page_size=PAGE, hold=True,
        num_pages=held_session_pages(args.prompts, buckets(args)[0], rows, widest, args.cap, PAGE),
    )  # fmt: skip
    handle = []
    contexts = [list(prompts[r // g]) for r in range(rows)]
    answers = []
    chunk = -(-(1 + args.feedback) // PAGE) * PAGE
    start = None
    for turn in range(args.turns):
        if turn == 0:
            first = session.push(prompts, temperature=1.0, caps=lengths[0], width=buckets(args)[0])
            handle = [(p, j) for p in first for j in range(g)]
        else:
            start = start or time.perf_counter()
            new = session.extend(handle, contexts, temperature=1.0, caps=lengths[turn], chunk=chunk)
            handle = [(p, 0) for p in new]
        while not session.done:
            session.run()
        out = session.output(sorted({p for p, _ in handle}))
        answers.append(out.tokens)
        for r in range(rows):
            contexts[r] += out.tokens[r, : out.lengths[r]].tolist() + (
                feedback[turn][r] if turn < args.turns - 1 else []
            )
    seconds = time.perf_counter() - (start or time.perf_counter())
    columns = session.extend_columns
    session.close()
    return columns, seconds, answers


def prefilled(params, config, prompts, lengths, feedback, args, first_answers) -> tuple[int, float]:
    import jax

    from microcoder_jax.sampling.paged_sampler import generate_paged
    from microcoder_jax.data.prompts import prompt_bucket

    g, rows = args.group, args.prompts * args.group
    contexts = [
        list(prompts[r // g]) + first_answers[r][: lengths[0][r]].tolist() + feedback[0][r] for r in range(rows)
    ]
    columns, start = 0, time.perf_counter()
    for turn in range(1, args.turns):
        width = prompt_bucket(max(map(len, contexts)), buckets(args))
        columns += rows * width
        out = generate_paged(
            params, config, contexts, num_samples=1, temperature=1.0, max_new_tokens=args.cap,
            stop_token_ids=NO_STOP, pad_id=0, rng=jax.random.key(turn), slots=args.slots, page_size=PAGE,
            caps=lengths[turn], prompt_buckets=buckets(args),
        )  # fmt: skip
        for r in range(rows):
            contexts[r] += out.tokens[r, : out.lengths[r]].tolist() + (
                feedback[turn][r] if turn < args.turns - 1 else []
            )
    return columns, time.perf_counter() - start


def prefill_flops(preset: str, columns: int, width: int) -> float:
    """2 x matmul params per column + attention over up to `width` keys (QK and PV, every layer)."""
    from microcoder_jax.models.presets import get_preset

    mc = get_preset(preset)
    return 2.0 * mc.num_params() * columns + 4.0 * columns * width * mc.num_heads * mc.head_dim * mc.num_layers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4, help="G")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--prompt", type=int, default=480, help="longest prompt (tokens)")
    p.add_argument("--cap", type=int, default=256, help="answer cap (max_new_tokens)")
    p.add_argument("--feedback", type=int, default=128, help="longest feedback turn (env.feedback_tokens)")
    p.add_argument("--slots", type=int, default=32, help="S")
    p.add_argument("--flops-model", default="qwen3-1.7b", help="preset whose prefill FLOPs the columns cost")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the numbers here")
    args = p.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from microcoder_jax.models import init_params
    from microcoder_jax.models.presets import get_preset

    config = get_preset("tiny", dtype="float32")
    params = init_params(config, jax.random.key(0))
    prompts, lengths, feedback = workload(args)
    widest = max(buckets(args))
    kv_columns, kv_seconds, answers = kept(params, config, prompts, lengths, feedback, args)
    re_columns, re_seconds = prefilled(params, config, prompts, lengths, feedback, args, answers[0])
    rows = args.prompts * args.group
    print(
        f"{args.prompts} prompts x {args.group}, {args.turns} turns: prompts <= {args.prompt}, answers <= {args.cap} "
        f"(mean {np.mean(lengths):.0f}), feedback <= {args.feedback} tokens; later turns' prefill per episode:"
    )
    print(f"| side | token columns | {args.flops_model} prefill TFLOPs (whole batch) | CPU seconds (tiny model) |")
    print("|---|---|---|---|")
    sides = {"kept KV (extend)": (kv_columns, kv_seconds), "prefilled again": (re_columns, re_seconds)}
    for name, (cols, secs) in sides.items():
        print(
            f"| {name} | {cols / rows:.0f} | {prefill_flops(args.flops_model, cols, widest) / 1e12:.1f} | {secs:.1f} |"
        )
    print(f"kept KV prefills {kv_columns / re_columns:.1%} of the columns")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {"columns": c, "seconds": s} for k, (c, s) in sides.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
