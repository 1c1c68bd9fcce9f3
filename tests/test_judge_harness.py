"""The judge's per-source stdin harness ("apps": a top-level `return` ends the program, as in the
APPS/TACO harness) and assert-style tests (`check(candidate)`, LeetCode/HumanEval style)."""

import pytest

from microcoder_jax.judge.pool import JudgePool
from microcoder_jax.data.problems import Problem, TestCase

EARLY_RETURN = "n = int(input())\nif n < 0:\n    print('neg')\n    return\nprint(n * 2)\n"
CHECK = (
    "def check(candidate):\n    assert candidate([1, 2]) == 3\n"
    "    assert candidate(nums=[5, 5]) == 10\n    assert candidate(to_list(3)) == 3\n"
)
HELPERS = "def to_list(n):\n    return [1] * n\n\n"
RIGHT = "class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)\n"
WRONG = "class Solution:\n    def total(self, nums: List[int]) -> int:\n        return max(nums)\n"


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=1) as p:
        yield p


def stdin_problem(harness=None):
    meta = {"stdin_harness": harness} if harness else {}
    return Problem("r", [TestCase("3\n", "6\n"), TestCase("-1\n", "neg\n")], metadata=meta)


def test_top_level_return_passes_under_apps_harness_only(pool):
    plain, apps = pool.judge([stdin_problem(), stdin_problem("apps")], [EARLY_RETURN] * 2)
    assert plain.verdict == "compile_error" and "outside function" in plain.reason
    assert apps.passed and apps.tests_passed == 2


def test_apps_harness_keeps_ordinary_programs_as_they_are(pool):
    globals_program = (
        "n = 0\ndef bump():\n    global n\n    n += int(input())\nbump()\nprint(n * 2 if n > 0 else 'neg')\n"
    )
    wrong_return = "n = int(input())\nif n < 0:\n    return\nprint(n * 2)\n"  # prints nothing for -1
    value_return = "n = int(input())\nif n < 0:\n    return print('neg')\nprint(n * 2)\n"
    results = pool.judge([stdin_problem("apps")] * 3, [globals_program, wrong_return, value_return])
    assert [r.verdict for r in results] == ["passed", "wrong_answer", "passed"]


def test_assert_tests_pass_a_right_solution_and_fail_a_wrong_one(pool):
    problem = Problem("a", [TestCase(HELPERS + CHECK, "", "assert")], func_name="total")
    right, wrong, missing = pool.judge([problem] * 3, [RIGHT, WRONG, "x = 1\n"])
    assert right.passed and right.verdict == "passed"
    assert wrong.verdict == "wrong_answer" and "AssertionError" in wrong.reason
    assert missing.verdict == "runtime_error" and "no Solution.total" in missing.reason


def test_broken_assert_test_code_is_a_judge_error(pool):
    problem = Problem(
        "a",
        [TestCase("def check(candidate):\n    assert undefined_helper()\nraise_here()\n", "", "assert")],
        func_name="total",
    )
    (result,) = pool.judge([problem], [RIGHT])
    assert result.verdict == "judge_error" and "test code" in result.reason
