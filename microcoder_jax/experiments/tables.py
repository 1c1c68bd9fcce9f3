"""The experiments' markdown tables: arms start -> end, paired differences, pass rate by length."""

from __future__ import annotations

from microcoder_jax.experiments.stats import comparisons

TABLE_COLUMNS = ("reward", "length", "truncation", "masked", "diversity", "greedy_pass1", "pass1", "pass8")
PAIRED_COLUMNS = ("greedy_pass1", "pass1", "pass8", "length", "truncation", "diversity")
MIN_BIN_ANSWERS = 5  # the length tables and panel leave out bins with fewer answers, all seeds together


def spread(mean: float, std: float, seeds: int) -> str:
    """' ± STD' of an end value over seeds: none for one seed, '± 0' where the seeds agree to float
    rounding (np.std of equal values can be 2e-16), else two significant digits."""
    if seeds < 2:
        return ""
    return " ± 0" if std <= 1e-9 * max(1.0, abs(mean)) else f" ± {std:.2g}"


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
