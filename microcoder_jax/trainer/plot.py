"""`python -m microcoder_jax.plot --workdir DIR [--smooth N]`: PNG plots of a run's curves.

One panel per quantity family, each with its unit on the y axis: the raw per-step values drawn
thin and a moving mean over N steps drawn thick (the legend says which); step 1 (it includes
compilation) is left out of the time, throughput, phase-share and cost panels; small fractions
(clip fraction, KL) get their own axes; a quantity that never changes gets no panel but is
listed under the title. Reads `metrics.jsonl` (and `warm_start.jsonl` for the demo's supervised
warm start) from the workdir; writes one PNG per panel plus `overview.png` to `DIR/plots/`.
"""

from __future__ import annotations

import argparse
import json
import math
import os

from microcoder_jax.trainer.evaluation import FAILURE_REASONS
from microcoder_jax.trainer.metrics import read_metrics

WARM_START_FILE = "warm_start.jsonl"

# (file name, title, y-axis label with unit, metric keys)
PANELS = (
    ("reward", "training reward and pass rate", "fraction of responses", ("reward_mean", "pass_rate")),
    ("eval", "evaluation pass@1", "pass@1 (fraction of problems)", ("eval_pass@1",)),
    (
        "eval_reasons",
        "why evaluation answers fail (evaluation/FAILURE_REASONS)",
        "fraction of judged answers",
        tuple(f"eval_reason/{r}" for r in FAILURE_REASONS),
    ),
    ("warm_start", "supervised warm start", "next-token loss (nats)", ("loss",)),
    ("length", "response and feedback length", "tokens", ("response_length_mean", "episode_feedback_tokens_mean")),
    # multi-turn episodes (env.kind=feedback; trainer/episodes.py): a key ending in * stands for
    # every turn's, in turn order
    (
        "episodes",
        "multi-turn episodes: passed by turn t, repaired, repeated",
        "fraction of episodes (repeated: of later answers)",
        ("episode_pass_turn*", "episode_repaired_frac", "episode_repeat_frac"),
    ),
    (
        "eval_episodes",
        "evaluation pass@1 after each turn, repaired first answers",
        "pass@1 (fraction of problems)",
        ("eval_episode_pass_turn*", "eval_episode_repaired_frac"),
    ),
    ("turns", "answers per episode", "answers", ("episode_turns_mean", "eval_episode_turns_mean")),
    (
        "truncation",
        "truncation and masking",
        "fraction of responses",
        ("truncation_rate", "masked_fraction", "repetition_rate", "no_code_rate"),
    ),
    ("diversity", "diversity", "fraction of distinct n-grams", ("diversity",)),
    ("entropy", "sampling entropy", "nats per token", ("entropy", "policy_entropy")),
    ("temperature", "sampling temperature", "temperature", ("temperature",)),
    ("clip", "PPO clip fraction", "fraction of tokens clipped", ("clip_fraction",)),
    ("kl", "approximate KL to the sampling policy", "nats per token", ("approx_kl",)),
    ("grad_norm", "gradient norm (before clipping)", "global L2 norm", ("grad_norm",)),
    ("learning_rate", "learning rate", "learning rate", ("learning_rate",)),
    (
        "slots",
        "sampler slot utilisation (paged engine) and stale tokens (partial rollouts)",
        "fraction",
        ("slot_utilisation", "stale_token_frac"),
    ),
    (
        "staleness",
        "staleness: steps between the weights that sampled and those that train",
        "steps (policy versions)",
        ("staleness", "token_age_mean", "token_age_max"),
    ),
    (
        "time",
        "time per step (step 1, with compilation, left out)",
        "seconds",
        ("time_sample_s", "time_judge_s", "time_train_s", "time_step_s"),
    ),
    (
        "throughput_tokens",
        "token throughput (step 1 left out)",
        "tokens per second of the phase",
        ("throughput/gen_tokens_per_s", "throughput/train_tokens_per_s"),
    ),
    (
        "throughput_judge",
        "judge throughput (step 1 left out)",
        "programs or tests per second of judging",
        ("throughput/judge_programs_per_s", "throughput/judge_tests_per_s"),
    ),
    (
        "share",
        "share of the step per phase (step 1 left out)",
        "fraction of the step's seconds",
        ("share/sample", "share/judge", "share/train", "share/other"),
    ),
    (
        "cost",
        "cost per result (step 1 left out)",
        "chip-seconds (devices x step seconds)",
        ("cost/chip_s_per_solved_problem", "cost/chip_s_per_passing_response"),
    ),
)
_SKIP_FIRST = {"time", "throughput_tokens", "throughput_judge", "share", "cost"}  # step 1 compiles
_NO_SMOOTHING = {
    "eval",
    "eval_reasons",
    "eval_episodes",
    "temperature",
    "learning_rate",
}  # sparse points or stepwise by design


def _series(rows, key, skip_first=False):
    points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    if skip_first and points:
        points = points[1:]
    return [p[0] for p in points], [p[1] for p in points]


def _is_constant(values) -> bool:
    return len(values) > 1 and max(values) - min(values) <= 1e-12 * max(1.0, abs(values[0]))


def auto_window(n: int) -> int:
    """The default moving-mean window: about a tenth of the run, at least 1."""
    return max(1, round(n / 10))


