"""The judge CLI: input-order streaming output, per-row error verdicts, summary, clear errors."""
import json

from microcoder_jax import evaluate
from microcoder_jax.evaluator.problems import Problem, TestCase

LCB_ROW = {"question_id": "lcb1", "platform": "atcoder", "metadata": "{}",
           "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
           "private_test_cases": json.dumps([{"input": "3\n", "output": "9\n", "testtype": "stdin"}])}


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_cli_end_to_end(tmp_path, capsys):
    problems, solutions, out = tmp_path / "p.jsonl", tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    _write_jsonl(problems, [LCB_ROW, Problem("own", [TestCase("", "hi\n")]).to_json()])
    square = "n = int(input())\nprint(n * n)"
    _write_jsonl(solutions, [
        {"question_id": "lcb1", "code": square, "extra": 1},
        {"question_id": "lcb1", "response": f"<think>hmm</think>\n```python\n{square}\n```"},
        {"question_id": "lcb1", "response": "<think>never finished"},
        {"question_id": "missing", "code": "print(1)"},
        "{not json",
        {"question_id": "own", "code": "print('hi')"},
        {"question_id": "lcb1", "code": "n = int(input())\nprint(n + n)"},
        {"question_id": "own"},
    ])
    assert evaluate.main(["--problems", str(problems), "--solutions", str(solutions), "--out", str(out),
                          "--workers", "2", "--timeout", "1", "--reward", "fraction"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(8))
    assert [r["verdict"] for r in rows] == ["passed", "passed", "no_code", "judge_error", "judge_error",
                                            "passed", "wrong_answer", "judge_error"]
    assert rows[3]["question_id"] == "missing" and "unknown question_id" in rows[3]["reason"]
    assert (rows[6]["tests_passed"], rows[6]["tests_total"], rows[6]["reward"]) == (1, 2, 0.5)
    summary = capsys.readouterr().out
    assert "pass rate" in summary and "0.3750" in summary and "programs/s" in summary


def test_cli_reports_unreadable_input(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    code = evaluate.main(["--problems", str(tmp_path / "nope.jsonl"), "--solutions", str(tmp_path / "s.jsonl"),
                          "--out", str(out)])
    assert code == 2 and "error:" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    _write_jsonl(bad, [{"question_id": "x", "tests": "not a list"}])
    assert evaluate.main(["--problems", str(bad), "--solutions", str(bad), "--out", str(out)]) == 2
    assert "row 0" in capsys.readouterr().err
