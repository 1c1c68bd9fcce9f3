"""summary.json's numbers: each run's start / end values, their spread over seeds, and the held-out
pass rate by answer length pooled over seeds."""

from __future__ import annotations

import numpy as np

from microcoder_jax.experiments.rows import eval_rows, series, training_rows

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


def window_size(steps: int) -> int:
    """Steps averaged for the start and end values: an eighth of the run, at least 1."""
    return max(1, round(steps / 8))


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
