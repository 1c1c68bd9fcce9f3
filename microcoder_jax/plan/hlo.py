"""Collectives inside loops, and copies of large buffers, read off a compiled program's HLO text.

Every `while` is one loop; its collectives are those in its body and everything the body calls
(fusions, async wrappers, conditionals), except the bodies of loops nested in it, which are loops
of their own. Bytes are the collective's result size per device, per iteration.
"""

from __future__ import annotations

import dataclasses
import re

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")
_DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
}
_SHAPE = re.compile(r"\b(" + "|".join(_DTYPE_BYTES) + r")\[([\d,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_OP = re.compile(r"=\s*(.*?)\s(" + "|".join(KINDS) + r")(-start)?\(")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_NAME = re.compile(r"%([\w.\-]+)")
_MEMORY_SPACE = re.compile(r"S\(\d+\)")
_LAYOUT = re.compile(r"\w+\[[\d,]*\]\{[^}]*\}")
_COPY = re.compile(r"=\s*\(?(\w+\[[\d,]*\]).*\scopy(?:-start)?\(")


@dataclasses.dataclass
class Loop:
    name: str
    parent: str | None  # enclosing loop's name
    trip_count: int | None  # XLA's known trip count, else the bound its condition compares to
    data_dependent: bool  # the condition also reads data (decode: every row done): trip_count is a bound
    collectives: dict  # kind -> [count, bytes per iteration]

    @property
    def bytes_per_iteration(self) -> int:
        return sum(b for _, b in self.collectives.values())

    @property
    def count(self) -> int:
        return sum(c for c, _ in self.collectives.values())


def _shape_bytes(text: str) -> list[int]:
    out = []
    for dtype, dims in _SHAPE.findall(text):
        n = 1
        for d in dims.split(","):
            if d:
                n *= int(d)
        out.append(n * _DTYPE_BYTES[dtype])
    return out


def _computations(text: str) -> dict[str, list[str]]:
    comps, current = {}, None
    for line in text.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m and "=" not in line.split("(")[0]:
                current = m.group(1)
                comps[current] = []
        elif line.strip() == "}":
            current = None
        else:
            comps[current].append(line)
    return comps


def loops(text: str) -> list[Loop]:
    """Every while loop of the module with the collectives its iterations run."""
    comps = _computations(text)
    calls, whiles = _call_graph(comps), _whiles(comps)
    out = []
    for body, (line, container) in whiles.items():
        seen, stack, found = set(), [body], {}
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            for ln in comps.get(c, ()):
                m = _OP.search(ln)
                if m and not ln.strip().startswith("ROOT tuple"):
                    sizes = _shape_bytes(m.group(1))
                    size = max(sizes) if m.group(3) else sum(sizes)
                    entry = found.setdefault(m.group(2), [0, 0])
                    entry[0] += 1
                    entry[1] += size
            stack += [n for n in calls.get(c, ()) if n not in whiles or n == body]
        trip = _TRIP.search(line)
        cond = re.search(r"condition=%?([\w.\-]+)", line)
        bound, dependent = _condition_bound(comps, calls, cond.group(1) if cond else "")
        out.append(
            Loop(body, _enclosing(container, whiles, calls), int(trip.group(1)) if trip else bound, dependent, found)
        )
    return out


def _call_graph(comps: dict) -> dict[str, set[str]]:
    """Computation -> the computations its instructions call (fusions, branches, loop bodies)."""
    return {
        c: {n for line in lines for n in _NAME.findall(line.split("=", 1)[-1]) if n in comps and n != c}
        for c, lines in comps.items()
    }


def _whiles(comps: dict) -> dict[str, tuple[str, str]]:
    """Loop body computation -> (its while instruction's line, the computation holding it)."""
    whiles = {}
    for c, lines in comps.items():
        for line in lines:
            body = re.search(r"body=%?([\w.\-]+)", line) if " while(" in line else None
            if body:
                whiles[body.group(1)] = (line, c)
    return whiles


def _condition_bound(comps: dict, calls: dict, cond: str) -> tuple[int | None, bool]:
    """(largest s32 constant the loop condition compares with, whether it also reduces data)."""
    lines, stack, seen = [], [cond], set()
    while stack:
        c = stack.pop()
        if c in seen or c not in comps:
            continue
        seen.add(c)
        lines += comps[c]
        stack += list(calls.get(c, ()))
    constants = [int(v) for ln in lines for v in re.findall(r"s32\[\]\S* constant\((\d+)\)", ln)]
    dependent = any(op in ln for ln in lines for op in (" reduce(", " and(", " or("))
    return (max(constants) if constants else None), dependent


def _enclosing(container: str, whiles: dict, calls: dict) -> str | None:
    """The loop whose body (transitively) contains computation `container`, if any."""
    for body in whiles:
        stack, seen = [body], set()
        while stack:
            c = stack.pop()
            if c == container:
                return body
            if c in seen:
                continue
            seen.add(c)
            stack += [n for n in calls.get(c, ()) if n not in whiles]
    return None


def large_copies(text: str, min_bytes: int) -> int:
    """Copies (sync or async) inside loop bodies whose result holds at least ``min_bytes``: a buffer
    the size of the KV pool copied every step (a layout change XLA inserted) costs its bytes in
    memory and in time. Copies outside loops (a weight laid out once per call) and prefetches (async
    copies that change only the memory space, ``S(n)``: VMEM on a TPU) are not counted."""
    comps = _computations(text)
    calls, stack, inside = _call_graph(comps), list(_whiles(comps)), set()
    while stack:
        c = stack.pop()
        if c not in inside:
            inside.add(c)
            stack += list(calls.get(c, ()))
    found = (_COPY.search(line) for c in inside for line in comps.get(c, ()))
    return sum(1 for m in found if m and _shape_bytes(m.group(1))[0] >= min_bytes and not _is_prefetch(m.string))


def _is_prefetch(line: str) -> bool:
    """An async copy whose source and destination differ only in memory space (same layout)."""
    if " copy-start(" not in line:
        return False
    shapes = _LAYOUT.findall(line.split("copy-start(")[0])
    strip = lambda x: _MEMORY_SPACE.sub("", x)  # noqa: E731
    return len(shapes) >= 2 and strip(shapes[0]) == strip(shapes[1]) and shapes[0] != shapes[1]
