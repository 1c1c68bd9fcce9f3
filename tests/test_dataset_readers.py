"""The readers of real dataset layouts (one small fixture of each shape, our own text) and the
drop accounting: every dropped row counted by stage, source and reason, in the stage records and
report.md, one warning line per (source, reason), and `limit=` stopping the scan."""

import json
import logging
import os

import pytest

from microcoder_jax.dataset import asserts, collect, process, report, stages
from microcoder_jax.dataset.readers import parse_solutions

from test_dataset import load_cfg, statement

STARTER = "class Solution:\n    def pairSum(self, nums: List[int], k: int) -> int:\n        "
REFERENCE = (
    "class Solution:\n    def pairSum(self, nums: List[int], k: int) -> int:\n"
    "        return sum(1 for i in range(len(nums)) for j in range(i) if nums[i] + nums[j] == k)\n"
)
CHECK = (
    "def check(candidate):\n    assert candidate(nums = [1, 2, 3], k = 4) == 1\n"
    "    assert candidate([2, 2, 2], 4) == 3\n"
)


def record(row, fmt=None, source="s"):
    return {"source": source, "format": fmt or collect.detect_format(row), "origin": "x:0", "row": row}


def read(row, fmt=None):
    return process.to_problem(record(row, fmt))


# ---------------------------------------------------------------------------------------------
# one fixture per layout


def test_rllm_livecodebench_call_row_takes_func_name_from_starter_code():
    row = {
        "problem": statement("pairs"),
        "starter_code": STARTER,
        "tests": [{"input": "[1, 3]\n4", "output": "1", "testtype": "functional"}],
    }
    p = read(row)
    assert collect.detect_format(row) == "deepcoder"
    assert p.func_name == "pairSum" and p.metadata["func_name_from_starter"] and p.tests[0].kind == "functional"


@pytest.mark.parametrize(
    "solutions, programs",
    [
        ("n = int(input())\nprint(n + 1)\n", ["n = int(input())\nprint(n + 1)\n"]),  # one program as text
        (["print(1)", "print(2)"], ["print(1)", "print(2)"]),
        (json.dumps(["print(1)"]), ["print(1)"]),
        ("['print(1)', \"print('x')\"]", ["print(1)", "print('x')"]),  # a Python literal
        ("{'language': [1, 3], 'solution': ['print 1', 'print(1)']}", ["print(1)"]),  # CodeContests, Python 3 only
    ],
)
def test_solutions_in_every_shape(solutions, programs):
    row = {
        "problem_id": 1,
        "question": statement("sol"),
        "solutions": solutions,
        "input_output": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]}),
    }
    p = read(row)
    assert p.solutions == programs and len(p.tests) == 1 and "solutions_unreadable" not in p.metadata


def test_bad_solutions_field_keeps_the_tests():
    row = {
        "problem_id": 2,
        "question": statement("badsol"),
        "solutions": "['print(1)', ",
        "input_output": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]}),
    }
    p = read(row)
    assert p.solutions == [] and p.metadata["solutions_unreadable"] and len(p.tests) == 1
    assert parse_solutions(42) == ([], False)


def test_rllm_codeforces_test_cases():
    row = {
        "problem": statement("cf") + "\n\nTime Limit: 1000 ms\n",
        "test_cases": [{"input": "2\n1 9\n8 4", "output": "1 9\n4 8"}],
    }
    p = read(row)
    assert collect.detect_format(row) == "deepcoder" and not p.call_based
    assert [(t.input, t.output) for t in p.tests] == [("2\n1 9\n8 4", "1 9\n4 8")]


def test_stringified_codecontests_row():
    row = {
        "name": "brackets",
        "problem": statement("brk"),
        "public_tests": "{'input': ['2\\n()\\n)(\\n'], 'output': ['YES\\nNO\\n']}",
        "private_tests": "{'input': [], 'output': []}",
        "generated_tests": "{'input': ['1\\n(\\n'], 'output': ['NO\\n']}",
        "source": "2",
        "difficulty": "7",
        "cf_rating": "0",
        "cf_tags": "['strings']",
        "solutions": "{'language': [3], 'solution': ['print(1)']}",
        "time_limit": "{'seconds': 2, 'nanos': 0}",
        "memory_limit_bytes": "256000000",
        "input_file": "",
        "output_file": "",
    }
    p = read(row)
    assert collect.detect_format(row) == "codecontests" and p.question_id == "s/brackets"
    assert [t.output for t in p.tests] == ["YES\nNO\n", "NO\n"] and p.platform == "codeforces"
    assert p.difficulty == "easy" and p.metadata["time_limit"] == 2.0 and p.metadata["tags"] == ["strings"]
    assert p.solutions == ["print(1)"]


