"""The judge CLI: input-order streaming output, per-row error verdicts, summary, clear errors."""

import json

import pytest

from microcoder_jax.judge import cli as evaluate
from microcoder_jax.data.problems import Problem, TestCase

LCB_ROW = {
    "question_id": "lcb1",
    "platform": "atcoder",
    "metadata": "{}",
    "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
    "private_test_cases": json.dumps([{"input": "3\n", "output": "9\n", "testtype": "stdin"}]),
}


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_cli_end_to_end(tmp_path, capsys):
    problems, solutions, out = tmp_path / "p.jsonl", tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    _write_jsonl(problems, [LCB_ROW, Problem("own", [TestCase("", "hi\n")]).to_json()])
    square = "n = int(input())\nprint(n * n)"
    _write_jsonl(
        solutions,
        [
            {"question_id": "lcb1", "code": square, "extra": 1},
            {"question_id": "lcb1", "response": f"<think>hmm</think>\n```python\n{square}\n```"},
            {"question_id": "lcb1", "response": "<think>never finished"},
            {"question_id": "missing", "code": "print(1)"},
            "{not json",
            {"question_id": "own", "code": "print('hi')"},
            {"question_id": "lcb1", "code": "n = int(input())\nprint(n + n)"},
            {"question_id": "own"},
        ],
    )
    assert (
        evaluate.main(
            [
                "--problems",
                str(problems),
                "--solutions",
                str(solutions),
                "--out",
                str(out),
                "--workers",
                "2",
                "--timeout",
                "1",
                "--reward",
                "fraction",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(8))
    assert [r["verdict"] for r in rows] == [
        "passed",
        "passed",
        "no_code",
        "judge_error",
        "judge_error",
        "passed",
        "wrong_answer",
        "judge_error",
    ]
    assert rows[3]["question_id"] == "missing" and "unknown question_id" in rows[3]["reason"]
    assert (rows[6]["tests_passed"], rows[6]["tests_total"], rows[6]["reward"]) == (1, 2, 0.5)
    summary = capsys.readouterr().out
    assert "pass rate" in summary and "0.3750" in summary and "programs/s" in summary
    assert summary.strip().splitlines()[-1] == f"results: {out} (8 rows, one per solution, in input order)"


def test_cli_reports_unreadable_input(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    code = evaluate.main(
        ["--problems", str(tmp_path / "nope.jsonl"), "--solutions", str(tmp_path / "s.jsonl"), "--out", str(out)]
    )
    assert code == 2 and capsys.readouterr().err == f"error: --problems {tmp_path / 'nope.jsonl'}: no such file\n"
    problems = tmp_path / "p.jsonl"
    _write_jsonl(problems, [LCB_ROW])
    code = evaluate.main(["--problems", str(problems), "--solutions", str(tmp_path), "--out", str(out)])
    assert code == 2 and capsys.readouterr().err == f"error: --solutions {tmp_path}: a directory, not a file\n"
    bad = tmp_path / "bad.jsonl"
    _write_jsonl(bad, [{"question_id": "x", "tests": "not a list"}])
    assert evaluate.main(["--problems", str(bad), "--solutions", str(bad), "--out", str(out)]) == 2
    assert "row 0" in capsys.readouterr().err


def test_cli_refuses_an_output_folder_that_does_not_exist(tmp_path, capsys):
    problems = tmp_path / "p.jsonl"
    _write_jsonl(problems, [Problem("own", [TestCase("", "hi\n")]).to_json()])
    out = tmp_path / "no" / "r.jsonl"
    assert evaluate.main(["--problems", str(problems), "--solutions", str(problems), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {out}: no such directory {tmp_path / 'no'}; create it or write elsewhere\n"


def test_cli_refuses_to_write_over_its_inputs(tmp_path, capsys):
    problems, solutions = tmp_path / "p.jsonl", tmp_path / "s.jsonl"
    _write_jsonl(problems, [LCB_ROW])
    _write_jsonl(solutions, [{"question_id": "lcb1", "code": "print(4)"}])
    before = problems.read_text(), solutions.read_text()
    for out, name in (
        (solutions, "--solutions"),
        (problems, "--problems"),
        (tmp_path / "." / "s.jsonl", "--solutions"),
    ):
        code = evaluate.main(["--problems", str(problems), "--solutions", str(solutions), "--out", str(out)])
        assert code == 2 and f"is the {name} file" in capsys.readouterr().err
    assert (problems.read_text(), solutions.read_text()) == before


def test_cli_warns_about_an_empty_problem_file_and_problems_without_tests(tmp_path, caplog):
    empty, problems, solutions, out = (tmp_path / n for n in ("e.jsonl", "p.jsonl", "s.jsonl", "r.jsonl"))
    empty.write_text("")
    _write_jsonl(problems, [Problem("hollow", []).to_json(), LCB_ROW])
    _write_jsonl(solutions, [{"question_id": "hollow", "code": "print(1)"}])
    with caplog.at_level("WARNING"):
        assert evaluate.main(["--problems", str(empty), "--solutions", str(solutions), "--out", str(out)]) == 0
        assert (
            evaluate.main(
                ["--problems", str(problems), "--solutions", str(solutions), "--out", str(out), "--workers", "1"]
            )
            == 0
        )
    messages = [r.getMessage() for r in caplog.records]
    assert any(str(empty) in m and "holds no problems" in m for m in messages)
    assert any(str(problems) in m and "1 problems have no tests" in m and "hollow" in m for m in messages)
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["verdict"] == "judge_error" and "no tests" in row["reason"]


def test_the_judge_command_runs_and_its_old_names_are_gone():
    """`python -m microcoder_jax.judge` is the judge's command; the old `evaluate` alias, kept for
    one release, is gone, and so is the package's old name `evaluator` (`eval` scores a
    checkpoint, `judge` judges programs: one word each)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.judge", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m microcoder_jax.judge "), done.stderr
    old = subprocess.run([sys.executable, "-m", "microcoder_jax.evaluate"], capture_output=True, text=True, timeout=120)
    assert old.returncode != 0 and "No module named microcoder_jax.evaluate" in old.stderr
    old = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.evaluator"], capture_output=True, text=True, timeout=120
    )
    assert old.returncode != 0 and "No module named microcoder_jax.evaluator" in old.stderr
