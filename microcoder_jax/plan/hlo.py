"""Collectives inside loops, and copies of large buffers, read off a compiled program's HLO text.

Every `while` is one loop; its collectives are those in its body and everything the body calls
(fusions, async wrappers, conditionals), except the bodies of loops nested in it, which are loops
of their own. Bytes are the collective's result size per device, per iteration.

One collective libtpu splits into pieces fused into several compute fusions (an "async collective
fusion": every piece is an instruction with the whole result's shape, the same channel_id and an
`async_collective_fusion_config`) is counted once, in the outermost loop holding a piece, or in
none when a piece runs outside every loop. Counted piece by piece, the LM head's gather of a LoRA
log-prob pass (Qwen3-4B on v5e-8: 9 pieces, 7 of them spread over the 36-layer loop) read as
~250 gathers of 742 MiB per micro-batch instead of one.
"""

from __future__ import annotations

import dataclasses
import re

VERSION = "2"  # part of the planner's cache key: a compiled result read with an older reader is redone
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
_CHANNEL = re.compile(r"channel_id=(\d+)")


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
    owned = {body: _owned(body, calls, whiles) for body in whiles}
    parents = {body: _enclosing(container, whiles, calls) for body, (_, container) in whiles.items()}
    home = _chain_homes(comps, owned, parents)
    out = []
    for body, (line, _) in whiles.items():
        found, counted = {}, set()
        for c in owned[body]:
            for ln in comps.get(c, ()):
                m = _OP.search(ln)
                if not m or ln.strip().startswith("ROOT tuple"):
                    continue
                chain = _chain(ln)
                if chain in home and (home[chain] != body or chain in counted):
                    continue  # a piece of a split collective: counted once, in its home loop
                counted.add(chain)
                sizes = _shape_bytes(m.group(1))
                size = max(sizes) if m.group(3) else sum(sizes)
                entry = found.setdefault(m.group(2), [0, 0])
                entry[0] += 1
                entry[1] += size
        trip = _TRIP.search(line)
        cond = re.search(r"condition=%?([\w.\-]+)", line)
        bound, dependent = _condition_bound(comps, calls, cond.group(1) if cond else "")
        out.append(Loop(body, parents[body], int(trip.group(1)) if trip else bound, dependent, found))
    return out


def _owned(body: str, calls: dict, whiles: dict) -> set[str]:
    """The computations one iteration of loop `body` runs: its body and what it calls, except the
    bodies of loops nested in it."""
    seen, stack = set(), [body]
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            stack += [n for n in calls.get(c, ()) if n not in whiles or n == body]
    return seen


def _chain(line: str) -> str | None:
    """The channel_id of a piece of a split collective (async collective fusion), else None."""
    if "async_collective_fusion_config" not in line:
        return None
    m = _CHANNEL.search(line)
    return m.group(1) if m else None


def _chain_homes(comps: dict, owned: dict, parents: dict) -> dict[str, str | None]:
    """channel_id -> the loop that counts a collective split into pieces (several instructions
    share the channel): the outermost loop holding a piece; None when a piece runs outside every
    loop (then no loop counts it)."""
    where: dict[str, set] = {}
    for c, lines in comps.items():
        for ln in lines:
            chain = _chain(ln) if _OP.search(ln) else None
            if chain is not None:
                where.setdefault(chain, set()).add(c)
    depth = lambda b: 0 if parents.get(b) is None else 1 + depth(parents[b])  # noqa: E731
    homes = {}
    for chain, places in where.items():
        if len(places) < 2 and sum(1 for c in places for ln in comps[c] if _chain(ln) == chain) < 2:
            continue  # one instruction: an ordinary collective
        loops_in = {b for b, cs in owned.items() if cs & places}
        inside = set().union(*(owned[b] for b in loops_in)) if loops_in else set()
        homes[chain] = None if places - inside else min(sorted(loops_in), key=depth)
    return homes


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
