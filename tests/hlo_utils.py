"""Read a compiled program's HLO text: which collectives run inside its while loops."""

from __future__ import annotations

import collections
import math
import re

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_CALLED = re.compile(r"\b(?:calls|body|condition|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_WHILE = re.compile(r"=\s*\S.*?\bwhile\(.*?\bbody=%?([\w.\-]+)")
_OP = re.compile(r"=\s*(?:\([^=]*\)|\S+)\s+(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def computations(hlo: str) -> dict[str, list[str]]:
    """Computation name -> its instruction lines."""
    comps, name = {}, None
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            name = head.group(1)
            comps[name] = []
        elif name is not None and line.strip() and line.strip() != "}":
            comps[name].append(line)
    return comps


def _reachable(comps: dict[str, list[str]], root: str) -> set[str]:
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in comps:
            continue
        seen.add(name)
        for line in comps[name]:
            todo += _CALLED.findall(line)
            for group in _BRANCHES.findall(line):
                todo += [b.strip().lstrip("%") for b in group.split(",")]
    return seen


def _loop_ops(hlo: str):
    """Per while loop of the program: the collective lines in its body and everything it calls."""
    comps = computations(hlo)
    bodies = [m.group(1) for lines in comps.values() for line in lines if (m := _WHILE.search(line))]
    for body in bodies:
        yield [
            (m.group(1), line)
            for name in _reachable(comps, body)
            for line in comps[name]
            if (m := _OP.search(line)) and "-done(" not in line
        ]


def loop_collectives(hlo: str) -> list[collections.Counter]:
    """One Counter of collective kinds per while loop in the program (its body and all it calls)."""
    return [collections.Counter(kind for kind, _ in ops) for ops in _loop_ops(hlo)]


def loop_all_gathers(hlo: str) -> list[tuple[str, int]]:
    """(result shape, elements) of every all-gather inside any while loop (nested loops count once per loop)."""
    out = []
    for ops in _loop_ops(hlo):
        for kind, line in ops:
            if kind == "all-gather":
                shape = re.search(r"=\s*\(?\s*(\w+\[[\d,]*\])", line).group(1)
                dims = re.search(r"\[([\d,]*)\]", shape).group(1)
                out.append((shape, math.prod(int(d) for d in dims.split(",") if d)))
    return out