def test_codecontests_intermediate_row():
    row = {"problem": statement("ccmid"), "tests": {"input": ["1 2\n", "3 4\n"], "output": ["3\n", "7\n"]}}
    p = read(row)
    assert [(t.input, t.output, t.kind) for t in p.tests] == [("1 2\n", "3\n", "stdin"), ("3 4\n", "7\n", "stdin")]


def test_leetcode_literal_asserts_become_functional_tests():
    row = {
        "task_id": "pair-sum",
        "question_id": 9001,
        "difficulty": "Easy",
        "problem_description": statement("lc"),
        "starter_code": STARTER,
        "entry_point": "Solution().pairSum",
        "prompt": "from typing import *\n",
        "test": CHECK,
        "completion": REFERENCE,
        "estimated_date": "2021-07-01",
    }
    p = read(row)
    assert collect.detect_format(row) == "leetcode" and p.func_name == "pairSum"
    assert [(t.input, t.output, t.kind) for t in p.tests] == [
        ("[1, 2, 3]\n4", "1", "functional"),
        ("[2, 2, 2]\n4", "3", "functional"),
    ]
    assert p.solutions == [REFERENCE] and p.contest_date == "2021-07-01" and p.difficulty == "easy"


def test_leetcode_helper_asserts_stay_assert_tests():
    helpers = "from typing import *\n\ndef as_list(n):\n    return [1] * n\n"
    row = {
        "task_id": "ones",
        "starter_code": STARTER,
        "entry_point": "Solution().pairSum",
        "prompt": helpers,
        "test": "def check(candidate):\n    assert candidate(as_list(3), 2) == 3\n",
        "completion": REFERENCE,
    }
    p = read(row)
    assert [t.kind for t in p.tests] == ["assert"] and p.metadata["assert_tests"]
    assert "def as_list" in p.tests[0].input and "def check" in p.tests[0].input


def test_rllm_leetcode_row_and_entry_point_mismatch():
    problem = (
        "Please solve the programming task below using a self-contained code snippet in a markdown code "
        f"block.\n\n{statement('rl')}\n\u00a0\nPlease complete the following python code precisely:\n"
        f"```python\n{STARTER.rstrip()}\n```"
    )
    row = {
        "problem": problem,
        "completion": REFERENCE,
        "tests": {"functional": CHECK + "\n\ncheck(Solution().pairSum)"},
    }
    p = read(row)
    assert p.func_name == "pairSum" and p.starter_code.startswith("class Solution") and len(p.tests) == 2
    assert p.question_content == statement("rl")
    wrong = {**row, "tests": {"functional": CHECK + "\n\ncheck(Solution().otherName)"}}
    with pytest.raises(ValueError, match="calls otherName"):
        read(wrong)


def test_assert_parsing_edges():
    assert asserts.parameters(STARTER, "pairSum") == ["nums", "k"]
    assert asserts.literal_tests("def check(candidate):\n    assert candidate({1, 2}) == 2\n", ["s"]) is None
    assert asserts.literal_tests("def check(c):\n    x = c(1)\n    assert x == 1\n", ["a"]) is None
    assert asserts.split_check("def check(candidate):\n    pass\ncheck(add)\n")[1] == "add"


