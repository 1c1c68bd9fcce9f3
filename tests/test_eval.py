"""pass@k, grouping by difficulty/platform, the date window, the table."""

import itertools
import math

import pytest

from microcoder_jax.trainer import evaluation as ev
from microcoder_jax.data.dates import in_window
from microcoder_jax.data.problems import Problem, TestCase


def _brute_pass_at_k(n, c, k):
    """Probability that a random k-subset of n samples (c correct) holds a correct one."""
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (8, 1, 4), (8, 7, 2), (6, 0, 6)])
def test_pass_at_k_is_unbiased(n, c, k):
    assert math.isclose(ev.pass_at_k(n, c, k), _brute_pass_at_k(n, c, k), abs_tol=1e-12)


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError):
        ev.pass_at_k(2, 1, 3)


def _p(qid, difficulty, platform, date):
    return Problem(qid, [TestCase("1\n", "1\n")], difficulty=difficulty, platform=platform, contest_date=date)


def test_summarize_groups_and_table():
    problems = [
        _p("a", "easy", "atcoder", "2024-08-01"),
        _p("b", "hard", "leetcode", "2024-09-01"),
        _p("c", "easy", "leetcode", "2025-01-01T00:00:00"),
    ]
    passes = [[True, False], [False, False], [True, True]]
    report = ev.summarize(problems, passes)
    assert report["samples_per_problem"] == 2
    assert math.isclose(report["overall"]["pass@1"], (0.5 + 0 + 1) / 3)
    assert math.isclose(report["overall"]["pass@2"], (1 + 0 + 1) / 3)
    assert report["by_difficulty"]["easy"] == {"problems": 2, "pass@1": 0.75, "pass@2": 1.0}
    assert report["by_platform"]["leetcode"]["problems"] == 2
    table = ev.format_table(report)
    assert "overall" in table and "difficulty=hard" in table and "platform=atcoder" in table
    assert "pass@2" in table.splitlines()[0]


def test_judge_errors_are_neither_passes_nor_fails():
    """A sample the judge could not run is left out: problem b keeps 1 judged sample of 2, so its
    pass@1 is over that one and it is left out of pass@2; the count is reported."""
    problems = [_p("a", "easy", "atcoder", ""), _p("b", "easy", "atcoder", ""), _p("c", "hard", "atcoder", "")]
    passes = [[True, False], [True], []]
    report = ev.summarize(problems, passes, judge_errors=3)
    assert report["samples_per_problem"] == 2 and report["judge_errors"] == 3
    assert math.isclose(report["overall"]["pass@1"], (0.5 + 1.0) / 2)
    assert math.isclose(report["overall"]["pass@2"], 1.0)
    assert report["short_of_k"] == {"pass@1": 1, "pass@2": 2}
    assert math.isnan(report["by_difficulty"]["hard"]["pass@1"])


def test_date_window():
    """One window test for evaluation and the data filter: open without bounds, undated outside any."""
    d = "2024-08-15T10:00:00"
    assert in_window(d) and in_window("") and in_window(None)  # no bound: everything is inside
    assert in_window(d, "2024-08-01", "2024-08-31")
    assert in_window(d, "2024-08-15", "2024-08-15")
    assert not in_window(d, "2024-09-01")
    assert not in_window(d, "", "2024-08-14")
    assert not in_window("", "2024-01-01")  # undated: outside any window
    assert in_window("March 3, 2021", "2021-03-01", "2021-03-31")  # the data readers' spellings too


def test_pass_rate_by_length_bins_the_judged_answers():
    lengths = [3, 5, 8, 8, 16, 16, 16]  # cap 16: the last three are at the cap
    passed = [True, False, True, True, False, False, True]
    bins = ev.by_length(lengths, passed, cap=16, bins=4)  # (0, 4], (4, 8], (8, 12], (12, 16]
    assert bins == [
        {"from": 1, "to": 4, "answers": 1, "pass_rate": 1.0},
        {"from": 5, "to": 8, "answers": 3, "pass_rate": 2 / 3},
        {"from": 13, "to": 16, "answers": 3, "pass_rate": 1 / 3},
    ]  # the empty bin is left out
    assert ev.by_length([], [], cap=16) == []


def test_held_out_demo_problems_are_one_set_apart_from_training():
    from microcoder_jax.data import demo_task

    ops = ("sum", "product")
    held = demo_task.held_out_problems(ops, 3, 2)
    again = demo_task.held_out_problems(ops, 3, 2)
    assert [(p.question_id, p.tests) for p in held] == [(p.question_id, p.tests) for p in again]
    train_ids = {p.question_id for s in (0, 1) for p in demo_task.make_problems(ops, 3, 2, s)}
    assert len(held) == 6 and not train_ids & {p.question_id for p in held}
    assert {p.metadata["op"] for p in held} == set(ops)
