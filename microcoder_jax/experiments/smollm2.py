"""`python -m microcoder_jax.experiments.smollm2 --out DIR [--seeds N] [--first-seed K] [--steps S] [--arms ...]`

Does RL make the real model (SmolLM2-135M-Instruct, `configs/smollm2.py`) better at held-out easy
problems? Each arm is the config with one shaped reward: `reads` (`fraction_reads`: the share of
tests passed, plus 0.1 for a program that reads stdin and runs cleanly) and `runs`
(`fraction_runs`: the same bonus for any program that runs cleanly, which the model learned to
collect with programs that read nothing); `lora` is `reads` with rank-16 adapters on every
projection (alpha 32, the base frozen) at 10x the learning rate, the usual LoRA setting;
`feedback` is `reads` with two answers an episode, the second after the failing public example is
shown (env.kind=feedback), run for 0.35 of the steps so that it samples about the tokens the
single-turn arms do. Held-out pass@1 (16 held-out templates, 4 answers at T = 1, and greedy) is
scored before RL and at the end (the feedback arm: at the end only, with its episodes' pass@1 after
each turn); about 35 minutes a run on 2 CPU cores.

Writes DIR/summary.json and DIR/table.md: per arm and seed, held-out pass@1 at T = 1 and greedy
before and after, the share of training answers that passed every test over the last 5 steps and
the tokens sampled; paired 95% intervals over seeds of what RL changed (end minus start) in each
arm, and of each other arm's difference from `reads` at the end, over the seeds both ran.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np

from microcoder_jax.experiments.cli import parse_args
from microcoder_jax.experiments.figure import draw
from microcoder_jax.experiments.rows import series, training_rows
from microcoder_jax.experiments.report import write_summary
from microcoder_jax.experiments.runner import Arm, run_all, run_config
from microcoder_jax.experiments.stats import interval

REWARDS = {"reads": "fraction_reads", "runs": "fraction_runs"}  # arm -> the reward it trains with
LORA = ("lora.rank=16", "lora.alpha=32.0", "rl.learning_rate=1e-4")  # the `lora` arm: 10x configs/smollm2.py's rate
# the `feedback` arm: two answers an episode, the second after the failing public example is shown
# (envs/feedback.py); feedback turns average ~70 tokens, so 160 cuts few and keeps rows 960 wide.
# Rows 960 wide without remat took the learner past 24 GB (killed for memory at step 5 of seed 0)
FEEDBACK = (
    "env.kind=feedback",
    "env.max_turns=2",
    "env.feedback_tokens=160",
    "sampling.engine=paged",
    "model.remat=full",
)
ARMS = (*REWARDS, "lora", "feedback")
QUANTITIES = ("pass@1", "greedy pass@1")
# the figure's panels (experiments/figure.py)
KEYS = ("pass_rate", "reward_mean", "eval_pass@1", "eval_greedy_pass@1", "response_length_mean", "truncation_rate")


def arms(steps: int) -> list[Arm]:
    """One arm per reward, the adapters' arm and the feedback arm; the held-out set scored before RL
    and at the last step only (the feedback arm at its last step only: before RL it is the model as
    it ships, measured apart in docs/experiments.md, and a multi-turn evaluation costs minutes)."""
    evals = ("train.eval_at_start=True", f"train.eval_every={steps}")
    out = [Arm(name, "", (f"judge.reward={r}", *evals), r, "smollm2.py") for name, r in REWARDS.items()]
    reads = f"judge.reward={REWARDS['reads']}"
    # 7 feedback steps sampled 42,450 and 41,817 model tokens (seeds 0, 1), about what `reads`
    # samples in 20 (41,092-54,820 on seeds 5, 6): a share of 0.35
    feedback = Arm("feedback", "", (), "fraction_reads, 2 turns", "smollm2.py", step_share=0.35)
    end = ("train.eval_at_start=False", f"train.eval_every={feedback.run_steps(steps)}")
    return out + [
        Arm("lora", "", (reads, *LORA, *evals), "fraction_reads, LoRA r16", "smollm2.py"),
        dataclasses.replace(feedback, overrides=(reads, *FEEDBACK, *end)),
    ]


def held_out(report: dict) -> dict:
    """Pass@1 at the eval temperature and greedy (NaN where the run did not decode greedily); for a
    multi-turn run also its episodes' pass@1 after turns 1 and 2 and the share of failing first
    answers repaired (NaN for a single-turn run)."""
    nan = float("nan")
    greedy = report.get("greedy", {}).get("overall", {}).get("pass@1", nan)
    episodes = report.get("episodes", {})
    return {
        "pass@1": report["overall"]["pass@1"],
        "greedy pass@1": greedy,
        "episodes pass@1, turn 1": episodes.get("pass_turn1", nan),
        "episodes pass@1, turn 2": episodes.get("pass_turn2", nan),
        "repaired": episodes.get("repaired_frac", nan),
    }


def sampled_tokens(rows: list[dict]) -> int:
    """The model's tokens over these training rows: each row's mean span less its mean feedback
    turn, times its rows (rows written before gen_tokens left feedback turns out read the same)."""
    return int(
        round(sum((r["response_length_mean"] - r.get("episode_feedback_tokens_mean", 0.0)) * r["rows"] for r in rows))
    )


def summarize(results: dict, steps: int) -> dict:
    """Per arm and seed: held-out start (None where the arm does not score it) and end, the training
    pass rate of the last 5 steps and the tokens sampled in training; the intervals of RL's change
    per arm (over the seeds with a start) and of the arms' difference at the end."""
    arms: dict = {}
    for name, seeds in results.items():
        arms[name] = {}
        for seed, (rows, _, reports) in seeds.items():
            train = training_rows(rows)
            passed = series(train, "pass_rate")
            arms[name][str(seed)] = {
                "start": held_out(reports[0]) if 0 in reports else None,
                "end": held_out(reports[max(reports)]),
                "steps": len(train),
                "sampled_tokens": sampled_tokens(train),
                "train_pass_last5": float(np.mean(passed[-5:])) if len(passed) else float("nan"),
            }
    out: dict = {"steps": steps, "arms": arms, "change": {}, "difference": {}}
    for name, seeds in arms.items():
        started = [v for v in seeds.values() if v["start"] is not None]
        if started:
            out["change"][name] = {q: interval([v["end"][q] - v["start"][q] for v in started]) for q in QUANTITIES}
    for other in [a for a in arms if a != "reads" and "reads" in arms]:
        both = sorted(set(arms["reads"]) & set(arms[other]), key=int)
        if both:
            out["difference"][f"{other} - reads"] = {
                q: interval([arms[other][s]["end"][q] - arms["reads"][s]["end"][q] for s in both]) for q in QUANTITIES
            }
    return out