@pytest.fixture()
def folders(tmp_path):
    """A raw APPS checkout (train/0001 good, train/0002 without tests) and a Kattis package."""
    good = tmp_path / "apps" / "train" / "0001"
    good.mkdir(parents=True)
    (good / "question.txt").write_text(statement("appsdir"))
    (good / "input_output.json").write_text(json.dumps({"inputs": ["2\n", "-1\n"], "outputs": ["4\n", "neg\n"]}))
    (good / "solutions.json").write_text(
        json.dumps(["n = int(input())\nif n < 0:\n    print('neg')\n    return\nprint(2 * n)\n"])
    )
    (good / "metadata.json").write_text(json.dumps({"difficulty": "interview", "url": "https://example.org/1"}))
    (tmp_path / "apps" / "train" / "0002").mkdir()
    (tmp_path / "apps" / "train" / "0002" / "question.txt").write_text(statement("appsnotests"))
    kattis = tmp_path / "kattis" / "addtwo"
    for sub in (
        "problem_statement",
        "data/sample",
        "data/secret/group1",
        "submissions/accepted",
        "submissions/wrong_answer",
    ):
        (kattis / sub).mkdir(parents=True)
    (kattis / "problem.yaml").write_text("name: Add Two\nsource: Our Contest\nlimits:\n  time_limit: 2\n")
    (kattis / "README.md").write_text("This folder was exported by a tool; see the package format documentation.")
    (kattis / "problem_statement" / "problem.en.tex").write_text(
        "\\problemname{Add Two}\n% a comment\nRead $n$ and print $n+2$. "
        + statement("kattis")
        + "\n\\section*{Input}\nOne integer.\n\\section*{Output}\nThe \\emph{sum}.\n"
    )
    (kattis / "data" / "sample" / "1.in").write_text("1\n")
    (kattis / "data" / "sample" / "1.ans").write_text("3\n")
    (kattis / "data" / "secret" / "group1" / "2.in").write_text("5\n")
    (kattis / "data" / "secret" / "group1" / "2.ans").write_text("7\n")
    (kattis / "submissions" / "accepted" / "ok.py").write_text("print(int(input()) + 2)\n")
    (kattis / "submissions" / "wrong_answer" / "bad.py").write_text("print(0)\n")
    return tmp_path


def test_raw_apps_folders(folders):
    stats = {}
    records = list(collect.iter_source({"name": "apps", "path": str(folders / "apps"), "format": "dir"}, stats))
    assert stats == {"rows": 1, "dropped": {"no_tests": 1}}
    p = process.to_problem(records[0])
    assert records[0]["format"] == "apps" and p.question_id == "apps/0001" and p.difficulty == "medium"
    assert [t.output for t in p.tests] == ["4\n", "neg\n"] and "return" in p.solutions[0]
    assert p.metadata["stdin_harness"] == "apps"  # APPS references may `return` at top level


def test_kattis_package(folders):
    stats = {}
    records = list(collect.iter_source({"name": "kt", "path": str(folders / "kattis"), "format": "dir"}, stats))
    p = process.to_problem(records[0])
    assert stats == {"rows": 1} and p.question_id == "kt/addtwo"
    assert p.question_content.startswith("Add Two\n\nRead $n$") and "exported by a tool" not in p.question_content
    assert "Input\n\nOne integer." in p.question_content and "comment" not in p.question_content
    assert [(t.input, t.output) for t in p.tests] == [("1\n", "3\n"), ("5\n", "7\n")]  # sample first
    assert p.solutions == ["print(int(input()) + 2)\n"] and p.metadata["time_limit"] == 2.0
    assert "stdin_harness" not in p.metadata  # ours semantics for everything but APPS/TACO


def test_harness_chosen_per_source():
    row = {"problem": statement("taco"), "tests": json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})}
    assert "stdin_harness" not in process.to_problem(record(row)).metadata
    assert process.to_problem({**record(row), "harness": "apps"}).metadata["stdin_harness"] == "apps"
    with pytest.raises(ValueError, match="harness"):
        process.to_problem({**record(row), "harness": "bogus"})


# ---------------------------------------------------------------------------------------------
# drops: one fixture per reason, counted in the records and the report


def _ours(qid, **kw):
    return {"question_id": qid, "tests": [{"input": "1\n", "output": "1\n"}], **kw}


PROCESS_DROPS = {
    "no_tests": {"problem": statement("nt"), "tests": []},
    "bad_tests": {"problem": statement("bt"), "tests": "[{'input': '1'"},
    "no_func_name": {"problem": statement("nf"), "tests": [{"input": "1", "output": "1", "testtype": "functional"}]},
    "entry_point_mismatch": {
        "starter_code": STARTER,
        "entry_point": "Solution().other",
        "test": CHECK,
        "completion": REFERENCE,
    },
    "mixed_test_kinds": {
        "problem": statement("mx"),
        "metadata": {"func_name": "f"},
        "tests": [
            {"input": "1", "output": "1", "testtype": "stdin"},
            {"input": "1", "output": "1", "testtype": "functional"},
        ],
    },
    "no_id": {"problem": "", "public_tests": {"input": ["1\n"], "output": ["1\n"]}},
    "malformed": _ours("bad", tests=[{"input": "1\n", "output": "1\n", "weight": 2}]),
}


