"""The pipeline report: counts per source and per filter rule, and a difficulty histogram PNG."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Sequence

from microcoder_jax.data.problems import Problem

DIFFICULTIES = ("easy", "medium", "hard", "")


def summarize(problems: Sequence[Problem]) -> dict:
    """Kept problems by source, difficulty, I/O kind and verification state."""
    return {
        "per_source": dict(sorted(Counter(p.source for p in problems).items())),
        "per_difficulty": {d or "unknown": n for d, n in sorted(Counter(p.difficulty for p in problems).items())},
        "call_based": sum(p.call_based for p in problems),
        "stdin": sum(not p.call_based for p in problems),
        "verified": dict(Counter(str(p.metadata.get("verified")) for p in problems)),
        "tests_mean": round(sum(len(p.tests) for p in problems) / max(1, len(problems)), 2),
    }


def plot_difficulty(path: str, problems: Sequence[Problem]) -> None:
    """Bars: kept problems per difficulty, stacked by source; plus the measured pass rates when the
    difficulty filter ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [p.metadata["pass_rate"] for p in problems if p.metadata.get("pass_rate") is not None]
    fig, axes = plt.subplots(1, 2 if rates else 1, figsize=(11 if rates else 6, 4), squeeze=False)
    ax = axes[0, 0]
    labels = [d for d in DIFFICULTIES if any(p.difficulty == d for p in problems)] or ["easy", "medium", "hard"]
    bottom = [0] * len(labels)
    for source in sorted({p.source for p in problems}):
        heights = [sum(p.source == source and p.difficulty == d for p in problems) for d in labels]
        ax.bar([d or "unknown" for d in labels], heights, bottom=bottom, label=source)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_title(f"kept problems by difficulty ({len(problems)})")
    ax.set_ylabel("problems")
    if problems:
        ax.legend(fontsize=8)
    if rates:
        axes[0, 1].hist(rates, bins=20, range=(0, 1))
        axes[0, 1].set_title("measured pass rate")
        axes[0, 1].set_xlabel("pass rate")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _markdown(summary: dict, stages: dict) -> str:
    lines = ["# Dataset pipeline report", "", "| stage | counts |", "|---|---|"]
    for name, record in stages.items():
        if record:
            counts = {k: v for k, v in record.items() if k not in ("stage", "fingerprint", "per_source", "shards")}
            lines.append(f"| {name} | {json.dumps(counts, sort_keys=True)} |")
    collected = (stages.get("collect") or {}).get("per_source", {})
    processed = (stages.get("process") or {}).get("per_source", {})
    lines += [
        "",
        "| source | rows collected | unreadable files | dropped at collect | problems | dropped at process | kept |",
        "|---|---|---|---|---|---|---|",
    ]
    for source in sorted(set(collected) | set(processed) | set(summary["per_source"])):
        c, p = collected.get(source, {}), processed.get(source, {})
        lines.append(
            f"| {source} | {c.get('rows', 0)} | {c.get('unreadable_files', 0)} | "
            f"{sum(c.get('dropped', {}).values())} | "
            f"{p.get('problems', 0)} | {sum(p.get('dropped', {}).values())} | {summary['per_source'].get(source, 0)} |"
        )
    lines += ["", "| stage | source | drop reason | rows |", "|---|---|---|---|"]
    for stage, per_source in (("collect", collected), ("process", processed)):
        for source in sorted(per_source):
            lines += [
                f"| {stage} | {source} | {reason} | {n} |"
                for reason, n in sorted(per_source[source].get("dropped", {}).items())
            ]
    removed = (stages.get("filter") or {}).get("removed", {})
    lines += ["", "| filter rule | problems |", "|---|---|"]
    lines += [f"| {rule} | {n} |" for rule, n in sorted(removed.items())]
    lines += ["", "| difficulty | kept |", "|---|---|"]
    lines += [f"| {d} | {n} |" for d, n in summary["per_difficulty"].items()]
    return "\n".join(lines) + "\n"


def write_report(directory: str, problems: Sequence[Problem], stages: dict) -> dict:
    """report.json, report.md and difficulty.png in `directory`; returns the summary."""
    summary = summarize(problems)
    with open(os.path.join(directory, "report.json"), "w", encoding="utf-8") as f:
        json.dump({"kept": summary, "stages": stages}, f, indent=1, sort_keys=True)
    with open(os.path.join(directory, "report.md"), "w", encoding="utf-8") as f:
        f.write(_markdown(summary, stages))
    plot_difficulty(os.path.join(directory, "difficulty.png"), problems)
    return summary
