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


def _fake_run(task="problems", held_out_per_op=0, train_ids=(), eval_ids=()):
    import types

    from microcoder_jax import config as config_lib

    c = config_lib.demo_config()
    c.data.task, c.demo.held_out_per_op = task, held_out_per_op
    problems = lambda ids: [Problem(question_id=i, tests=[]) for i in ids]  # noqa: E731
    return types.SimpleNamespace(
        config=c, eval_problems=problems(eval_ids), prompt_set=types.SimpleNamespace(problems=problems(train_ids))
    )


def test_the_problem_set_says_held_out_or_training():
    demo = ev.problem_set(_fake_run("demo", eval_ids=["a"] * 40))
    assert demo["held_out"] is False and demo["description"].startswith("the 40 training problems (demo.held_out")
    held = ev.problem_set(_fake_run("demo", held_out_per_op=2, eval_ids=["x"] * 10))
    assert held["held_out"] is True and held["description"].startswith("10 held out")
    files = ev.problem_set(_fake_run(train_ids=["a", "b"], eval_ids=["c", "d"]))
    assert files["held_out"] is True and "no question_id in data.train_files" in files["description"]
    assert ev.problem_set(_fake_run(train_ids=["a", "b"], eval_ids=["a", "b"]))["held_out"] is False
    assert (
        "1 of them training problems" in ev.problem_set(_fake_run(train_ids=["a"], eval_ids=["a", "c"]))["description"]
    )
    assert ev.problem_set(_fake_run(eval_ids=["a"]), compared=False)["held_out"] is None


@pytest.mark.slow
def test_eval_names_its_step_and_problems_and_writes_only_under_its_folder(tmp_path, monkeypatch, capsys):
    """The run's eval: the table and eval.json say which step and which problems (the demo's are
    its training problems) and where the start's score is; an exported HF folder DIR is scored into
    DIR-eval/, never into the current directory; --step=0 is refused in one line."""
    import json
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from demo_workdir import make_demo_workdir

    from microcoder_jax import convert

    run = tmp_path / "run"
    make_demo_workdir(str(run), steps=(4, 8))
    os.makedirs(run / "eval")
    (run / "eval" / "step_0.json").write_text(json.dumps({"overall": {"problems": 40, "pass@1": 0.2}}))
    few = ["--config.eval.max_problems=4"]
    assert ev.main([f"--checkpoint={run}", *few]) == 0
    got = capsys.readouterr()
    out = got.out.splitlines()
    assert out[0] == f"scored: step 8 of {run}", out
    # progress on stderr after each batch of problems (the table alone goes to stdout)
    assert "4 of 4 problems at T = " in got.err and got.err.startswith("eval ["), got.err
    assert out[1].startswith("problems: the 4 training problems (demo.held_out_per_op=0"), out
    assert f"the start (step 0, before RL; the run's own eval): pass@1 20.0% ({run}/eval/step_0.json)" in out
    report = json.loads((run / "eval.json").read_text())
    assert report["step"] == 8 and report["problem_set"]["held_out"] is False and report["start"]["pass@1"] == 0.2
    # every judged answer has one failure reason (or passed), with examples of each reason seen
    assert sum(report["reasons"].values()) == 4 and set(report["reasons"]) == set(ev.FAILURE_REASONS)
    assert report["reasons"]["passed"] == sum(report["per_problem"].values())
    assert all(report["reasons"][k] >= len(v) > 0 for k, v in report["examples"].items())
    assert any(line.startswith("answers: ") for line in out)

    assert ev.main([f"--checkpoint={run}", "--step=0"]) == 2
    assert capsys.readouterr().err.startswith("error: --step=0: a run keeps no checkpoint of its starting params")

    hf = tmp_path / "out" / "demo"
    assert convert.main(["--from", str(run), "--to-hf", str(hf)]) == 0
    cwd = tmp_path / "cwd"
    os.makedirs(cwd)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    assert ev.main([f"--checkpoint={hf}", *few]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"scored: the Hugging Face folder {hf}" and out[-1] == f"wrote {hf}-eval/eval.json", out
    assert os.listdir(cwd) == [] and sorted(os.listdir(f"{hf}-eval")) == ["eval.json", "tokenizer"]


def test_failure_reason_takes_the_first_that_applies():
    from microcoder_jax.judge.program import JudgeResult

    wrong = JudgeResult(False, "wrong_answer", 0, 3)
    assert ev.failure_reason(JudgeResult(True, "passed", 3, 3), "print(1)", truncated=True) == "passed"
    assert ev.failure_reason(JudgeResult(False, "no_code", 0, 3), None, truncated=True) == "truncated"
    assert ev.failure_reason(JudgeResult(False, "no_code", 0, 3), None, truncated=False) == "no_code"
    assert ev.failure_reason(wrong, 'a = int(input("Enter a: "))\nprint(a)', truncated=False) == "prompt_text"
    assert ev.failure_reason(wrong, "a = input(f'{x}> ')", truncated=False) == "prompt_text"
    assert ev.failure_reason(wrong, "a = int(input())\nprint(a, '')", truncated=False) == "wrong_answer"
    assert ev.failure_reason(wrong, "a = input('')", truncated=False) == "wrong_answer"  # an empty prompt
    assert ev.failure_reason(JudgeResult(False, "timeout", 0, 3), "while 1: pass", truncated=False) == "timeout"
