"""Running arms x seeds of the truncation task one after another, and their summary.json.

Every run is the normal trainer (`train(config, workdir)`) on `configs/truncation_task.py:RULE`
plus the arm's overrides, in its own workdir `OUT/runs/ARM/seedN`; a run whose metrics already
cover every step is read back instead of run again. All runs share one process (warm starts of
one seed are computed once, compiled programs are reused) and one compilation cache.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import sys
import time

import numpy as np

from microcoder_jax.config import config_dir

CONFIG_FILE = os.path.join(config_dir(), "truncation_task.py")
# summary name -> metrics.jsonl key
QUANTITIES = {
    "reward": "reward_mean",
    "length": "response_length_mean",
    "truncation": "truncation_rate",
    "masked": "masked_fraction",
    "no_code": "no_code_rate",
    "diversity": "diversity",
    "temperature": "temperature",
}
# held-out evaluation (configs/truncation_task.py: at the start and every few steps) -> metrics key;
# start is the evaluation before RL step 1, end the one after the last step
HELD_OUT = {
    "greedy_pass1": "eval_greedy_pass@1",
    "pass1": "eval_pass@1",
    "pass8": "eval_pass@8",
    "eval_length": "eval_response_length",
    "eval_truncation": "eval_truncation_rate",
}
# --short: a few steps of everything, to check the command end to end (not a result)
SHORT = (
    "train.warm_start_steps=10",
    "data.num_prompts=4",
    "demo.problems_per_op=2",
    "demo.held_out_per_op=1",
    "eval.batch_problems=5",  # the 5 held-out problems in one call, no padding rows
    "train.eval_every=3",  # the held-out evaluation before and after the 3 steps
)


@dataclasses.dataclass(frozen=True)
class Arm:
    """One side of the comparison: the config file's RULE argument and extra KEY=VALUE overrides."""

    name: str
    rule: str
    overrides: tuple = ()
    label: str = ""


def window_size(steps: int) -> int:
    """Steps averaged for the start and end values: an eighth of the run, at least 1."""
    return max(1, round(steps / 8))


def run_config(arm: Arm, seed: int, steps: int, short: bool, out: str):
    from microcoder_jax.cli import load_config

    overrides = [
        *arm.overrides,
        f"seed={seed}",
        f"train.steps={steps}",
        "train.progress=False",
        *(SHORT if short else ()),
    ]
    config = load_config(f"{CONFIG_FILE}:{arm.rule}", overrides)
    if "compile_cache" in config.train:  # shared by every run of the experiment
        config.train.compile_cache = os.path.join(os.path.abspath(out), "compile_cache")
    return config


def training_rows(rows) -> list[dict]:
    """The RL steps' rows of a metrics.jsonl (without the evaluations' rows)."""
    return [r for r in rows if "reward_mean" in r]


def eval_rows(rows) -> list[dict]:
    """The evaluations' rows of a metrics.jsonl, in step order."""
    return sorted((r for r in rows if "eval_pass@1" in r), key=lambda r: r["step"])


def held_out_reports(workdir: str) -> dict:
    """{step: report} of the run's evaluations (WORKDIR/eval/step_N.json)."""
    folder, out = os.path.join(workdir, "eval"), {}
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.startswith("step_") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                out[int(name[5:-5])] = json.load(f)
    return dict(sorted(out.items()))


def _finished(workdir: str, steps: int) -> list[dict] | None:
    from microcoder_jax.trainer.metrics import read_metrics

    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    done = os.path.exists(os.path.join(workdir, "run_done.json"))
    return rows if done and len(training_rows(rows)) == steps else None


