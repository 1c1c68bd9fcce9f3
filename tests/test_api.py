"""The Python entry point and the reward registry (issue 46): a custom reward, by callable or by
name, replaces the judge's reward and flows into the advantages of a one-step run."""

import math

import pytest

from microcoder_jax import api
from microcoder_jax import config as config_lib
from microcoder_jax.data.problems import Problem, TestCase
from microcoder_jax.judge.program import JudgeResult
from microcoder_jax.judge.rewards import REWARDS, lookup, register_reward
from short_demo import short_demo


def test_builtin_rewards_and_what_they_need_from_the_judge():
    problem = Problem("p", [TestCase("1\n", "1\n")] * 4)
    partial = JudgeResult(False, "wrong_answer", 3, 4, first_failure=1)
    assert lookup("all")(problem, "", partial) == 0.0 and not lookup("all").every_test
    assert lookup("fraction")(problem, "", partial) == 0.75 and lookup("fraction").every_test
    assert math.isnan(lookup("all")(problem, "", JudgeResult(False, "judge_error", 0, 4)))
    # fraction_runs: 0.9 x the share passed, + 0.1 when the program ran cleanly (a wrong answer, not a crash)
    runs = lookup("fraction_runs")
    assert runs.every_test and runs(problem, "", partial) == pytest.approx(0.9 * 0.75 + 0.1)
    assert runs(problem, "", JudgeResult(False, "runtime_error", 1, 4, first_failure=0)) == pytest.approx(0.225)
    assert runs(problem, "", JudgeResult(True, "passed", 4, 4)) == pytest.approx(1.0)
    assert runs(problem, "", JudgeResult(False, "no_code", 0, 4)) == 0.0
    with pytest.raises(ValueError, match="registered: all, fraction, fraction_reads, fraction_runs"):
        lookup("nope")


@pytest.mark.parametrize(
    "code, reads",
    [
        ("print(sum(map(int, input().split())))", True),
        ("import sys\nprint(len(sys.stdin.read().split()))", True),
        ("from sys import stdin\nprint(stdin.readline())", True),
        ("print(open(0).read())", True),
        ("def main():\n    n = int(input())\n    print(n)\n\nif __name__ == '__main__':\n    main()", True),
        ("def g():\n    return input()\n\ndef f():\n    return g()\n\nprint(f())", True),
        ("class A:\n    x = input()", True),
        ("n = 8\nprint(n * 2)  # n = int(input())", False),  # a comment is not a read
        ("print('input()')", False),  # nor a string
        ("def f():\n    return int(input())", False),  # a function never called reads nothing
        ("def f(n):\n    return n\nprint(f(3))", False),
        ("print(open(False))", False),
        ("def (:", False),
        # the other ways programs read: fast-input idioms, methods, aliases, decorators
        ("import os, io\ninput = io.BytesIO(os.read(0, 1 << 20)).readline\nprint(int(input()))", True),
        ("import os\nprint(os.fdopen(0).read())", True),
        ("import fileinput\nprint(sum(int(x) for x in fileinput.input()))", True),
        ("import builtins\nprint(builtins.input())", True),
        ("read = input\nprint(read())", True),
        ("class S:\n    def solve(self):\n        return input()\n\nprint(S().solve())", True),
        ("class S:\n    def __init__(self):\n        self.n = int(input())\n\nprint(S().n)", True),
        ("def log(f):\n    print(input())\n    return f\n\n@log\ndef g():\n    pass", True),
        ("class S:\n    def solve(self):\n        return input()\n\nprint(S())", False),  # never called
        ("f = open('data.txt')\nprint(f.read(0))", False),  # 0 bytes of a file, not descriptor 0
    ],
)
def test_fraction_reads_pays_the_running_bonus_only_to_programs_that_read_stdin(code, reads):
    problem = Problem("p", [TestCase("1\n", "1\n")] * 4)
    wrong = JudgeResult(False, "wrong_answer", 1, 4, first_failure=1)
    response = f"Here:\n```python\n{code}\n```"
    reward = lookup("fraction_reads")
    assert reward.every_test
    assert reward(problem, response, wrong) == pytest.approx(0.9 * 0.25 + 0.1 * reads)
    assert reward(problem, response, JudgeResult(True, "passed", 4, 4)) == pytest.approx(0.9 + 0.1 * reads)
    crash = JudgeResult(False, "runtime_error", 0, 4, first_failure=0)
    assert reward(problem, response, crash) == 0.0  # a crash earns no running bonus, read or not
    assert reward(problem, "no fenced program", wrong) == pytest.approx(0.9 * 0.25)


def test_a_registered_reward_is_a_config_value_and_an_unknown_one_is_refused():
    @register_reward("no_prompt_text")
    def no_prompt_text(problem, response, result):
        return float(result.passed and "Enter" not in response)

    try:
        c = config_lib.demo_config()
        c.judge.reward = "no_prompt_text"
        config_lib.validate(c)
        ok = JudgeResult(True, "passed", 1, 1)
        assert lookup("no_prompt_text")(None, "print(input('Enter a: '))", ok) == 0.0
        assert lookup("no_prompt_text")(None, "print(input())", ok) == 1.0
        c.judge.reward = "nope"
        with pytest.raises(config_lib.ConfigError, match="judge.reward='nope'.*register_reward"):
            config_lib.validate(c)
        with pytest.raises(ValueError, match="already registered"):
            register_reward("no_prompt_text")(lambda p, r, j: 0.0)
    finally:
        REWARDS.pop("no_prompt_text", None)


@pytest.mark.slow
def test_a_custom_reward_flows_into_the_advantages_of_a_one_step_run(tmp_path):
    calls = []

    def odd_length(problem, response, result):  # varies inside groups, unlike the judge's reward here
        value = float(len(response) % 2)
        calls.append((problem.question_id, response, result.verdict, value))
        return value

    try:
        rows = api.train(
            short_demo(1),
            workdir=str(tmp_path / "run"),
            reward=odd_length,
            memory_check=False,
            log_fn=lambda message: None,
        )
    finally:
        REWARDS.pop("odd_length", None)
    (row,) = [r for r in rows if "reward_mean" in r]
    assert len(calls) == row["rows"] == 64  # 8 prompts x G=8, each judged once
    assert all(isinstance(text, str) and verdict for _, text, verdict, _ in calls)
    assert row["reward_mean"] == pytest.approx(sum(v for *_, v in calls) / len(calls))
    # per group: the advantage is nonzero exactly where the custom rewards differ
    groups = [[v for *_, v in calls[g * 8 : (g + 1) * 8]] for g in range(8)]
    spread = sum(len(set(g)) > 1 for g in groups)
    assert row["frac_groups_all_equal"] == pytest.approx(1 - spread / 8)
    assert (row["adv_abs_max"] > 0) == (spread > 0) and spread > 0


def test_problems_given_as_objects_are_written_into_the_workdir(tmp_path):
    from microcoder_jax.api import _files
    from microcoder_jax.data.problems import load_problems

    problems = [Problem("add", [TestCase("1 2\n", "3\n")], question_content="Read a and b; print a + b.")]
    (path,) = _files(problems, str(tmp_path), "problems.jsonl")
    assert [p.question_id for p in load_problems(path)] == ["add"]
    assert _files("train.jsonl", str(tmp_path), "x") == ("train.jsonl",)
