"""Duplicate and contamination detection over problem statements, in plain numpy.

- `exact_key`: a digest of the normalised statement; equal keys are exact duplicates.
- `MinHasher` + `near_duplicate_clusters`: MinHash signatures over word shingles, banded LSH for
  candidate pairs, candidates confirmed by their estimated Jaccard similarity.
- `NGramIndex`: word n-grams of an evaluation set; `overlap(text)` is the fraction of a statement's
  n-grams found there (the contamination score).
"""

from __future__ import annotations

import functools
import hashlib
import re
import zlib
from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")
_POLY = np.uint64(0x100000001B3)  # odd multipliers for shingle hashing (FNV prime, golden ratio)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words: punctuation, markup and spacing do not matter."""
    return _WORD.findall(text.lower())


def exact_key(text: str) -> str:
    """A digest of the statement's words: equal for statements that differ only in format."""
    return hashlib.sha1(" ".join(words(text)).encode()).hexdigest()


@functools.lru_cache(maxsize=1 << 20)
def _word_hash(word: str) -> int:
    return zlib.crc32(word.encode())


def shingle_hashes(text: str, k: int) -> np.ndarray:
    """Distinct 32-bit hashes of the statement's word k-shingles (the whole text if shorter).

    Words are hashed once (crc32); a shingle's hash is a polynomial in its words' hashes, computed
    for all shingles at once in wrapping uint64 arithmetic, then mixed and cut to the high 32 bits.
    """
    toks = words(text)
    if not toks:
        return np.zeros(0, np.uint64)
    k = min(k, len(toks))
    h = np.fromiter(map(_word_hash, toks), np.uint64, len(toks))
    n = len(toks) - k + 1
    acc = np.zeros(n, np.uint64)
    for j in range(k):
        acc = acc * _POLY + h[j : j + n]
    return np.unique((acc * _MIX) >> np.uint64(32))


class MinHasher:
    """MinHash with `num_perm` multiply-shift hash functions h(x) = ((a*x + b) mod 2^64) >> 32.

    Multiply-shift with odd 64-bit `a` is a universal family on 32-bit keys; uint64 arithmetic in
    numpy wraps modulo 2^64, which is exactly the modulus the family needs.
    """

    def __init__(self, num_perm: int = 128, shingle: int = 5, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.num_perm, self.shingle = num_perm, shingle
        self._a = (rng.integers(0, 1 << 63, num_perm, dtype=np.uint64) << np.uint64(1)) | np.uint64(1)
        self._b = rng.integers(0, 1 << 63, num_perm, dtype=np.uint64)
        self._a, self._b = self._a[:, None], self._b[:, None]

    def signature(self, text: str) -> np.ndarray:
        """[num_perm] uint64 minima; an empty statement gets all-max (similar to nothing real)."""
        x = shingle_hashes(text, self.shingle)
        if x.size == 0:
            return np.full(self.num_perm, np.iinfo(np.uint64).max, np.uint64)
        h = self._a * x[None, :]  # [num_perm, shingles], updated in place: no extra temporaries
        h += self._b
        h >>= np.uint64(32)
        return h.min(axis=1)


def lsh_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """(bands, rows) with bands*rows <= num_perm whose S-curve midpoint (1/b)^(1/r) sits just
    below `threshold`: LSH then misses few true pairs, and the Jaccard check removes the extra."""
    best = None
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        midpoint = (1.0 / bands) ** (1.0 / rows)
        if midpoint <= threshold:
            gap = threshold - midpoint
            if best is None or gap < best[0]:
                best = (gap, bands, rows)
    return (best[1], best[2]) if best else (num_perm, 1)


def near_duplicate_clusters(
    signatures: np.ndarray, threshold: float, empty: Sequence[bool] | None = None
) -> np.ndarray:
    """Cluster rows of `signatures` [N, num_perm] whose estimated Jaccard >= threshold.

    Returns `root` [N]: the smallest index of each row's cluster (a row is kept iff root[i] == i,
    so the first-seen problem of a cluster survives). Rows flagged `empty` are never clustered.
    """
    n, num_perm = signatures.shape
    bands, rows = lsh_bands(num_perm, threshold)
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    checked: set[tuple[int, int]] = set()
    for band in range(bands):
        buckets: dict[bytes, list[int]] = defaultdict(list)
        block = np.ascontiguousarray(signatures[:, band * rows : (band + 1) * rows])
        for i in range(n):
            if empty is None or not empty[i]:
                buckets[block[i].tobytes()].append(i)
        for members in buckets.values():
            for pos, j in enumerate(members[1:], 1):
                for i in members[:pos]:  # join j to the first earlier member it matches
                    if find(i) == find(j):
                        break
                    if (i, j) in checked:
                        continue
                    checked.add((i, j))
                    if np.mean(signatures[i] == signatures[j]) >= threshold:
                        ri, rj = find(i), find(j)
                        parent[max(ri, rj)] = min(ri, rj)
                        break
    return np.array([find(i) for i in range(n)])


def jaccard(a: str, b: str, k: int) -> float:
    """Exact Jaccard similarity of two statements' shingle sets (for tests and spot checks)."""
    sa, sb = set(shingle_hashes(a, k).tolist()), set(shingle_hashes(b, k).tolist())
    return len(sa & sb) / max(1, len(sa | sb))


class NGramIndex:
    """Word n-grams of a reference (evaluation) set, for n-gram contamination checks.

    An n-gram found in more than `max_df` reference statements is boilerplate ("the first line
    contains an integer t, the number of test cases") and is ignored on both sides.
    """

    def __init__(self, texts: Iterable[str], n: int = 13, max_df: int = 5):
        self.n = n
        df: dict[int, int] = defaultdict(int)
        for text in texts:
            for g in self._grams(text):
                df[g] += 1
        self._common = {g for g, c in df.items() if c > max_df}
        self._grams_set = set(df) - self._common

    def __len__(self) -> int:
        return len(self._grams_set)

    def _grams(self, text: str) -> set[int]:
        toks = words(text)
        n = min(self.n, len(toks))
        if n == 0:
            return set()
        return {hash(tuple(toks[i : i + n])) for i in range(len(toks) - n + 1)}

    def overlap(self, text: str) -> float:
        """Fraction of the statement's (non-boilerplate) n-grams that occur in the reference set."""
        grams = self._grams(text) - self._common
        if not grams:
            return 0.0
        return len(grams & self._grams_set) / len(grams)
