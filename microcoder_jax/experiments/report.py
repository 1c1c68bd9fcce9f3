"""What an experiment writes to its output directory: summary.json, table.md and curves.png."""

from __future__ import annotations

import json
import os

from microcoder_jax.experiments.stats import comparisons
from microcoder_jax.experiments.summary import end_length_curves, length_curve
from microcoder_jax.experiments.tables import PAIRED_COLUMNS, TABLE_COLUMNS, length_table, paired_table, table

SHORT_NOTE = (
    "--short: a few steps of every arm, one seed, a short warm start: a check of the command end to end, "
    "not a result (rewards and pass rates near 0 are expected)"
)


def write_summary(out: str, summary: dict, text: str) -> None:
    """summary.json and table.md (`text`) in `out`, the table printed: an experiment's own report."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text + "\n")
    print(text)


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
