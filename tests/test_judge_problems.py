"""The problem schema and its readers: LiveCodeBench, APPS/TACO, our own rows, JSONL/Parquet."""

import base64
import json
import pickle
import zlib

import pytest

from microcoder_jax.data.problems import (
    Problem,
    TestCase,
    func_name_from_starter,
    load_problems,
    private_tests,
    problem_from_row,
    public_tests,
)


def _compress(tests):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


LCB_STDIN = {
    "question_id": "abc123_a",
    "question_title": "Sum",
    "question_content": "Print a+b.",
    "platform": "atcoder",
    "contest_date": "2024-08-03T00:00:00",
    "difficulty": "easy",
    "starter_code": "",
    "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
    "private_test_cases": _compress([{"input": "5 5\n", "output": "10\n", "testtype": "stdin"}]),
    "metadata": "{}",
}

LCB_CALL = {
    "question_id": "3000",
    "question_content": "Return the sum.",
    "platform": "leetcode",
    "contest_date": "2024-01-01T00:00:00",
    "difficulty": "medium",
    "starter_code": "class Solution:\n    def add(self, nums: List[int], k: int) -> int:\n        ",
    "public_test_cases": json.dumps([{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]),
    "private_test_cases": json.dumps([]),
    "metadata": json.dumps({"func_name": "add"}),
}


def test_lcb_stdin_row_decodes_compressed_private_tests():
    p = Problem.from_lcb_row(LCB_STDIN)
    assert p.question_id == "abc123_a" and not p.call_based and p.source == "livecodebench"
    assert p.tests == [TestCase("1 2\n", "3\n", "stdin"), TestCase("5 5\n", "10\n", "stdin")]
    assert public_tests(p) == p.tests[:1] and private_tests(p) == p.tests[1:]  # the public ones first
    assert (p.platform, p.difficulty, p.contest_date) == ("atcoder", "easy", "2024-08-03T00:00:00")


def test_lcb_call_based_row():
    p = Problem.from_lcb_row(LCB_CALL)
    assert p.call_based and p.func_name == "add"
    assert p.tests == [TestCase("[1, 2]\n3", "6", "functional")]
    assert p.starter_code.startswith("class Solution")


def test_lcb_compressed_pickle_with_code_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    row = dict(LCB_STDIN, private_test_cases=base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode())
    with pytest.raises(ValueError, match="neither JSON nor"):
        Problem.from_lcb_row(row)


def test_apps_stdin_and_call_based_rows():
    stdin = {
        "problem_id": 7,
        "question": "q",
        "difficulty": "interview",
        "input_output": json.dumps({"inputs": ["1\n", ["2", "3"]], "outputs": ["1\n", "5\n"]}),
    }
    p = Problem.from_apps_row(stdin)
    assert p.question_id == "7" and not p.call_based
    assert p.tests == [TestCase("1\n", "1\n"), TestCase("2\n3\n", "5\n")]

    call = {
        "problem_id": 8,
        "starter_code": "def f(a, b):",
        "input_output": {"fn_name": "f", "inputs": [[[1, 2], "x"], [[], "y"]], "outputs": [[3], [[0, 1]]]},
    }
    p = Problem.from_apps_row(call)
    assert p.func_name == "f" and p.metadata["apps_outputs_unwrapped"]
    assert p.tests[0] == TestCase('[1, 2]\n"x"', "3", "functional")
    assert json.loads(p.tests[1].output) == [0, 1]

    # Not every output is a one-element list: outputs are kept as they are.
    call["input_output"] = {"fn_name": "f", "inputs": [[1], [2]], "outputs": [[1, 2], 3]}
    p = Problem.from_apps_row(call)
    assert [t.output for t in p.tests] == ["[1, 2]", "3"]
    assert "apps_outputs_unwrapped" not in p.metadata


def test_own_schema_round_trip_and_unknown_keys():
    p = Problem(
        "q1",
        [TestCase("[1]", "2", "functional")],
        func_name="f",
        checker="def check(i, e, a): return True",
        float_tolerance=1e-3,
        source="mine",
        metadata={"k": 1},
    )
    assert Problem.from_json(p.to_json()) == p
    assert Problem.from_json(json.dumps(p.to_json())) == p
    q = Problem.from_json(dict(p.to_json(), extra_field="x"))
    assert q.metadata == {"k": 1, "extra_field": "x"}


def test_func_name_from_the_starter_code_when_metadata_lacks_it():
    p = problem_from_row(dict(LCB_CALL, metadata="{}"))  # rllm-style LCB rows keep it only there
    assert p.func_name == "add" and p.metadata == {"func_name_from_starter": True, "public_tests": 1}
    assert (
        func_name_from_starter(
            "class ListNode:\n    def __init__(self): pass\n\nclass Solution:\n"
            "    def _h(self): pass\n    def go(self, x):\n        "
        )
        == "go"
    )
    assert func_name_from_starter("import math\n\ndef solve(a, b):\n    ") == "solve"
    assert func_name_from_starter("x = 1\n") is None


@pytest.mark.parametrize(
    "row, match",
    [
        (dict(LCB_STDIN, public_test_cases='[{"input": "1"}]', private_test_cases=""), "input' and 'output"),
        (dict(LCB_STDIN, public_test_cases="[]", private_test_cases="[]"), "no test cases"),
        (dict(LCB_CALL, metadata="{}", starter_code=""), "no func_name"),
        ({"input_output": json.dumps({"inputs": ["1"], "outputs": []}), "problem_id": 1}, "1 inputs but 0 outputs"),
        ({"foo": 1}, "unknown row format"),
        ({"question_id": "x", "tests": [{"input": "1", "output": "1", "kind": "bogus"}]}, "kind"),
    ],
)
def test_malformed_rows_raise(row, match):
    with pytest.raises(ValueError, match=match):
        problem_from_row(row)


def test_load_problems_jsonl_mixed_formats_and_malformed_rows(tmp_path, caplog):
    rows = [
        LCB_STDIN,
        LCB_CALL,
        {"problem_id": 9, "input_output": json.dumps({"inputs": ["1"], "outputs": ["1"]})},
        Problem("own", [TestCase("x", "x")]).to_json(),
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    problems = load_problems(path)
    assert [p.question_id for p in problems] == ["abc123_a", "3000", "9", "own"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(LCB_STDIN) + "\n{not json\n" + json.dumps({"question_id": "z", "x": 1}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: row 1 \(invalid JSON"):
        load_problems(bad)
    with caplog.at_level("WARNING"):
        assert [p.question_id for p in load_problems(bad, skip_malformed=True)] == ["abc123_a"]
    assert "skipped 2 malformed" in caplog.text


def test_load_problems_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist([LCB_STDIN, dict(LCB_STDIN, question_id="b")]), path)
    problems = load_problems(path)
    assert [p.question_id for p in problems] == ["abc123_a", "b"]
    assert len(problems[1].tests) == 2
