"""Diversity metrics against brute-force n-gram counting on small hand-made and random batches."""

import math

import numpy as np
import pytest

from microcoder_jax.sampling.diversity import diversity_metrics


def _brute(tokens, lengths, group_size, n):
    rows = [list(map(int, t[:l])) for t, l in zip(tokens, lengths)]
    grams = [[tuple(r[i : i + n]) for i in range(len(r) - n + 1)] for r in rows]
    within = [len(set(g)) / len(g) for g in grams if g]
    across = []
    for start in range(0, len(rows), group_size):
        pooled = [x for g in grams[start : start + group_size] for x in g]
        if pooled:
            across.append(len(set(pooled)) / len(pooled))
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")
    return mean(within), mean(across)


def test_hand_made_example():
    pad = -1
    tokens = np.array([[1, 2, 1, 2, pad], [1, 2, 1, 2, pad], [5, 6, 7, 8, 9], [5, 5, 5, 5, 5]])
    lengths = np.array([4, 4, 5, 5])
    m = diversity_metrics(tokens, lengths, group_size=2, entropy=np.array([1.0, 2.0, 3.0, 4.0]))
    assert m["distinct_1"] == pytest.approx(np.mean([0.5, 0.5, 1.0, 0.2]))
    assert m["distinct_2"] == pytest.approx(np.mean([2 / 3, 2 / 3, 1.0, 0.25]))
    # Group 0: two identical responses halve the across-group ratio; group 1 shares only "5".
    assert m["group_distinct_1"] == pytest.approx(np.mean([2 / 8, 5 / 10]))
    assert m["group_distinct_4"] == pytest.approx(np.mean([1 / 2, 3 / 4]))
    assert m["entropy"] == pytest.approx(2.5)
    assert m["length_mean"] == pytest.approx(4.5)


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 6, size=(12, 30))  # small vocab: many repeated n-grams
    lengths = rng.integers(0, 31, size=12)
    lengths[0] = 2  # too short for 3- and 4-grams
    m = diversity_metrics(tokens, lengths, group_size=4)
    for n in range(1, 5):
        within, across = _brute(tokens, lengths, 4, n)
        assert m[f"distinct_{n}"] == pytest.approx(within)
        assert m[f"group_distinct_{n}"] == pytest.approx(across)
    assert math.isnan(m["entropy"])


def test_undefined_is_nan_and_bad_groups_raise():
    m = diversity_metrics(np.zeros((2, 2), np.int32), np.array([1, 2]), group_size=2)
    assert m["distinct_1"] == pytest.approx((1.0 + 0.5) / 2)
    assert math.isnan(m["distinct_3"]) and math.isnan(m["group_distinct_4"])
    with pytest.raises(ValueError):
        diversity_metrics(np.zeros((3, 4), np.int32), np.array([1, 2, 3]), group_size=2)
