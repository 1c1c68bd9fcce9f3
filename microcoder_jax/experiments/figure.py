"""The experiments' figure: one panel per quantity against the RL step, one colour per arm.

Per arm: the mean over seeds per step (thin, raw), its moving mean (thick), and a band from the
lowest to the highest seed's moving mean (the temperature, which moves in stages, unsmoothed).
Held-out panels (`eval_*` keys) show the evaluations only: mean over seeds with markers, band
lowest to highest seed, unsmoothed.
"""

from __future__ import annotations

import numpy as np

from microcoder_jax.experiments.rows import eval_rows, series, training_rows
from microcoder_jax.experiments.tables import MIN_BIN_ANSWERS
from microcoder_jax.trainer.plot import auto_window, moving_mean

# (metrics key, title, y-axis label with unit)
PANELS = {
    "reward_mean": ("training reward", "reward (fraction of answers passing)"),
    "pass_rate": ("training answers passing every test", "fraction of answers"),
    "response_length_mean": ("response length", "tokens per answer"),
    "truncation_rate": ("truncated answers", "fraction of answers at the cap"),
    "diversity": ("group diversity", "distinct 4-grams / all 4-grams in a group"),
    "masked_fraction": ("masked or filtered answers", "fraction of answers"),
    "temperature": ("sampling temperature", "temperature"),
    "sampler_logprob_gap": ("sampler / learner log-prob gap", "mean |log-prob difference| per token"),
    "entropy": ("policy entropy (train step)", "nats per token"),
    "slot_utilisation": ("sampler slot utilisation", "live slot-steps / (steps x slots)"),
    "eval_greedy_pass@1": ("held-out pass@1, greedy (T = 0)", "fraction of problems solved"),
    "eval_pass@1": ("held-out pass@1 at the eval temperature", "fraction of answers passing"),
    # multi-turn episodes (env.kind=feedback)
    "episode_repaired_frac": ("training: failing first answers repaired", "fraction of failing first answers"),
    "eval_episode_pass_turn2": ("held-out episodes: passed by turn 2", "fraction of episodes"),
    "eval_episode_repaired_frac": ("held-out: failing first answers repaired", "fraction of failing first answers"),
    "eval_episode_repeat_frac": ("held-out: second answer repeats the first", "fraction of second answers"),
}

STEPWISE = {"temperature"}  # drawn unsmoothed


def draw(
    results, arms, path: str, *, keys, title: str, cap: int | None = None, smooth: int = 0, length_curves=None
) -> None:
    """Write the figure to `path` (PNG). `results`: {arm: {seed: (rows, timing, ...)}}; with
    `length_curves` = (start curve, {arm: end curve}) (summary.py: length_curve, end_length_curves), one
    more panel: held-out pass rate against answer length, before RL and after the last step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = len(keys) + (length_curves is not None)
    cols = 3 if panels > 4 else 2
    rows_n = -(-panels // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.2 * cols, 3.8 * rows_n), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes.flat, keys):
        panel_title, ylabel = PANELS[key]
        for colour, arm in zip(colours * 3, arms):
            held_out = key.startswith("eval_")
            pick = eval_rows if held_out else training_rows
            runs = [pick(rows) for rows, *_ in results[arm.name].values()]
            if held_out and runs:  # the evaluations every seed ran (their cadences may differ)
                common = set.intersection(*({r["step"] for r in run} for run in runs))
                runs = [[r for r in run if r["step"] in common] for run in runs]
            if not runs or not min(len(r) for r in runs):
                continue
            n = min(len(r) for r in runs)
            steps = np.array([r["step"] for r in runs[0][:n]])
            values = np.stack([series(r[:n], key) for r in runs])  # [seeds, steps]
            # unsmoothed: a stage change (smoothed it looks like a ramp) and the few evaluations
            w = 1 if key in STEPWISE or held_out else smooth or auto_window(n)
            smoothed = np.stack([moving_mean(v, w) for v in values])
            mean = np.nanmean(values, 0)
            label = f"{arm.label or arm.name} ({len(runs)} seed{'s' if len(runs) != 1 else ''})"
            if held_out:
                ax.plot(steps, mean, color=colour, lw=2.2, marker="o", label=label)
            else:
                ax.plot(steps, mean, color=colour, lw=0.8, alpha=0.45)
                ax.plot(steps, np.nanmean(smoothed, 0), color=colour, lw=2.2, label=label)
            if len(runs) > 1:
                ax.fill_between(steps, np.nanmin(smoothed, 0), np.nanmax(smoothed, 0), color=colour, alpha=0.15, lw=0)
        if key == "response_length_mean" and cap:
            ax.axhline(cap, color="black", ls="--", lw=1)
            ax.text(0.01, cap, f" cap {cap}", transform=ax.get_yaxis_transform(), va="bottom", fontsize=8)
        ax.set_title(panel_title)
        ax.set_xlabel("RL step (rollout batches; 0 = before RL)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if length_curves is not None:
        _length_panel(axes.flat[len(keys)], length_curves, arms, colours, cap)
    for ax in list(axes.flat)[panels:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=9, frameon=False)
    fig.suptitle(
        f"{title}\nthin: mean over seeds per step; thick: its moving mean; band: lowest to highest seed (moving mean)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _length_panel(ax, length_curves, arms, colours, cap) -> None:
    """Held-out pass rate by answer length (bin midpoints; bins with few answers left out)."""
    start, ends = length_curves

    def plot(curve, **style):
        kept = [b for b in curve if b["answers"] >= MIN_BIN_ANSWERS]
        ax.plot([(b["from"] + b["to"]) / 2 for b in kept], [b["pass_rate"] for b in kept], marker="o", **style)

    plot(start, color="black", lw=2.2, ls="--", label="before RL (every arm)")
    for colour, arm in zip(colours * 3, arms):
        if ends.get(arm.name):
            plot(ends[arm.name], color=colour, lw=1.6)
    if cap:
        ax.axvline(cap, color="black", ls=":", lw=1)
    ax.set_title("held-out pass rate by answer length")
    ax.set_xlabel("answer length (tokens; finished answers; dashed: before RL, colours: end)")
    ax.set_ylabel("fraction of answers passing")
    ax.grid(alpha=0.3)