def run_all(arms, seeds, steps: int, out: str, *, short: bool = False, log=print) -> dict:
    """Train every arm for every seed (seed-major); returns {arm: {seed: (rows, timing, {step:
    held-out report})}}."""
    from microcoder_jax.trainer import warm_start
    from microcoder_jax.trainer.loop import train

    warm_start.reuse_warm_starts(True)
    results = {a.name: {} for a in arms}
    plan = [(s, a) for s in seeds for a in arms]
    total, t_all, trained = len(plan), time.perf_counter(), 0
    every = max(1, steps // 8)
    for i, (seed, arm) in enumerate(plan):
        workdir = os.path.join(out, "runs", arm.name, f"seed{seed}")
        tag = f"[{i + 1}/{total}] {arm.name} seed {seed}"
        rows = _finished(workdir, steps)
        if rows is not None:
            timing = json.load(open(os.path.join(workdir, "run_done.json")))
            log(f"{tag}: done before, read back")
            results[arm.name][seed] = (rows, timing, held_out_reports(workdir))
            continue
        shutil.rmtree(workdir, ignore_errors=True)
        config = run_config(arm, seed, steps, short, out)
        t0, c0 = time.perf_counter(), time.process_time()

        def on_step(step, r, tag=tag, t0=t0):
            if step % every == 0 or step == steps:
                log(
                    f"{tag} step {step}/{steps}: reward {r['reward_mean']:.3f} length "
                    f"{r['response_length_mean']:.1f} truncated {r['truncation_rate']:.2f} masked "
                    f"{r['masked_fraction']:.2f} diversity {r['diversity']:.3f} T {r['temperature']:g} "
                    f"({time.perf_counter() - t0:.0f} s)"
                )

        train(config, workdir, log_fn=lambda m, tag=tag: log(f"{tag}: {m}"), on_step=on_step)
        timing = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        with open(os.path.join(workdir, "run_done.json"), "w") as f:
            json.dump(timing, f)
        rows = _finished(workdir, steps)
        results[arm.name][seed] = (rows, timing, held_out_reports(workdir))
        elapsed, trained = time.perf_counter() - t_all, trained + 1  # ETA from the runs trained here
        log(
            f"{tag}: finished in {timing['wall_s']:.0f} s wall, {timing['cpu_s']:.0f} s CPU; "
            f"experiment {elapsed / 60:.1f} min, about {elapsed / trained * (total - i - 1) / 60:.1f} min left"
        )
    return results


def series(rows, key) -> np.ndarray:
    """A metric per step (NaN where missing)."""
    out = [r.get(key) for r in rows]
    return np.array([v if isinstance(v, (int, float)) and math.isfinite(v) else np.nan for v in out], float)


def temperature_path(rows) -> list:
    """[[step, temperature], ...]: the first step and every step the temperature changed."""
    path = []
    for r in rows:
        t = r.get("temperature")
        if not path or t != path[-1][1]:
            path.append([r["step"], t])
    return path


def run_summary(rows, steps: int, reports=None) -> dict:
    """One run's start / end values: training quantities averaged over the first / last
    window_size steps, held-out ones from the evaluations before the first and after the last step
    (NaN without them); with `reports`, the start evaluation's pass rate by answer length."""
    w = window_size(steps)
    out: dict = {"start": {}, "end": {}}
    train_rows, evals = training_rows(rows), eval_rows(rows)
    for name, key in QUANTITIES.items():
        values = series(train_rows, key)
        out["start"][name] = float(np.nanmean(values[:w]))
        out["end"][name] = float(np.nanmean(values[-w:]))
    first = [r for r in evals if r["step"] == 0]
    last = [r for r in evals if r["step"] == steps]
    for name, key in HELD_OUT.items():
        out["start"][name] = float(series(first, key)[0]) if first else float("nan")
        out["end"][name] = float(series(last, key)[0]) if last else float("nan")
    for part, step in (("start", 0), ("end", steps)):
        if reports and step in reports:
            out[f"{part}_by_length"] = reports[step]["lengths"]["by_length"]
    reward = series(train_rows, "reward_mean")
    out["peak_reward"] = float(np.nanmax(reward))
    out["peak_reward_step"] = int(train_rows[int(np.nanargmax(reward))]["step"])
    out["temperature_path"] = temperature_path(train_rows)
    return out


def summarize(arms, results, steps: int, meta: dict) -> dict:
    """summary.json: per arm and seed the start / end values (means over window_size steps), the
    peak reward, the temperature path and the run's time; per arm the mean and std over seeds."""
    summary = {**meta, "steps": steps, "window_steps": window_size(steps), "arms": {}}
    for arm in arms:
        per_seed = {}
        for seed, (rows, timing, *reports) in sorted(results[arm.name].items()):
            per_seed[str(seed)] = {**run_summary(rows, steps, *reports), **timing}
        agg = {}
        for part in ("start", "end"):
            for name in (*QUANTITIES, *HELD_OUT):
                v = np.array([s[part][name] for s in per_seed.values()], float)
                agg[f"{part}_{name}"] = {
                    "mean": float(np.mean(v)),
                    "std": float(np.std(v)),
                    "min": float(np.min(v)),
                    "max": float(np.max(v)),
                }
        summary["arms"][arm.name] = {
            "label": arm.label or arm.name,
            "rule": arm.rule,
            "overrides": list(arm.overrides),
            "seeds": per_seed,
            "over_seeds": agg,
        }
    return summary


def paired(summary: dict, arm: str, baseline: str, quantity: str, part: str = "end") -> dict:
    """`arm` minus `baseline` in one quantity, seed by seed (the same seed: the same warm start and
    prompts): how many seeds the difference is positive / negative in, its mean, and a 95%
    Student-t confidence interval of the mean difference (None below 2 seeds)."""
    from scipy import stats

    a, b = summary["arms"][arm]["seeds"], summary["arms"][baseline]["seeds"]
    common = sorted(set(a) & set(b), key=int)
    d = np.array([a[s][part][quantity] - b[s][part][quantity] for s in common], float)
    out: dict = {"seeds": len(d), "positive": int((d > 0).sum()), "negative": int((d < 0).sum())}
    out["mean"] = float(d.mean()) if len(d) else float("nan")
    out["ci95"] = None
    if len(d) >= 2:
        half = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
        out["ci95"] = [out["mean"] - half, out["mean"] + half]
    return out


def comparisons(summary: dict, columns, pairs=()) -> dict:
    """Every arm against the first (the baseline), then each (arm, baseline) of `pairs`, paired by
    seed, in each of `columns` (end values)."""
    names = list(summary["arms"])
    wanted = [(arm, names[0]) for arm in names[1:]] + [p for p in pairs if p[1] != names[0]]
    return {f"{arm} - {base}": {c: paired(summary, arm, base, c) for c in columns} for arm, base in wanted}


def paired_table(summary: dict, columns, pairs=()) -> str:
    """A markdown table of `comparisons`: mean difference [95% CI], and in how many seeds it is > 0 / < 0."""
    lines = ["| difference (end) | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for name, row in comparisons(summary, columns, pairs).items():
        cells = []
        for c in columns:
            r = row[c]
            ci = f" [{r['ci95'][0]:.3g}, {r['ci95'][1]:.3g}]" if r["ci95"] else ""
            cells.append(f"{r['mean']:+.3g}{ci}, >0 in {r['positive']}/{r['seeds']}, <0 in {r['negative']}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def spread(mean: float, std: float, seeds: int) -> str:
    """' ± STD' of an end value over seeds: none for one seed, '± 0' where the seeds agree to float
    rounding (np.std of equal values can be 2e-16), else two significant digits."""
    if seeds < 2:
        return ""
    return " ± 0" if std <= 1e-9 * max(1.0, abs(mean)) else f" ± {std:.2g}"


TABLE_COLUMNS = ("reward", "length", "truncation", "masked", "diversity", "greedy_pass1", "pass1", "pass8")
PAIRED_COLUMNS = ("greedy_pass1", "pass1", "pass8", "length", "truncation", "diversity")


def _pool(bins_per_seed) -> list[dict]:
    pooled: dict = {}
    for bins in bins_per_seed:
        for b in bins:
            p = pooled.setdefault((b["from"], b["to"]), [0, 0.0])
            p[0] += b["answers"]
            p[1] += b["answers"] * b["pass_rate"]
    n = len(bins_per_seed)
    return [
        {"from": lo, "to": hi, "answers": a, "pass_rate": passed / a, "seeds": n}
        for (lo, hi), (a, passed) in sorted(pooled.items())
    ]


def length_curve(summary: dict) -> list[dict]:
    """Held-out pass rate by answer length of the starting (warm-started) policy, pooled over seeds:
    every arm of a seed starts from the same params and is evaluated with the same key, so each
    seed is counted once (from the first arm that has it)."""
    per_seed: dict = {}
    for arm in summary["arms"].values():
        for seed, run in arm["seeds"].items():
            if seed not in per_seed and "start_by_length" in run:
                per_seed[seed] = run["start_by_length"]
    return _pool(list(per_seed.values()))


def end_length_curves(summary: dict) -> dict:
    """{arm: held-out pass rate by answer length after the last step, pooled over the arm's seeds}."""
    return {
        name: _pool([run["end_by_length"] for run in arm["seeds"].values() if "end_by_length" in run])
        for name, arm in summary["arms"].items()
    }


MIN_BIN_ANSWERS = 5  # the length tables and panel leave out bins with fewer answers, all seeds together


def length_table(curves: dict) -> str:
    """A markdown table of pass rate by answer length: one column per curve ({name: curve}), cells
    'pass rate (answers)'; bins with fewer than MIN_BIN_ANSWERS answers in a curve are blank there."""
    names = list(curves)
    bins = sorted({(b["from"], b["to"]) for c in curves.values() for b in c})
    lines = ["| answer length (tokens) | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for lo, hi in bins:
        cells = []
        for name in names:
            b = next((b for b in curves[name] if (b["from"], b["to"]) == (lo, hi)), None)
            if b is not None and b["answers"] >= MIN_BIN_ANSWERS:
                cells.append(f"{b['pass_rate']:.2f} ({b['answers']})")
            else:
                cells.append("")
        if any(cells):
            lines.append(f"| {lo}-{hi} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(summary: dict, columns=TABLE_COLUMNS) -> str:
    """A markdown table: start -> end means over seeds (± std of the end value over seeds, with 2+ seeds)."""
    head = "| arm | " + " | ".join(f"{c} start → end" for c in columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 1)]
    for arm in summary["arms"].values():
        a, n = arm["over_seeds"], len(arm["seeds"])
        cells = [
            f"{a[f'start_{c}']['mean']:.3g} → {a[f'end_{c}']['mean']:.3g}"
            + spread(a[f"end_{c}"]["mean"], a[f"end_{c}"]["std"], n)
            for c in columns
        ]
        lines.append(f"| {arm['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SHORT_NOTE = (
    "--short: a few steps of every arm, one seed, a short warm start: a check of the command end to end, "
    "not a result (rewards and pass rates near 0 are expected)"
)


def write_outputs(
    out: str, summary: dict, results, arms, figure_fn, columns=None, paired_columns=None, pairs=()
) -> None:
    """summary.json (with every arm's paired differences from the first arm and the starting
    policy's pass rate by length), table.md (the arms, the paired differences, the length curve)
    and the curves."""
    os.makedirs(out, exist_ok=True)
    shown, diffs = columns or TABLE_COLUMNS, paired_columns or PAIRED_COLUMNS
    summary = {
        **summary,
        "paired": comparisons(summary, diffs, pairs),
        "start_length_curve": length_curve(summary),
        "end_length_curves": end_length_curves(summary),
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    parts = [table(summary, shown), paired_table(summary, diffs, pairs)]
    if summary.get("short"):  # its zeros must not be read as the experiment's numbers
        parts.insert(0, f"**{SHORT_NOTE}**")
    if summary["start_length_curve"]:
        curves = {"before RL (all arms)": summary["start_length_curve"]}
        curves.update({f"{name}, end": c for name, c in summary["end_length_curves"].items() if c})
        parts.append("Held-out pass rate (answers) by answer length, finished answers:\n\n" + length_table(curves))
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n\n".join(parts) + "\n")
    figure_fn(results, arms, os.path.join(out, "curves.png"), summary)


def parse_args(argv, prog: str, doc: str | None, default_seeds: int, default_steps: int, arm_names=None):
    """The experiment flags; `arm_names`: the experiment's arms, which `--arms` picks from."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory (runs/, summary.json, table.md, curves.png)")
    p.add_argument(
        "--seeds", type=int, default=None, help=f"seeds per arm, 0, 1, ... (default {default_seeds}; --short: 1)"
    )
    p.add_argument("--steps", type=int, default=None, help=f"RL steps per run (default {default_steps}; --short: 3)")
    p.add_argument("--short", action="store_true", help="tiny runs that check the command end to end")
    p.add_argument(
        "--arms",
        default=None,
        help="comma-separated arm names to run, in the experiment's order (default: every arm; the first "
        "one run is the baseline of the paired differences)",
    )
    args = p.parse_args(argv if argv is not None else sys.argv[1:])
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
    args.seeds = args.seeds or (1 if args.short else default_seeds)
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
) -> int:
    """One experiment command: parse the flags, train every arm x seed, then write and print the
    summary, table and curves. `draw` is figure.draw; `title` may use {cap} and {seeds}; `pairs`:
    (arm, baseline) differences to report besides every arm against the first."""
    args = parse_args(
        argv,
        f"python -m microcoder_jax.experiments.{name}",
        doc,
        default_seeds=default_seeds,
        default_steps=40,
        arm_names=[a.name for a in arms],
    )
    if args.arms is not None:  # a subset, in the experiment's order; pairs between arms it keeps
        arms = [a for a in arms if a.name in args.arms]
        pairs = [p for p in pairs if {p[0], p[1]} <= set(args.arms)]
    seeds = list(range(args.seeds))
    results = run_all(arms, seeds, args.steps, args.out, short=args.short, log=lambda m: print(m, flush=True))
    cap = run_config(arms[0], 0, args.steps, args.short, args.out).sampling.max_new_tokens
    summary = summarize(
        arms,
        results,
        args.steps,
        {"experiment": name, "short": args.short, "seeds": seeds, **(meta or {}), "max_new_tokens": cap},
    )

    def fig(results, arms, path, summary):
        curves = (
            (summary["start_length_curve"], summary["end_length_curves"]) if summary["start_length_curve"] else None
        )
        draw(
            results, arms, path, keys=keys, cap=cap, title=title.format(cap=cap, seeds=len(seeds)), length_curves=curves
        )

    write_outputs(args.out, summary, results, arms, fig, columns, paired_columns, pairs)
    if args.short:
        print(SHORT_NOTE)
    print(table(summary, columns) if columns else table(summary))
    print(f"wrote {args.out}/summary.json, table.md, curves.png")
    return 0