def _interval(i: dict) -> str:
    ci = f"[{i['ci95'][0]:+.3f}, {i['ci95'][1]:+.3f}]" if i["ci95"] else "(one seed)"
    return f"{i['mean']:+.3f} {ci}, higher on {i['positive']}/{i['seeds']} seeds"


def table(summary: dict) -> str:
    lines = [
        "| arm | seed | pass@1 start | pass@1 end | greedy start | greedy end | episodes pass@1 end, turn 1 -> 2 "
        "| training passing, last 5 steps | steps | sampled tokens |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, seeds in summary["arms"].items():
        for s, v in seeds.items():
            a, b = v["start"], v["end"]
            start = (f"{a['pass@1']:.3f}", f"{a['greedy pass@1']:.3f}") if a else ("-", "-")
            turns = b["episodes pass@1, turn 1"], b["episodes pass@1, turn 2"]
            episodes = "-" if np.isnan(turns[0]) else f"{turns[0]:.3f} -> {turns[1]:.3f}"
            lines.append(
                f"| {name} | {s} | {start[0]} | {b['pass@1']:.3f} | {start[1]} | {b['greedy pass@1']:.3f} | "
                f"{episodes} | {v['train_pass_last5']:.3f} | {v['steps']} | {v['sampled_tokens']} |"
            )
    lines.append("")
    for name, change in summary["change"].items():
        for q, i in change.items():
            lines.append(f"- {name}: RL's change in held-out {q}: {_interval(i)}")
    for pair, diff in summary["difference"].items():
        for q, i in diff.items():
            lines.append(f"- {pair}: held-out {q} at the end: {_interval(i)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv, "python -m microcoder_jax.experiments.smollm2", __doc__, 3, 20, arm_names=list(ARMS))
    if args.short:
        print(
            "--short sizes the demo task's runs; for a quick check here: --steps 1 --seeds 1 --arms reads",
            file=sys.stderr,
        )
        return 2
    chosen = [a for a in arms(args.steps) if args.arms is None or a.name in args.arms]
    results = run_all(chosen, args.seed_list, args.steps, args.out, short=False, log=lambda m: print(m, flush=True))
    summary = summarize(results, args.steps)
    os.makedirs(args.out, exist_ok=True)
    draw(
        results,
        chosen,
        os.path.join(args.out, "curves.png"),
        keys=KEYS,
        title=f"SmolLM2-135M-Instruct, configs/smollm2.py, {args.steps} RL steps, by shaped reward",
        cap=run_config(chosen[0], 0, args.steps, False, args.out).sampling.max_new_tokens,
    )
    write_summary(args.out, summary, table(summary))
    print(f"wrote {args.out}/summary.json, table.md, curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
