"""`python -m microcoder_jax.experiments.feedback --out DIR [--seeds N] [--steps S] [--short]`

Does RL learn to use execution feedback? configs/feedback_task.py hides the operation from the
statement: only the tests say what f(a, b) is (arms `copy-single` and `copy`: f is a constant, so
the feedback shows the answer itself). Arm `single` answers once; arm `feedback` (two
turns) sees the public example's input, expected output and what its program printed after a
failing answer, and answers again; both warm-start on the answer format only (random operations,
and for `feedback` a random second answer after a feedback turn), so reading the feedback is left
to RL. Held-out problems are scored before RL and every 10 steps: first-answer pass@1 (every arm)
and, for `feedback`, pass@1 after each turn of one episode per problem (private tests).

Writes DIR/summary.json and DIR/table.md: per seed, before RL and at the end, the first-answer
pass@1 and the episode's pass@1 after turns 1 and 2 with the repaired share, and paired 95%
intervals over seeds of what RL changed in the turn-2 minus turn-1 gap (the use of feedback);
DIR/curves.png: those against the RL step, held out and in training.
"""

from __future__ import annotations

import sys

import numpy as np

from microcoder_jax.experiments import figure
from microcoder_jax.experiments.cli import parse_args
from microcoder_jax.experiments.report import SHORT_NOTE, write_summary
from microcoder_jax.experiments.rows import series, training_rows
from microcoder_jax.experiments.runner import Arm, run_all
from microcoder_jax.experiments.stats import interval

ARMS = (
    Arm("single", "single", label="one answer", config_file="feedback_task.py"),
    Arm("feedback", "feedback", label="two turns with feedback", config_file="feedback_task.py"),
    # the same with constant operations: the feedback shows the answer itself (`--arms copy-single,copy`)
    Arm("copy-single", "copy-single", label="one answer, constants", config_file="feedback_task.py"),
    Arm("copy", "copy", label="two turns with feedback, constants", config_file="feedback_task.py"),
    # `copy` warm-started to copy the expected output in half its second answers (`--arms copy-single,copy-reads`)
    Arm("copy-reads", "copy-reads", label="two turns, constants, reads half", config_file="feedback_task.py"),
    # the same with one baseline for both turns (rl.turn_baseline=False)
    Arm(
        "copy-reads-one-baseline",
        "copy-reads-one-baseline",
        label="two turns, constants, reads half, one baseline",
        config_file="feedback_task.py",
    ),
    # a stronger partial reader (reads 0.75) with half the learning rate
    Arm(
        "copy-reads-strong",
        "copy-reads-strong",
        label="two turns, constants, reads 0.75, lr/2",
        config_file="feedback_task.py",
    ),
)
# (one answer, two turns) on one task
PAIRS = (
    ("single", "feedback"),
    ("copy-single", "copy"),
    ("copy-single", "copy-reads"),
    ("copy-single", "copy-reads-one-baseline"),
    ("copy-single", "copy-reads-strong"),
)


CURVES = (  # the figure's panels (figure.PANELS)
    "eval_episode_pass_turn2",
    "eval_episode_repaired_frac",
    "eval_episode_repeat_frac",
    "episode_repaired_frac",
    "reward_mean",
    "truncation_rate",
)
TITLE = "Multi-turn feedback (configs/feedback_task.py), {seeds}"


def _at(reports: dict, step: int) -> dict:
    """The held-out numbers of one evaluation: first-answer pass@1, episode pass@1 per turn."""
    r = reports[step]
    out = {"pass@1": r["overall"]["pass@1"]}
    for k, v in r.get("episodes", {}).items():
        if k != "problems":
            out[f"episode_{k}"] = v
    return out


TRAIN_WINDOW = 10  # training steps averaged at each end (sampled episodes: a smoother measure)


def _training(rows) -> dict:
    """The training episodes' repaired share over the first and the last TRAIN_WINDOW steps (the
    policy sampled at the training temperature, 128 episodes a step); {} without episodes."""
    got = series(training_rows(rows), "episode_repaired_frac")
    if not len(got) or np.isnan(got).all():
        return {}
    w = min(TRAIN_WINDOW, len(got))
    return {"repaired_first": float(np.nanmean(got[:w])), "repaired_last": float(np.nanmean(got[-w:]))}


