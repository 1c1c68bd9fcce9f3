"""Multi-turn episodes on the paged engine: turns run whole (every row's answer judged before any
row goes on) against overlapped turns (rows judged and continued as they finish), and a session
that holds only some episodes at once (`sampling.episodes_in_flight`), counted side by side.

The product's own scheduler runs every side (`trainer/episodes.HeldTurns`): a tiny random Qwen3
(fp32) answers `--prompts` x `--group` episodes of up to `--turns` answers; an answer ends at a stop
token (`--stops` of the vocabulary's ids: lengths spread like a geometric law) or at `--cap`. A
stand-in judge (no programs run) lets an episode go on with probability `--go-on` (a hash of the
row and turn, so every side continues the same rows) with a feedback turn of drawn tokens. Each
turn of a row draws with a sampling id of its own, so every side samples the same tokens (checked).

Printed per side: decode steps, slot-steps (S summed over steps: what a chip computes), slot-steps
that made a token, the page pool's pages, the rounds in which rows go on, the token columns
extend prefilled (padding included), and this CPU's seconds once compiled (noisy; the counts are
the result).

    python benchmarks/episode_overlap.py                  # 16 prompts x 4, 3 turns, answers <= 192
    python benchmarks/episode_overlap.py --slots 16 --in-flight 32
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PAGE = 16


def goes_on(row: int, turn: int, p: float) -> bool:
    """The stand-in judge: the same rows go on on every side."""
    h = int.from_bytes(hashlib.blake2b(f"{row}/{turn}".encode(), digest_size=4).digest(), "little")
    return h / 2**32 < p


def run_side(params, config, args, report_every: int, in_flight: int) -> dict:
    """One side: HeldTurns over the workload; its counts and every answer's tokens."""
    import jax

    from microcoder_jax.data.config import DataConfig
    from microcoder_jax.envs.config import EnvConfig
    from microcoder_jax.sampling.config import SamplingConfig
    from microcoder_jax.sampling.interface import make_sampler
    from microcoder_jax.trainer.episodes import HeldTurns

    sampling = SamplingConfig(
        group_size=args.group, max_new_tokens=args.cap, engine="paged", slots=args.slots, page_size=PAGE,
        episodes_in_flight=in_flight,
    )  # fmt: skip
    data = DataConfig(prompt_buckets=(args.prompt,))
    env = EnvConfig(kind="feedback", max_turns=args.turns, feedback_tokens=args.feedback)
    run = types.SimpleNamespace(sampling=sampling, data=data, env_config=env)
    stops = list(range(args.stops))
    sampler = make_sampler(sampling, config, stop_ids=stops, pad_id=0, prompt_buckets=data.prompt_buckets)
    rng = np.random.default_rng(args.seed)
    prompts = [rng.integers(args.stops, config.vocab_size, size=args.prompt // 2).tolist() for _ in range(args.prompts)]
    g, n = args.group, args.prompts * args.group
    contexts = [list(prompts[r // g]) for r in range(n)]
    turns = HeldTurns(run, sampler, params, prompts, g, args.turns, 1.0, jax.random.key(args.seed), None, report_every)
    answers, extends, start = {}, 0, time.perf_counter()
    for turn, rows, out in turns.answers():
        going, ended = [], []
        for i, r in enumerate(rows):
            answer = out.tokens[i, : out.lengths[i]].tolist()
            answers[r, turn] = answer
            if turn < args.turns - 1 and goes_on(r, turn, args.go_on):
                contexts[r] += answer + rng_feedback(r, turn, args, config.vocab_size)
                going.append(r)
            else:
                ended.append(r)
        turns.end(ended)
        if going:
            turns.go_on(turn + 1, going, [contexts[r] for r in going])
            extends += 1
    seconds = time.perf_counter() - start
    s = turns.session
    stats, pages, columns = s.stats(), s.shape.num_pages, s.extend_columns
    turns.close()
    return dict(
        steps=stats["steps"],
        slot_steps=stats["slot_steps"],
        live_slot_steps=stats["live_slot_steps"],
        pages=pages,
        rounds_going_on=extends,
        extend_columns=columns,
        seconds=seconds,
        answers=answers,
    )


def rng_feedback(row: int, turn: int, args, vocab: int) -> list[int]:
    """A feedback turn's tokens, the same for a row and turn on every side."""
    r = np.random.default_rng([args.seed, row, turn])
    return r.integers(args.stops, vocab, size=int(r.integers(8, args.feedback + 1))).tolist()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=4, help="G")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--prompt", type=int, default=64, help="the prompt bucket (prompts are half of it)")
    p.add_argument("--cap", type=int, default=192, help="answer cap (max_new_tokens)")
    p.add_argument("--feedback", type=int, default=48, help="longest feedback turn (env.feedback_tokens)")
    p.add_argument("--stops", type=int, default=2, help="stop token ids (0 .. stops - 1): sets the answers' lengths")
    p.add_argument("--go-on", type=float, default=0.65, help="share of answers that get feedback and go on")
    p.add_argument("--slots", type=int, default=16, help="S")
    p.add_argument("--report-every", type=int, default=8, help="decode steps between judging rounds (overlapped)")
    p.add_argument("--in-flight", type=int, default=32, help="episodes_in_flight of the third side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the numbers here")
    args = p.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from microcoder_jax.models import init_params
    from microcoder_jax.models.presets import get_preset

    config = get_preset("tiny", dtype="float32")
    params = init_params(config, jax.random.key(0))
    settings = {
        "whole turns": (0, 0),
        "overlapped": (args.report_every, 0),
        f"overlapped, {args.in_flight} in flight": (args.report_every, args.in_flight),
    }
    for every, flying in settings.values():  # compile every side's programs before timing any
        run_side(params, config, args, every, flying)
    sides = {name: run_side(params, config, args, *setting) for name, setting in settings.items()}
    ref = sides["whole turns"]["answers"]
    same = all(side["answers"] == ref for side in sides.values())
    lengths = [len(a) for a in ref.values()]
    later = sum(1 for (_, t) in ref if t > 0)
    print(
        f"{args.prompts} prompts x {args.group}, up to {args.turns} turns, S={args.slots}: {len(ref)} answers "
        f"({later} after feedback), mean length {np.mean(lengths):.0f} of {args.cap}; same tokens on every side: {same}"
    )
    columns = "decode steps | slot-steps | slot-steps with a token | pool pages | rounds going on | extend columns"
    print(f"| side | {columns} | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, c in sides.items():
        print(
            f"| {name} | {c['steps']} | {c['slot_steps']} | {c['live_slot_steps']} | {c['pages']} | "
            f"{c['rounds_going_on']} | {c['extend_columns']} | {c['seconds']:.1f} |"
        )
    whole, over = sides["whole turns"], sides["overlapped"]
    print(f"overlapped: {over['steps'] / whole['steps']:.2f}x the decode steps of whole turns")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {m: v for m, v in c.items() if m != "answers"} for k, c in sides.items()}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
