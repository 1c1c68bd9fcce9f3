"""One experiment command: its flags (--out, --seeds, --steps, --short, --arms), the runs, the report."""

from __future__ import annotations

import dataclasses
import sys

from microcoder_jax.experiments.report import SHORT_NOTE, write_outputs
from microcoder_jax.experiments.runner import run_all, run_config
from microcoder_jax.experiments.summary import summarize
from microcoder_jax.experiments.tables import table


def parse_args(argv, prog: str, doc: str | None, default_seeds: int, default_steps: int, arm_names=None, tasks=None):
    """The experiment flags; `arm_names`: the experiment's arms, which `--arms` picks from; `tasks`:
    {name: (config file, description, overrides)}, which `--task` picks from (the first is the default)."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory (runs/, summary.json, table.md, curves.png)")
    p.add_argument(
        "--seeds", type=int, default=None, help=f"seeds per arm, 0, 1, ... (default {default_seeds}; --short: 1)"
    )
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the first seed: runs seeds K, K+1, ... (default 0), e.g. to add seeds 1-2 to a seed 0 run elsewhere",
    )
    p.add_argument("--steps", type=int, default=None, help=f"RL steps per run (default {default_steps}; --short: 3)")
    p.add_argument("--short", action="store_true", help="tiny runs that check the command end to end")
    p.add_argument(
        "--arms",
        default=None,
        help="comma-separated arm names to run, in the experiment's order (default: every arm; the first "
        "one run is the baseline of the paired differences)",
    )
    if tasks:
        p.add_argument(
            "--task",
            choices=list(tasks),
            default=next(iter(tasks)),
            help="the model and problems every arm runs on: "
            + "; ".join(f"{k}: {t[1]} ({t[0] or 'configs/truncation_task.py'})" for k, t in tasks.items()),
        )
    args = p.parse_args(argv if argv is not None else sys.argv[1:])
    if tasks and args.short and args.task != next(iter(tasks)):
        p.error(f"--short sizes the {next(iter(tasks))} task's runs; on --task {args.task} use --steps 1 --seeds 1")
    if args.arms is not None:
        args.arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
        unknown = [a for a in args.arms if arm_names is not None and a not in arm_names]
        if unknown or not args.arms:
            p.error(
                f"--arms={','.join(args.arms)}: unknown or none; this experiment's arms: {', '.join(arm_names or ())}"
            )
    for name in ("seeds", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name}={getattr(args, name)}: must be >= 1")
    if args.first_seed < 0:
        p.error(f"--first-seed={args.first_seed}: must be >= 0")
    args.seeds = args.seeds or (1 if args.short else default_seeds)
    args.seed_list = list(range(args.first_seed, args.first_seed + args.seeds))
    args.steps = args.steps or (3 if args.short else default_steps)
    return args


def run_experiment(
    name: str,
    doc: str | None,
    argv,
    arms,
    *,
    draw,
    keys,
    title: str,
    meta=None,
    columns=None,
    paired_columns=None,
    default_seeds: int = 6,
    pairs=(),
    tasks=None,
) -> int:
    """One experiment command: parse the flags, train every arm x seed, then write and print the
    summary, table and curves. `draw` is figure.draw; `title` may use {cap}, {seeds} ("6 seeds", "1 seed") and {task};
    `pairs`: (arm, baseline) differences to report besides every arm against the first; `tasks`:
    {name: (config file of configs/, description, overrides)} that `--task` picks: every arm's config
    file, and overrides added to each arm's (`{steps}` is --steps)."""
    args = parse_args(
        argv,
        f"python -m microcoder_jax.experiments.{name}",
        doc,
        default_seeds=default_seeds,
        default_steps=40,
        arm_names=[a.name for a in arms],
        tasks=tasks,
    )
    task = tasks[args.task][1] if tasks else ""
    if tasks and tasks[args.task][0]:
        extra = tuple(o.format(steps=args.steps) for o in tasks[args.task][2])
        arms = [dataclasses.replace(a, config_file=tasks[args.task][0], overrides=(*a.overrides, *extra)) for a in arms]
    if args.arms is not None:  # a subset, in the experiment's order; pairs between arms it keeps
        arms = [a for a in arms if a.name in args.arms]
        pairs = [p for p in pairs if {p[0], p[1]} <= set(args.arms)]
    seeds = args.seed_list
    results = run_all(arms, seeds, args.steps, args.out, short=args.short, log=lambda m: print(m, flush=True))
    cap = run_config(arms[0], 0, args.steps, args.short, args.out).sampling.max_new_tokens
    summary = summarize(
        arms,
        results,
        args.steps,
        {
            "experiment": name,
            "short": args.short,
            "seeds": seeds,
            **({"task": args.task} if tasks else {}),
            **(meta or {}),
            "max_new_tokens": cap,
        },
    )

    def fig(results, arms, path, summary):
        curves = (
            (summary["start_length_curve"], summary["end_length_curves"]) if summary["start_length_curve"] else None
        )
        draw(
            results,
            arms,
            path,
            keys=keys,
            cap=cap,
            title=title.format(cap=cap, seeds=f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}", task=task),
            length_curves=curves,
        )

    write_outputs(args.out, summary, results, arms, fig, columns, paired_columns, pairs)
    if args.short:
        print(SHORT_NOTE)
    print(table(summary, columns) if columns else table(summary))
    print(f"wrote {args.out}/summary.json, table.md, curves.png")
    return 0
