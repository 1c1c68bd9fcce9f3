"""`python -m microcoder_jax.plot --workdir DIR`: PNG plots of a run's main curves from metrics.jsonl."""
from __future__ import annotations

import argparse
import os

from microcoder_jax.metrics import read_metrics

# One figure per panel: (file name, title, metric keys drawn in it).
PANELS = (
    ("reward", "reward and pass rate", ("reward_mean", "pass_rate", "eval_pass@1")),
    ("length", "response length (tokens)", ("response_length_mean",)),
    ("truncation", "truncation and masking", ("truncation_rate", "masked_fraction", "repetition_rate")),
    ("diversity", "diversity", ("diversity", "entropy")),
    ("temperature", "sampling temperature", ("temperature",)),
    ("optimization", "optimization", ("clip_fraction", "approx_kl", "grad_norm")),
    ("learning_rate", "learning rate", ("learning_rate",)),
    ("time", "seconds per step", ("time_sample_s", "time_judge_s", "time_train_s", "time_step_s")),
)


def _series(rows, key):
    points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def plot_run(workdir: str, out_dir: str | None = None, smooth: int = 1) -> list[str]:
    """Write one PNG per panel plus `overview.png`; returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    if not rows:
        raise FileNotFoundError(f"no metrics in {workdir}/metrics.jsonl")
    out_dir = out_dir or os.path.join(workdir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    panels = [(name, title, [k for k in keys if _series(rows, k)[0]]) for name, title, keys in PANELS]
    panels = [p for p in panels if p[2]]
    written = []
    cols = 3
    rows_n = -(-len(panels) // cols)
    overview, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.2 * rows_n), squeeze=False)
    for i, (name, title, keys) in enumerate(panels):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for target in (ax, axes[i // cols][i % cols]):
            for key in keys:
                x, y = _series(rows, key)
                target.plot(x, _smooth(y, smooth), label=key, marker="o" if len(x) < 30 else None,
                            markersize=3)
            target.set_title(title)
            target.set_xlabel("step")
            target.grid(alpha=0.3)
            target.legend(fontsize=8)
        path = os.path.join(out_dir, f"{name}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    for j in range(len(panels), rows_n * cols):
        axes[j // cols][j % cols].axis("off")
    overview.tight_layout()
    path = os.path.join(out_dir, "overview.png")
    overview.savefig(path, dpi=90)
    plt.close(overview)
    return written + [path]


def _smooth(values, window: int):
    if window <= 1:
        return values
    out, acc = [], []
    for v in values:
        acc.append(v)
        acc = acc[-window:]
        out.append(sum(acc) / len(acc))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", required=True, help="run directory holding metrics.jsonl")
    parser.add_argument("--out", default=None, help="output directory (default: WORKDIR/plots)")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window in steps")
    args = parser.parse_args(argv)
    for path in plot_run(args.workdir, args.out, args.smooth):
        print(path)


if __name__ == "__main__":
    main()
