"""Diversity of a rollout batch from its token ids: distinct-n and mean token entropy.

The temperature scheduler (`sampling.temperature`) reads one of these numbers as its signal.
Everything here is host-side numpy over the sampler's outputs and exact (no n-gram hashing):
n-grams get dense integer ids by repeatedly ranking (id of the (n-1)-gram, next token) pairs,
which is cheap next to sampling the batch (docs/benchmarks.md).

Definitions (a response is the first `lengths[i]` tokens of row i; rows are prompt-major,
row = prompt * group_size + sample):
- `distinct_n`: per response, unique n-grams / n-grams; averaged over responses with >= n tokens.
- `group_distinct_n`: per group of `group_size` responses to one prompt, unique n-grams across the
  group / n-grams in the group; averaged over groups. Falls when the G responses copy each other,
  so it sees the collapse that per-response distinct-n misses. `group_distinct_4` is the
  scheduler's default signal.
- `entropy`: mean over rows of the per-row mean token entropy the sampler measured (of
  softmax(logits / T)), when it is passed in.
Undefined means (no response long enough) are NaN, so a consumer can tell "no data" from zero.
"""

from __future__ import annotations

import numpy as np

MAX_N = 4


def _ngram_ids(tokens: np.ndarray, lengths: np.ndarray, max_n: int):
    """Yield (n, rows, ids) for n = 1..max_n over the n-grams that lie inside a response.

    `ids` are dense int64 ids of the n-gram starting at each such position, comparable across rows
    (equal n-grams get equal ids), which is what group-level counting needs; `rows` says whose.
    Only valid positions are touched, so padding costs nothing.
    """
    rows, starts = np.nonzero(np.arange(tokens.shape[1])[None, :] < lengths[:, None])
    tokens = np.maximum(tokens.astype(np.int64), 0)
    vocab = int(tokens.max()) + 1 if tokens.size else 1
    ids = tokens[rows, starts]
    for n in range(1, max_n + 1):
        if n > 1:
            keep = starts + n - 1 < lengths[rows]
            rows, starts, ids = rows[keep], starts[keep], ids[keep]
            # (n-1)-gram at t extended by the token at t + n - 1; ids stay < N * L: no overflow.
            _, ids = np.unique(ids * vocab + tokens[rows, starts + n - 1], return_inverse=True)
            ids = ids.reshape(-1).astype(np.int64)
        yield n, rows, ids


def _unique_per_owner(ids: np.ndarray, owner: np.ndarray, num_owners: int):
    """Counts of distinct ids and of all ids per owner (a row or a group)."""
    total = np.bincount(owner, minlength=num_owners)
    if ids.size == 0:
        return np.zeros(num_owners, np.int64), total
    span = int(ids.max()) + 1
    keys = np.sort(owner.astype(np.int64) * span + ids)  # sort + diff: faster than np.unique here
    first = np.concatenate([[True], keys[1:] != keys[:-1]])
    return np.bincount(keys[first] // span, minlength=num_owners), total


def _nanmean_ratio(unique: np.ndarray, total: np.ndarray) -> float:
    ok = total > 0
    return float(np.mean(unique[ok] / total[ok])) if ok.any() else float("nan")


def diversity_metrics(tokens, lengths, group_size: int, entropy=None, max_n: int = MAX_N) -> dict:
    """Distinct-n within responses and across groups (n = 1..max_n), plus mean entropy.

    tokens: int [N, L] response token ids (anything after `lengths` is ignored).
    lengths: int [N] response lengths. group_size: G, N must be a multiple of it.
    entropy: optional float [N] per-row mean token entropy from the sampler.
    Returns plain floats: `distinct_{n}`, `group_distinct_{n}`, `entropy`, `length_mean`.
    """
    tokens = np.asarray(tokens)
    num_rows = tokens.shape[0]
    if tokens.ndim != 2 or np.shape(lengths) != (num_rows,):
        raise ValueError(f"tokens must be [N, L] and lengths [N]; got {tokens.shape}, {np.shape(lengths)}")
    lengths = np.clip(np.asarray(lengths, np.int64), 0, tokens.shape[1])
    if group_size < 1 or num_rows % group_size:
        raise ValueError(f"{num_rows} rows do not split into groups of {group_size}")
    out = {}
    for n, rows, ids in _ngram_ids(tokens, lengths, max_n):
        out[f"distinct_{n}"] = _nanmean_ratio(*_unique_per_owner(ids, rows, num_rows))
        out[f"group_distinct_{n}"] = _nanmean_ratio(*_unique_per_owner(ids, rows // group_size, num_rows // group_size))
    for n in range(1, max_n + 1):  # responses too short for any n-gram of this order
        out.setdefault(f"distinct_{n}", float("nan"))
        out.setdefault(f"group_distinct_{n}", float("nan"))
    out["entropy"] = float(np.mean(entropy)) if entropy is not None and np.size(entropy) else float("nan")
    out["length_mean"] = float(lengths.mean()) if num_rows else float("nan")
    return out