def summarize(results: dict, steps: int) -> dict:
    arms = {}
    for name, seeds in results.items():
        arms[name] = {}
        for s, (rows, _, rep) in seeds.items():
            arms[name][str(s)] = {"start": _at(rep, 0), "end": _at(rep, max(rep))}
            if train := _training(rows):
                arms[name][str(s)]["train"] = train
    out: dict = {"steps": steps, "arms": arms}
    for single, two in PAIRS:
        fb, key = arms.get(two, {}), lambda k, two=two: k if two == "feedback" else f"{two}_{k}"  # noqa: E731
        if fb:
            gap = {
                p: [v[p]["episode_pass_turn2"] - v[p]["episode_pass_turn1"] for v in fb.values()]
                for p in ("start", "end")
            }
            out[key("feedback_gap_change")] = interval(np.subtract(gap["end"], gap["start"]))
            out[key("feedback_gap_end")] = interval(gap["end"])
            if all("train" in v for v in fb.values()):
                t = [v["train"] for v in fb.values()]
                out[key("train_repaired_change")] = interval([x["repaired_last"] - x["repaired_first"] for x in t])
        if fb and single in arms:
            both = sorted(set(fb) & set(arms[single]), key=int)
            d = [fb[s]["end"]["episode_pass_turn2"] - arms[single][s]["end"]["pass@1"] for s in both]
            out[key("turn2_minus_single")] = interval(d)
    return out


def _train_cell(seed: dict) -> str:
    t = seed.get("train")
    return f"{t['repaired_first']:.3f} -> {t['repaired_last']:.3f}" if t else "-"


def table(summary: dict) -> str:
    head = "| arm | seed | pass@1 start | pass@1 end | turn 1 start | turn 2 start | turn 1 end | turn 2 end "
    lines = [head + "| repaired end | training repairs first -> last |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, seeds in summary["arms"].items():
        for s, v in seeds.items():
            a, b = v["start"], v["end"]
            f = lambda d, k: f"{d[k]:.3f}" if k in d else "-"  # noqa: E731
            lines.append(
                f"| {name} | {s} | {a['pass@1']:.3f} | {b['pass@1']:.3f} | {f(a, 'episode_pass_turn1')} | "
                f"{f(a, 'episode_pass_turn2')} | {f(b, 'episode_pass_turn1')} | {f(b, 'episode_pass_turn2')} | "
                f"{f(b, 'episode_repaired_frac')} | {_train_cell(v)} |"
            )
    measures = (
        ("feedback_gap_change", "RL's change in the turn-2 minus turn-1 gap ({two})"),
        ("feedback_gap_end", "turn-2 minus turn-1 pass@1 at the end ({two})"),
        ("turn2_minus_single", "{two}'s turn-2 pass@1 minus {single}'s pass@1 at the end"),
        ("train_repaired_change", f"training repairs, last {TRAIN_WINDOW} steps minus first {TRAIN_WINDOW} ({{two}})"),
    )
    for single, two in PAIRS:
        for key, what in measures:
            key, what = key if two == "feedback" else f"{two}_{key}", what.format(two=two, single=single)
            if key not in summary:
                continue
            i = summary[key]
            ci = f"[{i['ci95'][0]:+.3f}, {i['ci95'][1]:+.3f}]" if i["ci95"] else "(one seed)"
            lines.append(f"\n{what}: {i['mean']:+.3f} {ci}, higher on {i['positive']}/{i['seeds']} seeds")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(
        argv, "python -m microcoder_jax.experiments.feedback", __doc__, 3, 40, arm_names=[a.name for a in ARMS]
    )
    arms = [a for a in ARMS if a.name in (args.arms or PAIRS[0])]  # by default the hidden-operation pair
    results = run_all(arms, args.seed_list, args.steps, args.out, short=args.short, log=lambda m: print(m, flush=True))
    summary = summarize(results, args.steps) | {"short": args.short}
    write_summary(args.out, summary, (f"**{SHORT_NOTE}**\n\n" if args.short else "") + table(summary))
    n = len(args.seed_list)
    figure.draw(
        results,
        arms,
        f"{args.out}/curves.png",
        keys=CURVES,
        title=TITLE.format(seeds=f"{n} seed{'s' if n != 1 else ''}"),
    )
    print(f"wrote {args.out}/summary.json, table.md, curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
