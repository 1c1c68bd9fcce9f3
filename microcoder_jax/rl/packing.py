"""Sequence packing for the two training passes: rows laid end to end instead of padded.

`plan` (host side, NumPy, deterministic) lays each group's rows (a group = one mini-batch of the
train step, or the whole batch for the log-prob pass) into packed rows of `width` tokens: a row's
real tokens (its left-padded prompt and right-padded response, i.e. its attention-mask span) go
whole into one packed row (first-fit decreasing), never split; segment ids (1, 2, ... within a
packed row, 0 = padding) and positions restart per segment. Every group gets the same number of
packed rows R, a multiple of the micro-batch's `micro_rows`, rounded up to a few static sizes per
octave (`bucket`) so a steady state compiles nothing new. Within a micro-batch the packed rows are
split over `devices` (the data axes) in contiguous blocks, so the packed rows are dealt to
devices largest first, in snake order: every device gets about the same tokens.

The packed layout is an index map: `src` [G * R, W] holds each packed token's flat index into
the padded [N, S] arrays, so every per-token input (tokens, masks, loss weights, old and
reference log-probs) follows by `gather` inside the jit, and per-row values (advantages,
temperature) by `row_values`; `scatter` brings packed results back to [N, S].
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from microcoder_jax import sharding


class Packing(NamedTuple):
    """src / segment_ids / positions [G * R, W] int32 (see the module doc); a pytree of arrays."""

    src: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray


def bucket(k: int) -> int:
    """k rounded up to a static size: every integer to 8, then 4 sizes per octave (10, 12, 14, 16, 20..)."""
    if k <= 8:
        return max(k, 1)
    step = 1 << (k.bit_length() - 3)
    return -(-k // step) * step


def row_spans(attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, stop) of each row's real tokens; raises if a row's tokens are not one contiguous span."""
    mask = np.asarray(attention_mask) > 0
    n, s = mask.shape
    any_ = mask.any(1)
    start = np.where(any_, mask.argmax(1), 0)
    stop = np.where(any_, s - mask[:, ::-1].argmax(1), 0)
    if not np.array_equal(mask.sum(1), stop - start):
        raise ValueError(
            "packing needs each row's real tokens in one contiguous span (left-padded prompt + right-padded response)"
        )
    return start.astype(np.int64), stop.astype(np.int64)


def _first_fit_decreasing(lengths: np.ndarray, width: int) -> list[list[int]]:
    bins, room = [], []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if lengths[i] == 0:
            continue
        for b, r in enumerate(room):
            if r >= lengths[i]:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(width - lengths[i])
    return bins


def _deal(bins: list[list[int]], lengths: np.ndarray, k: int, micro_rows: int, devices: int) -> list:
    """Bins placed in the k * micro_rows slots of a group: slot -> bin (or None), balanced by tokens."""
    devices = devices if devices > 0 and micro_rows % devices == 0 else 1
    local = micro_rows // devices
    fill = [int(lengths[b].sum()) for b in bins]
    per_device = [[] for _ in range(devices)]
    for rank, b in enumerate(sorted(range(len(bins)), key=lambda b: (-fill[b], b))):
        lap, j = divmod(rank, devices)
        per_device[j if lap % 2 == 0 else devices - 1 - j].append(bins[b])
    slots = [None] * (k * micro_rows)
    for d, mine in enumerate(per_device):
        for t, b in enumerate(mine):
            micro, pos = divmod(t, local)
            slots[micro * micro_rows + d * local + pos] = b
    return slots


