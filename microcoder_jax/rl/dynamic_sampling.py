"""DAPO dynamic sampling on the host: keep only groups whose rewards differ, refill from new prompts.

The train loop calls `add_rollouts` after judging each generation batch; it returns a full
rollout batch once `num_prompts` informative groups are collected. Batches are dicts of numpy
arrays with prompt-major rows (row = prompt * group_size + g); every array is cut by rows, and
every array of two or more dims is [rows, S] in the train step's layout (padded on the left when
generation batches of different prompt buckets meet).
When `max_refills` extra generation batches did not suffice, the batch is topped up with
uninformative groups (zero advantage, so no gradient) and a warning says so: the step's shapes
stay static and training goes on rather than stalling on a too-easy or too-hard prompt set.
`refill_certain` lets a caller that judges groups as they finish (the paged sampler) queue the next
refill as soon as it is sure to be needed, before the current generation batch is fully judged.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import numpy as np

log = logging.getLogger(__name__)


def informative_groups(rewards: np.ndarray, group_size: int) -> np.ndarray:
    """[num_groups] bool: True where a group's rewards are not all equal (nonzero advantages);
    NaN rewards (judge errors, no reward) are left out."""
    r = np.asarray(rewards, np.float32).reshape(-1, group_size)
    seen = np.isfinite(r)
    return np.where(seen, r, -np.inf).max(1) > np.where(seen, r, np.inf).min(1)


def _take_groups(batch: dict, groups: np.ndarray, group_size: int) -> dict:
    rows = (groups[:, None] * group_size + np.arange(group_size)[None, :]).reshape(-1)
    return {k: np.asarray(v)[rows] for k, v in batch.items()}


def _left_pad(x: np.ndarray, width: int) -> np.ndarray:
    """A [rows, S, ...] array widened to `width` columns by zeros on the left."""
    pad = [(0, 0), (width - x.shape[1], 0)] + [(0, 0)] * (x.ndim - 2)
    return np.pad(x, pad)


def _concat(a: Optional[dict], b: dict) -> dict:
    """Rows of `a` then `b`; [rows, S] arrays of a narrower prompt bucket are left-padded.

    A refill can land in another prompt bucket P. The batch layout is [left-padded prompt |
    response]: zeros on the left widen the prompt block and keep every response at column P, with
    attention_mask and response_mask 0 (and tokens / log-probs 0) in the new columns.
    """
    if a is None:
        return b
    out = {}
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.ndim >= 2 and x.shape[1] != y.shape[1]:
            width = max(x.shape[1], y.shape[1])
            x, y = _left_pad(x, width), _left_pad(y, width)
        out[k] = np.concatenate([x, y])
    return out


def _num_groups(batch: Optional[dict], group_size: int) -> int:
    return 0 if batch is None else len(batch["rewards"]) // group_size


@dataclasses.dataclass
class GroupBuffer:
    """Groups collected for the next rollout batch, and how many generation batches it took."""

    kept: Optional[dict] = None
    dropped: Optional[dict] = None
    generations: int = 0


def add_rollouts(
    buffer: GroupBuffer, batch: dict, *, group_size: int, num_prompts: int, max_refills: int
) -> tuple[GroupBuffer, Optional[dict], dict]:
    """Add one judged generation batch; returns (buffer, full batch or None, stats).

    The full batch has exactly `num_prompts` groups: informative ones in arrival order, surplus
    ones discarded. After 1 + `max_refills` generation batches without enough, the rest is filled
    with dropped (all-equal) groups. A returned batch resets the buffer.
    """
    keep = informative_groups(batch["rewards"], group_size)
    kept = _concat(buffer.kept, _take_groups(batch, np.flatnonzero(keep), group_size))
    dropped = _concat(buffer.dropped, _take_groups(batch, np.flatnonzero(~keep), group_size))
    generations = buffer.generations + 1
    have = _num_groups(kept, group_size)
    stats = {
        "ds_generations": generations,
        "ds_informative_groups": have,
        "ds_kept_fraction": float(keep.mean()) if keep.size else 0.0,
    }
    if have >= num_prompts:
        out = _take_groups(kept, np.arange(num_prompts), group_size)
        return GroupBuffer(), out, stats
    if generations <= max_refills:
        return GroupBuffer(kept, dropped, generations), None, stats
    missing = num_prompts - have
    if _num_groups(dropped, group_size) < missing:
        raise RuntimeError(
            f"dynamic sampling: {generations} generation batches gave {have} "
            f"groups in all, fewer than the {num_prompts} prompts of a batch"
        )
    log.warning(
        "dynamic sampling hit max_refills=%d: only %d of %d groups have differing rewards "
        "after %d generation batches; filling %d slots with all-equal groups (zero "
        "advantage). The prompts are too easy or too hard for the current policy.",
        max_refills,
        have,
        num_prompts,
        generations,
        missing,
    )
    filler = _take_groups(dropped, np.arange(missing), group_size)
    stats["ds_filled_groups"] = missing
    return GroupBuffer(), _concat(kept, filler), stats


def refill_certain(buffer: GroupBuffer, pending, *, group_size: int, num_prompts: int) -> bool:
    """True when the batch cannot fill without another generation batch, whatever the verdicts
    still out: informative groups in `buffer` plus those already known in `pending` plus every
    group not fully judged yet stay below `num_prompts`.

    `pending`: (known [rows] bool, rewards [rows]) of each generation batch pushed but not yet
    added, rows prompt-major. It only ever says True where `add_rollouts` would ask for a refill
    once those batches are added, so refilling early keeps the same batches and order.
    """
    have = _num_groups(buffer.kept, group_size)
    for known, rewards in pending:
        done = np.asarray(known).reshape(-1, group_size).all(1)
        informative = informative_groups(np.asarray(rewards), group_size)
        have += int((done & informative).sum()) + int((~done).sum())
    return have < num_prompts