def moving_mean(values, window: int):
    """Trailing moving mean (the first points average what exists so far)."""
    if window <= 1:
        return list(values)
    out, acc = [], []
    for v in values:
        acc.append(v)
        acc = acc[-window:]
        out.append(sum(acc) / len(acc))
    return out


def read_warm_start(workdir: str) -> list[dict]:
    path = os.path.join(workdir, WARM_START_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _expand(key: str, rows) -> list[str]:
    """`key`, or for `prefix*` the rows' keys `prefix<n>` in order of n (one per turn)."""
    if not key.endswith("*"):
        return [key]
    prefix = key[:-1]
    found = {k for r in rows for k in r if k.startswith(prefix) and k[len(prefix) :].isdigit()}
    return sorted(found, key=lambda k: int(k[len(prefix) :]))


def collect_panels(rows, warm_rows):
    """[(name, title, ylabel, {key: (x, y)})] of the panels with data, and {key: value} of constants."""
    panels, constants = [], {}
    for name, title, ylabel, keys in PANELS:
        source = warm_rows if name == "warm_start" else rows
        curves = {}
        for key in (k for pattern in keys for k in _expand(pattern, source)):
            x, y = _series(source, key, skip_first=name in _SKIP_FIRST)
            if not x:
                continue
            same = next((k for k, v in curves.items() if v == (x, y)), None)
            if _is_constant(y):
                constants[key] = y[0]
            elif same is not None:  # e.g. reward_mean == pass_rate under the all-or-nothing reward
                curves[f"{same} = {key}"] = curves.pop(same)
            else:
                curves[key] = (x, y)
        if curves:
            panels.append((name, title, ylabel, curves))
    return panels, constants


def _draw(ax, name, title, ylabel, curves, window):
    import matplotlib.pyplot as plt

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (key, (x, y)) in enumerate(curves.items()):
        color = colors[i % len(colors)]
        if name in _NO_SMOOTHING or window <= 1 or len(x) < 3:
            ax.plot(x, y, color=color, marker="o" if len(x) < 30 else None, markersize=3, label=key)
        else:
            ax.plot(x, y, color=color, alpha=0.3, linewidth=0.8, label=f"{key} (raw)")
            ax.plot(x, moving_mean(y, window), color=color, linewidth=2, label=f"{key} (mean of {window} steps)")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("warm-start step" if name == "warm_start" else "RL step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def overview_figure(panels, constants, head: str, window: int):
    """All panels in one figure, titled `head` plus the quantities that stayed constant."""
    import matplotlib.pyplot as plt

    cols = 3
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.4 * nrows + 0.6), squeeze=False)
    for i, (name, title, ylabel, curves) in enumerate(panels):
        _draw(axes[i // cols][i % cols], name, title, ylabel, curves, window)
    for j in range(len(panels), nrows * cols):
        axes[j // cols][j % cols].axis("off")
    subtitle = ", ".join(f"{k} = {v:g}" for k, v in constants.items())
    fig.suptitle(head + (f"\nconstant over the run: {subtitle}" if subtitle else ""), fontsize=12)
    fig.tight_layout()
    return fig


def plot_run(workdir: str, out_dir: str | None = None, smooth: int = 0) -> list[str]:
    """Write one PNG per panel plus `overview.png`; returns the written paths.

    `smooth`: moving-mean window in steps (0 = about a tenth of the run, 1 = raw only).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = os.path.join(workdir, "metrics.jsonl")
    fix = "pass the --workdir of a training run (python -m microcoder_jax.train --workdir=DIR writes DIR/metrics.jsonl)"
    if not os.path.isdir(workdir):
        raise FileNotFoundError(f"--workdir {workdir}: no such folder; {fix}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"--workdir {workdir}: the folder has no metrics.jsonl; {fix}")
    rows = read_metrics(path)
    if not rows:
        raise FileNotFoundError(f"{path} has no rows yet: the run has not finished a step; plot again after it has")
    steps = max(r["step"] for r in rows)  # eval results are rows of their own at the same steps
    window = smooth or auto_window(len({r["step"] for r in rows}))
    panels, constants = collect_panels(rows, read_warm_start(workdir))
    run_name = os.path.basename(os.path.abspath(workdir))
    out_dir = out_dir or os.path.join(workdir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, title, ylabel, curves in panels:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        _draw(ax, name, f"{run_name}: {title}", ylabel, curves, window)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{name}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    overview = overview_figure(panels, constants, f"{run_name}: {steps} RL steps", window)
    path = os.path.join(out_dir, "overview.png")
    overview.savefig(path, dpi=80)
    plt.close(overview)
    return written + [path]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m microcoder_jax.plot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", required=True, help="run directory holding metrics.jsonl")
    parser.add_argument("--out", default=None, help="output directory (default: WORKDIR/plots)")
    parser.add_argument(
        "--smooth",
        type=int,
        default=0,
        help="moving-mean window in steps (default 0: about a tenth of the run; 1: raw only)",
    )
    args = parser.parse_args(argv)
    try:
        paths = plot_run(args.workdir, args.out, args.smooth)
    except FileNotFoundError as e:
        parser.exit(1, f"plot: error: {e}\n")
    for path in paths:
        print(path)