@pytest.fixture()
def drop_dump(tmp_path):
    rows = [
        json.dumps(_ours("keep")),
        json.dumps(_ours("keep")),  # the second: duplicate_id
        "{broken",
        "[1, 2]",
        json.dumps({"unrelated": True}),
    ]  # invalid_json, not_an_object, unknown_format
    rows += [json.dumps(r) for r in PROCESS_DROPS.values()]
    (tmp_path / "rows.jsonl").write_text("\n".join(rows) + "\n")
    folders = tmp_path / "folders"
    (folders / "lost").mkdir(parents=True)
    (folders / "lost" / "1.in").write_text("1\n")  # test_without_answer
    (folders / "badmeta").mkdir()
    (folders / "badmeta" / "1.in").write_text("1\n")
    (folders / "badmeta" / "1.out").write_text("1\n")
    (folders / "badmeta" / "meta.json").write_text("{not json")  # bad_folder
    (folders / "badyaml").mkdir()
    (folders / "badyaml" / "problem.yaml").write_text("name: [unclosed\n")  # bad_folder too
    return tmp_path


def test_every_drop_reason_is_counted_and_reported(drop_dump, tmp_path, caplog):
    cfg = load_cfg(rows=(str(drop_dump / "rows.jsonl"), "auto", 0), dirs=(str(drop_dump / "folders"), "dir", 1))
    with cfg.unlocked():
        cfg.workdir = str(tmp_path / "work")
    with caplog.at_level(logging.WARNING):
        records = stages.run_pipeline(cfg, ("collect", "process"))
    collected, processed = records["collect"]["per_source"], records["process"]["per_source"]
    assert collected["rows"]["dropped"] == {"invalid_json": 1, "not_an_object": 1, "unknown_format": 1}
    assert collected["dirs"]["dropped"] == {"bad_folder": 2, "test_without_answer": 1}
    assert processed["rows"]["dropped"] == {**{reason: 1 for reason in PROCESS_DROPS}, "duplicate_id": 1}
    assert processed["rows"]["problems"] == 1 and records["process"]["problems"] == 1
    assert records["collect"]["dropped"] == 6 and records["process"]["dropped"] == len(PROCESS_DROPS) + 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5 + len(PROCESS_DROPS) + 1  # one line per (source, reason)
    report.write_report(str(tmp_path), [], {"collect": records["collect"], "process": records["process"]})
    md = open(os.path.join(tmp_path, "report.md")).read()
    assert "| rows | 9 | 0 | 3 | 1 | 8 | 0 |" in md  # collected, unreadable files, dropped, problems...
    assert "| dirs | 0 | 0 | 3 | 0 | 0 | 0 |" in md
    table = [line.split(" | ") for line in md.splitlines() if line.startswith(("| collect |", "| process |"))]
    counted = sum(int(cells[-1].rstrip(" |")) for cells in table if len(cells) == 4)
    assert counted == records["collect"]["dropped"] + records["process"]["dropped"]


def test_one_warning_per_reason_and_limit_stops_the_scan(tmp_path, caplog):
    rows = [json.dumps(_ours("a"))] + [json.dumps({"unrelated": i}) for i in range(5)] + ["{broken"] * 3
    (tmp_path / "r.jsonl").write_text("\n".join(rows) + "\n")
    stats = {}
    with caplog.at_level(logging.WARNING):
        records = list(collect.iter_source({"name": "s", "path": str(tmp_path / "r.jsonl")}, stats))
    assert len(records) == 1 and stats["dropped"] == {"unknown_format": 5, "invalid_json": 3}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and any("dropped 5 rows: unknown_format" in line for line in lines)
    stats = {}
    limited = list(collect.iter_source({"name": "s", "path": str(tmp_path / "r.jsonl"), "limit": 4}, stats))
    assert len(limited) == 1 and stats == {"rows": 1, "dropped": {"unknown_format": 3}}  # the 4 first rows only


def test_kattis_custom_validation_needs_a_checker(folders):
    from microcoder_jax.dataset import filters

    package = folders / "kattis" / "addtwo"
    (package / "problem.yaml").write_text("name: Add Two\nvalidation: custom\n")
    (package / ".timelimit").write_text("3\n")
    (p,) = [
        process.to_problem(r)
        for r in collect.iter_source({"name": "kt", "path": str(folders / "kattis"), "format": "dir"}, {})
    ]
    assert p.metadata["custom_validation"] and p.metadata["time_limit"] == 3.0
    _, counts, _ = filters.filter_problems([p], load_cfg().filter)
    assert counts == {"multi_answer_no_checker": 1}