def plan(
    attention_mask,
    *,
    groups: int = 1,
    width: int | None = None,
    micro_rows: int = 1,
    devices: int = 1,
    min_micro: int = 0,
) -> Packing:
    """The packed layout of these rows (see the module doc); `width` defaults to the padded S.

    `groups` consecutive equal slices of the rows are packed separately (the train step's
    mini-batches); `min_micro` is a floor on the micro-batches per group (e.g. the last step's).
    """
    start, stop = row_spans(attention_mask)
    n, s = np.shape(attention_mask)
    w: int = s if width is None else int(width)
    width = w
    lengths = stop - start
    if lengths.max(initial=0) > width:
        raise ValueError(
            f"a row of {int(lengths.max())} tokens does not fit in packed rows of "
            f"rl.pack_width={width}; raise it to at least the longest row"
        )
    if n % groups:
        raise ValueError(f"{n} rows do not split into {groups} groups")
    rows = n // groups
    group_bins = [
        [[g * rows + i for i in b] for b in _first_fit_decreasing(lengths[g * rows : (g + 1) * rows], w)]
        for g in range(groups)
    ]
    k = bucket(max(min_micro, max(-(-len(b) // micro_rows) for b in group_bins)))
    src = np.zeros((groups * k * micro_rows, w), np.int32)
    seg, pos = np.zeros_like(src), np.zeros_like(src)
    for g, bins in enumerate(group_bins):
        for slot, members in enumerate(_deal(bins, lengths, k, micro_rows, devices)):
            at, r = 0, g * k * micro_rows + slot
            for sid, i in enumerate(members or (), start=1):
                length = int(lengths[i])
                src[r, at : at + length] = i * s + np.arange(int(start[i]), int(stop[i]))
                seg[r, at : at + length] = sid
                pos[r, at : at + length] = np.arange(length)
                at += length
    return Packing(src, seg, pos)


def useful_fraction(packing: Packing) -> float:
    """Real tokens over all packed positions."""
    return float((np.asarray(packing.segment_ids) > 0).mean())


# ------------------------------------------------------------------ device side (inside the jit)


def gather(x, packing: Packing):
    """Per-token [N, S, ...] -> packed [G * R, W, ...] (0 at padding)."""
    flat = x.reshape(-1, *x.shape[2:])[packing.src]
    valid = (packing.segment_ids > 0).reshape(packing.src.shape + (1,) * (x.ndim - 2))
    return jnp.where(valid, flat, jnp.zeros((), x.dtype))


def row_values(v, packing: Packing, width: int):
    """Per-row [N] -> per-token packed [G * R, W] (a padded position reads row 0)."""
    return v[packing.src // width]


def scatter(y, packing: Packing, shape: tuple[int, int]):
    """Packed [G * R, W] -> [N, S] (0 where no packed token lands)."""
    size = shape[0] * shape[1]
    index = jnp.where(packing.segment_ids > 0, packing.src, size)
    return jnp.zeros((size,), y.dtype).at[index.reshape(-1)].set(y.reshape(-1), mode="drop").reshape(shape)


# ------------------------------------------------------------------ the two passes' layouts


def micro_batch(cfg, rows: int) -> int:
    """Padded rows per micro-batch of a pass over `rows` rows (the log-prob pass's whole batch, a
    train-step mini-batch): rl.micro_batch_size, at most all of them (`micro_rows`: as packed rows)."""
    return min(cfg.micro_batch_size, rows)


def micro_rows(micro_batch: int, padded_width: int, width: int | None) -> int:
    """Packed rows per micro-batch: the tokens of `micro_batch` padded rows (same memory)."""
    return max(1, micro_batch * padded_width // (width or padded_width))


def for_step(attention_mask, cfg, mesh=None, min_micro: int = 0) -> Packing:
    """The train step's layout: one group per mini-batch, micro-batches of the step's tokens."""
    n, s = np.shape(attention_mask)
    micro = micro_rows(micro_batch(cfg, n // cfg.num_minibatches), s, cfg.pack_width)
    return plan(
        attention_mask,
        groups=cfg.num_minibatches,
        width=cfg.pack_width,
        micro_rows=micro,
        devices=sharding.batch_shards(mesh),
        min_micro=min_micro,
    )


def for_logprobs(attention_mask, cfg, mesh=None) -> tuple[Packing, int]:
    """The log-prob pass's layout (all rows one group) and its micro-batch of packed rows."""
    n, s = np.shape(attention_mask)
    micro = micro_rows(micro_batch(cfg, n), s, cfg.pack_width)
    return plan(attention_mask, width=cfg.pack_width, micro_rows=micro, devices=sharding.batch_shards(mesh)), micro
