"""Dataset pipeline: readers for every input format, processing, each filter rule, dedup,
contamination, the difficulty band, verify's policy, and the resumable stage runner.

Judging here uses a stand-in pool (the real judge runs in test_dataset_samples.py), so
this module needs no subprocesses and runs in seconds.
"""

import base64
import importlib.util
import json
import os
import pickle
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from microcoder_jax.dataset import collect, dedup, filters, process, stages, verify
from microcoder_jax.data.problems import Problem, TestCase, load_problems

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STATEMENT = (
    "Given an integer N followed by N integers, print the sum of the integers that are strictly "
    "greater than the first one. The first line contains N, the second line the integers."
)


def load_cfg(**sources):
    path = os.path.join(REPO, "configs", "data_pipeline.py")
    spec = importlib.util.spec_from_file_location("data_pipeline_cfg", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config()
    with cfg.unlocked():
        cfg.sources = {name: module.source(*args) for name, args in sources.items()}
    return cfg


def statement(topic: str) -> str:
    """Distinct, long-enough statements so fixtures do not dedup against each other."""
    return f"Problem about {topic}. " + " ".join(f"{topic}{i}" for i in range(40)) + " Print the answer."


# ---------------------------------------------------------------------------------------------
# fixtures in every input format


def lcb_rows():
    private = [{"input": "3\n", "output": "6\n", "testtype": "stdin"}]
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()
    return [
        {
            "question_title": "t",
            "question_content": statement("lcbstdin"),
            "platform": "atcoder",
            "question_id": "abc100_a",
            "contest_id": "abc100",
            "contest_date": "2023-05-06T00:00:00",
            "starter_code": "",
            "difficulty": "easy",
            "public_test_cases": json.dumps([{"input": "2\n", "output": "3\n", "testtype": "stdin"}]),
            "private_test_cases": packed,
            "metadata": "{}",
        },
        {
            "question_title": "f",
            "question_content": statement("lcbcall"),
            "platform": "leetcode",
            "question_id": "3000",
            "contest_id": "w1",
            "contest_date": "2024-09-01T00:00:00",
            "starter_code": "class Solution:\n    def f(self, x: int) -> int:\n        ",
            "difficulty": "medium",
            "public_test_cases": json.dumps([{"input": "2", "output": "4", "testtype": "functional"}]),
            "private_test_cases": "",
            "metadata": json.dumps({"func_name": "f"}),
        },
    ]


def apps_rows():
    return [
        {  # APPS stdin
            "problem_id": 7,
            "question": "-----Input-----\n" + statement("appsstdin"),
            "difficulty": "interview",
            "input_output": json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}),
            "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
            "starter_code": "",
            "url": "https://example.org/7",
        },
        {  # TACO call-based with no starter code
            "name": "double",
            "question": statement("tacocall"),
            "difficulty": "MEDIUM_HARD",
            "source": "codewars",
            "input_output": {"inputs": [[1], [5]], "outputs": [[2], [10]], "fn_name": "double"},
            "solutions": ["def double(x):\n    return 2 * x\n"],
            "starter_code": "",
            "date": "2019-03-01",
        },
    ]


def codecontests_rows():
    def tests(pairs):
        return {"input": [i for i, _ in pairs], "output": [o for _, o in pairs]}

    return [
        {
            "name": "1500_A. Sum",
            "description": statement("ccsum"),
            "public_tests": tests([("1 2\n", "3\n")]),
            "private_tests": tests([("5 5\n", "10\n")]),
            "generated_tests": tests([("0 0\n", "0\n")]),
            "source": 2,
            "difficulty": 7,
            "cf_rating": 2400,
            "solutions": {
                "language": [2, 3, 1],
                "solution": ["int main(){}", "print(sum(map(int, input().split())))", "print 1"],
            },
            "time_limit": {"seconds": 2, "nanos": 500000000},
            "memory_limit_bytes": 256 << 20,
            "input_file": "",
            "output_file": "",
            "cf_tags": ["math"],
        },
        {
            "name": "1500_B. Empty",
            "description": statement("ccempty"),
            "public_tests": tests([]),
            "private_tests": tests([]),
            "generated_tests": tests([]),
            "source": 2,
            "difficulty": 8,
            "cf_rating": 0,
            "solutions": {"language": [], "solution": []},
            "time_limit": None,
            "memory_limit_bytes": 0,
            "input_file": "",
            "output_file": "",
            "cf_tags": [],
        },
    ]


def deepcoder_rows():
    return [
        {
            "problem": "Solve the following coding problem using the programming language python:\n\n"
            + statement("dclcb")
            + "\n\nThe input will be given via stdin and the output should be printed to stdout by your code.\n\n"
            "Now solve the problem by providing the code.",
            "tests": json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}]),
            "metadata": "{}",
        },
        {
            "problem": statement("dcprime"),
            "tests": json.dumps(
                [
                    {"type": "function_call", "fn_name": "inc", "input": [1], "output": [2]},
                    {"type": "function_call", "fn_name": "inc", "input": [4], "output": [5]},
                ]
            ),
        },
        {"problem": statement("dctaco"), "tests": json.dumps({"inputs": ["2\n"], "outputs": ["4\n"]})},
        {
            "problem": statement("dcfunc"),
            "tests": json.dumps(
                [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional", "metadata": {"func_name": "total"}}]
            ),
        },
        {"problem": statement("dcliteral"), "tests": str([{"type": "stdin_stdout", "input": "1\n", "output": "2\n"}])},
        {"problem": statement("dcbad"), "tests": json.dumps([{"type": "weird", "input": "1", "output": "2"}])},
    ]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """Every source format on disk: JSONL (+ a broken line), Parquet, an HF-cache Arrow file,
    DeepCoder JSONL, and a folder of problem folders."""
    root = tmp_path_factory.mktemp("dumps")
    with open(root / "lcb.jsonl", "w") as f:
        for row in lcb_rows():
            f.write(json.dumps(row) + "\n")
        f.write("{not json\n")
        f.write(json.dumps({"unrelated": 1}) + "\n")
    rows = apps_rows()
    rows[1]["input_output"] = json.dumps(rows[1]["input_output"])
    rows[1]["solutions"] = json.dumps(rows[1]["solutions"])
    keys = sorted({k for row in rows for k in row})  # from_pylist takes its columns from row 0
    pq.write_table(pa.Table.from_pylist([{k: row.get(k) for k in keys} for row in rows]), root / "apps.parquet")
    cache = root / "hf" / "deepmind___code_contests" / "default" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    table = pa.Table.from_pylist(codecontests_rows())
    with pa.OSFile(str(cache / "code_contests-train.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    (cache / "dataset_info.json").write_text("{}")
    with open(root / "deepcoder.jsonl", "w") as f:
        for row in deepcoder_rows():
            f.write(json.dumps(row) + "\n")
    good = root / "folders" / "twice"
    (good / "tests").mkdir(parents=True)
    (good / "statement.md").write_text(statement("foldertwice"))
    for i, (inp, out) in enumerate([("1\n", "2\n"), ("4\n", "8\n")]):
        (good / "tests" / f"{i}.in").write_text(inp)
        (good / "tests" / f"{i}.out").write_text(out)
    (good / "solution.py").write_text("print(2 * int(input()))\n")
    (good / "meta.json").write_text(json.dumps({"difficulty": "easy", "contest_date": "2022-01-01"}))
    broken = root / "folders" / "broken"
    broken.mkdir()
    (broken / "statement.md").write_text(statement("folderbroken"))
    (broken / "1.in").write_text("1\n")
    (root / "folders" / "notes").mkdir()
    return root


# ---------------------------------------------------------------------------------------------
# collect + process


def test_processed_problem_round_trips_through_json():
    p = process.to_problem({"format": "lcb", "source": "s", "row": lcb_rows()[0]})
    p.metadata["nested"] = {"a": [1, 2]}
    p.solutions = ["print(1)\n"]
    back = Problem.from_json(json.loads(json.dumps(p.to_json())))
    assert back == p and back.solutions == ["print(1)\n"]


def test_detect_format():
    assert collect.detect_format(lcb_rows()[0]) == "lcb"
    assert collect.detect_format(apps_rows()[0]) == "apps"
    assert collect.detect_format(codecontests_rows()[0]) == "codecontests"
    assert collect.detect_format(deepcoder_rows()[0]) == "deepcoder"
    assert collect.detect_format(Problem("q", [TestCase("1", "1")]).to_json()) == "ours"
    with pytest.raises(ValueError):
        collect.detect_format({"foo": 1})


def _collect(dumps, name, path, fmt="auto"):
    stats = {}
    records = list(collect.iter_source({"name": name, "path": str(path), "format": fmt}, stats))
    return records, stats


def test_jsonl_reader_skips_malformed_rows(dumps):
    records, stats = _collect(dumps, "lcb", dumps / "lcb.jsonl")
    assert [r["format"] for r in records] == ["lcb", "lcb"]
    assert stats == {"rows": 2, "dropped": {"invalid_json": 1, "unknown_format": 1}}


def test_lcb_rows_decode_compressed_tests(dumps):
    records, _ = _collect(dumps, "lcb", dumps / "lcb.jsonl")
    stdin, call = [process.to_problem(r) for r in records]
    assert stdin.question_id == "lcb/abc100_a" and stdin.source == "lcb"
    assert [(t.input, t.output) for t in stdin.tests] == [("2\n", "3\n"), ("3\n", "6\n")]
    assert stdin.contest_date == "2023-05-06" and stdin.difficulty == "easy" and not stdin.call_based
    assert call.func_name == "f" and call.tests[0].kind == "functional"


def test_parquet_apps_and_taco(dumps):
    records, stats = _collect(dumps, "apps", dumps / "apps.parquet")
    assert stats == {"rows": 2}
    apps, taco = [process.to_problem(r) for r in records]
    assert apps.question_id == "apps/7" and apps.difficulty == "medium"
    assert apps.question_content.startswith("Input\n")  # APPS heading made plain
    assert apps.solutions == ["a, b = map(int, input().split())\nprint(a + b)\n"]
    assert taco.func_name == "double" and taco.difficulty == "hard"
    assert [t.output for t in taco.tests] == ["2", "10"]
    assert taco.metadata["starter_synthesized"] and "def double(self, arg0)" in taco.starter_code
    assert taco.contest_date == "2019-03-01" and taco.platform == "codewars"


def test_hf_cache_arrow_codecontests(dumps):
    records, stats = _collect(dumps, "cc", dumps / "hf")
    assert stats == {"rows": 2}  # dataset_info.json is not a row file
    full, empty = [process.to_problem(r) for r in records]
    assert len(full.tests) == 3 and full.platform == "codeforces" and full.difficulty == "hard"
    assert full.solutions == ["print(sum(map(int, input().split())))"]  # Python 3 only
    assert full.metadata["time_limit"] == 2.5 and full.metadata["tags"] == ["math"]
    assert empty.tests == []


def test_deepcoder_shapes(dumps):
    records, stats = _collect(dumps, "dc", dumps / "deepcoder.jsonl")
    assert stats == {"rows": 6}
    lcb, prime, taco, func, literal = [process.to_problem(r) for r in records[:5]]
    assert func.func_name == "total" and func.tests[0].kind == "functional"
    assert literal.tests[0].output == "2\n"
    assert lcb.question_content == statement("dclcb")  # source boilerplate stripped
    assert prime.func_name == "inc" and [t.input for t in prime.tests] == ["1", "4"]
    assert [t.output for t in prime.tests] == ["2", "5"]
    assert taco.tests[0].output == "4\n" and not taco.call_based
    assert lcb.question_id.startswith("dc/sha1-")  # stable id from the statement
    with pytest.raises(ValueError, match="unknown test type"):
        process.to_problem(records[5])
    no_name = {
        **records[3],
        "row": {**records[3]["row"], "tests": json.dumps([{"input": "1", "output": "1", "testtype": "functional"}])},
    }
    with pytest.raises(ValueError, match="need a func_name"):
        process.to_problem(no_name)


def test_problem_folders(dumps):
    records, stats = _collect(dumps, "dir", dumps / "folders", "dir")
    assert stats == {"rows": 1, "dropped": {"test_without_answer": 1}}  # "notes" has no tests: not a problem
    p = process.to_problem(records[0])
    assert p.question_id == "dir/twice" and [t.output for t in p.tests] == ["2\n", "8\n"]
    assert p.solutions == ["print(2 * int(input()))\n"] and p.difficulty == "easy"


def test_clean_statement():
    raw = "<p>Given 2<sup>n</sup> &amp; a<sub>i</sub>.</p>\r\n\r\n\r\n\r\n-----Output-----   \nPrint it.\u00a0"
    assert process.clean_statement(raw) == "Given 2^n & a_i.\n\nOutput\nPrint it."
    assert process.clean_statement("if a < b and c > d") == "if a < b and c > d"


def test_statement_tolerance():
    assert process.statement_tolerance("accepted if the absolute or relative error is at most 10^{-4}.") == 1e-4
    assert process.statement_tolerance("Absolute or relative error doesn't exceed 10 - 9.") == 1e-9
    assert process.statement_tolerance("Print 10-6 numbers.") is None


def test_unreadable_file_and_missing_source(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "good.jsonl").write_text(json.dumps(lcb_rows()[0]) + "\n")
    stats = {}
    records = list(collect.iter_source({"name": "s", "path": str(tmp_path), "format": "auto"}, stats))
    assert len(records) == 1 and stats == {"rows": 1, "unreadable_files": 1}
    with pytest.raises(FileNotFoundError):
        list(collect.iter_source({"name": "s", "path": str(tmp_path / "nope.jsonl")}, {}))


def test_difficulty_and_dates():
    assert [process.normalize_difficulty(x) for x in ("introductory", "EASY", "VERY_HARD", 2, "?")] == [
        "easy",
        "easy",
        "hard",
        "medium",
        "",
    ]
    assert process.normalize_difficulty("A", rating=1000) == "easy"
    assert process.parse_date("2024-08-01T00:00:00").isoformat() == "2024-08-01"
    assert process.parse_date("March 3, 2021").isoformat() == "2021-03-03"
    assert process.parse_date(1700000000).isoformat() == "2023-11-14"
    assert process.parse_date("soon") is None


# ---------------------------------------------------------------------------------------------
# filter rules


def make(qid, text=None, n_tests=3, **kw):
    tests = [TestCase(f"{i}\n", f"{i}\n") for i in range(n_tests)]
    return Problem(qid, tests, question_content=text if text is not None else statement(qid), **kw)


def rule(problem, **overrides):
    cfg = load_cfg().filter
    with cfg.unlocked():
        for k, v in overrides.items():
            setattr(cfg, k, v)
    return filters.check_problem(problem, cfg)


def test_per_problem_rules():
    assert rule(make("a")) is None
    assert rule(make("a", text="short")) == "no_statement"
    assert rule(make("a", n_tests=0)) == "no_tests"
    assert rule(make("a", n_tests=2), min_tests=3) == "too_few_tests"
    assert rule(make("a", text=statement("x") + " This is an interactive problem.")) == "interactive"
    assert rule(make("a", text=statement("x") + " After printing, flush the output.")) == "interactive"
    assert rule(make("a", metadata={"file_io": True})) == "file_io"
    multi = statement("x") + " If there are multiple answers, print any of them."
    assert rule(make("a", text=multi)) == "multi_answer_no_checker"
    assert rule(make("a", text=multi, checker="def check(i, e, a): return True")) is None
    assert rule(make("a", text=statement("x") + " Print the sum.")) is None


def test_oversized_tests():
    big = make("a")
    big.tests.append(TestCase("x" * 2000, "1"))
    assert rule(big, max_input_bytes=1000) == "oversized"
    trimmed = make("a")
    trimmed.tests.append(TestCase("x" * 2000, "1"))
    assert rule(trimmed, max_input_bytes=1000, oversized="drop_tests") is None
    assert len(trimmed.tests) == 3


def test_cap_tests_keeps_examples_and_is_deterministic():
    a, b = make("a", n_tests=100), make("a", n_tests=100)
    assert rule(a, max_tests=10, keep_first_tests=3) is None
    rule(b, max_tests=10, keep_first_tests=3)
    assert len(a.tests) == 10 and a.metadata["tests_capped"] and a.metadata["tests_before_cap"] == 100
    assert [t.input for t in a.tests[:3]] == ["0\n", "1\n", "2\n"]
    assert [t.input for t in a.tests] == [t.input for t in b.tests]
    assert len({t.input for t in a.tests}) == 10


def test_eval_window():
    assert filters.in_window("2024-09-01T00:00:00", "2024-08-01", "2025-05-01")
    assert not filters.in_window("2024-07-31", "2024-08-01", "2025-05-01")
    assert not filters.in_window("", "2024-08-01", "2025-05-01")
    assert filters.in_window("2030-01-01", "2024-08-01", "")


def test_minhash_estimates_jaccard():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(5000)]
    base = list(rng.choice(vocab, 400))
    other = list(base)
    for i in rng.choice(400, 40, replace=False):
        other[i] = "changed"
    a, b = " ".join(base), " ".join(other)
    hasher = dedup.MinHasher(num_perm=256)
    estimate = np.mean(hasher.signature(a) == hasher.signature(b))
    assert abs(estimate - dedup.jaccard(a, b, 5)) < 0.1
    unrelated = " ".join(rng.choice(vocab, 400))
    assert np.mean(hasher.signature(a) == hasher.signature(unrelated)) < 0.05


def test_lsh_bands_midpoint_below_threshold():
    for threshold in (0.5, 0.7, 0.9):
        bands, rows = dedup.lsh_bands(128, threshold)
        assert bands * rows <= 128 and (1 / bands) ** (1 / rows) <= threshold


def test_near_duplicate_clusters():
    rng = np.random.default_rng(1)
    vocab = [f"w{i}" for i in range(5000)]
    docs = [" ".join(rng.choice(vocab, 200)) for _ in range(30)]
    near = docs[3].split()
    near[10] = near[100] = "edited"
    docs.append(" ".join(near))  # index 30 ~ 3
    hasher = dedup.MinHasher()
    root = dedup.near_duplicate_clusters(np.stack([hasher.signature(d) for d in docs]), 0.7)
    assert root[30] == 3 and list(root[:30]) == list(range(30))


def test_duplicates_exact_and_near():
    cfg = load_cfg().filter
    text = statement("dup")
    near = text.replace("dup7", "something")
    problems = [make("a", text), make("b", text.upper() + "!!"), make("c", near), make("d", statement("other"))]
    removed = filters.duplicates(problems, cfg)
    assert removed == {1: "exact_duplicate", 2: "near_duplicate"}
    assert problems[2].metadata["duplicate_of"] == "a"


def test_contamination():
    cfg = load_cfg().filter
    eval_set = [make("e1", statement("evalproblem")), make("e2", statement("another"))]
    copy = make("leak", "Intro sentence here. " + statement("evalproblem"))
    problems = [copy, make("clean", statement("fresh")), make("exact", statement("another"))]
    hits = filters.contaminated(problems, eval_set, cfg)
    assert set(hits) == {0, 2} and hits[2] == 1.0 and hits[0] > 0.5


def test_ngram_index_ignores_boilerplate():
    boiler = "the first line of the input contains a single integer t the number of test cases"
    evals = [f"{boiler} eval{i} " + " ".join(f"e{i}x{j}" for j in range(30)) for i in range(8)]
    index = dedup.NGramIndex(evals, n=8, max_df=5)
    assert index.overlap(boiler + " " + " ".join(f"t{j}" for j in range(30))) == 0.0
    assert index.overlap(evals[0]) == 1.0


def _band_cfg(tmp_path, **kw):
    cfg = load_cfg().filter.difficulty
    with cfg.unlocked():
        cfg.enabled = True
        cfg.pass_rate_cache = str(tmp_path / "rates.jsonl")
        for k, v in kw.items():
            setattr(cfg, k, v)
    return cfg


def test_difficulty_band_from_cache(tmp_path):
    cfg = _band_cfg(tmp_path, min_pass_rate=0.1, max_pass_rate=0.8, missing="drop")
    with open(cfg.pass_rate_cache, "w") as f:
        f.write(json.dumps({"question_id": "easy", "pass_rate": 0.9}) + "\n")
        f.write(json.dumps({"question_id": "hard", "passed": 0, "total": 8}) + "\n")
        f.write(json.dumps({"question_id": "ok", "pass_rate": 0.3}) + "\n")
        f.write("garbage\n")
    problems = [make(q) for q in ("easy", "hard", "ok", "unknown")]
    assert filters.difficulty_band(problems, cfg) == {0: "too_easy", 1: "too_hard", 3: "no_pass_rate"}
    assert problems[2].metadata["pass_rate"] == 0.3


def test_difficulty_band_live_fn_fills_cache(tmp_path):
    cfg = _band_cfg(tmp_path, batch_size=2)
    with open(cfg.pass_rate_cache, "w") as f:
        f.write(json.dumps({"question_id": "p0", "pass_rate": 0.5}) + "\n")
    calls = []

    def pass_rate_fn(batch):
        calls.append([p.question_id for p in batch])
        return [0.0 if p.question_id == "p1" else 1.0 for p in batch]

    problems = [make(f"p{i}") for i in range(4)]
    assert filters.difficulty_band(problems, cfg, pass_rate_fn) == {2: "too_easy", 3: "too_easy"}
    assert calls == [["p1", "p2"], ["p3"]]  # cached p0 not measured again
    assert filters.load_pass_rates(cfg.pass_rate_cache) == {"p0": 0.5, "p1": 0.0, "p2": 1.0, "p3": 1.0}
    calls.clear()
    filters.difficulty_band([make(f"p{i}") for i in range(4)], cfg, pass_rate_fn)
    assert calls == []


def test_pass_rate_fn_from_generate():
    def generate(problems, k):
        # p0: every answer passes; p1: one of four; the rest have no program at all.
        return [
            f"```python\n{'OK' if p.question_id == 'p0' or (p.question_id == 'p1' and j == 0) else 'x'}\n```"
            if p.question_id in ("p0", "p1")
            else "no code here"
            for p in problems
            for j in range(k)
        ]

    fn = filters.pass_rate_fn_from_generate(generate, FakePool(), num_samples=4)
    assert fn([make("p0"), make("p1"), make("p2")]) == [1.0, 0.25, 0.0]


def test_filter_problems_counts_each_rule(tmp_path):
    cfg = load_cfg().filter
    with cfg.unlocked():
        cfg.min_tests = 2
        cfg.difficulty = _band_cfg(tmp_path)
    with open(cfg.difficulty.pass_rate_cache, "w") as f:
        f.write(json.dumps({"question_id": "solved", "pass_rate": 1.0}) + "\n")
    problems = [
        make("keep"),
        make("dup", statement("keep")),
        make("few", n_tests=1),
        make("late", contest_date="2025-01-10"),
        make("leak", statement("evalset")),
        make("solved"),
    ]
    kept, counts, removed = filters.filter_problems(problems, cfg, eval_problems=[make("e", statement("evalset"))])
    assert [p.question_id for p in kept] == ["keep"]
    assert counts == {"exact_duplicate": 1, "too_few_tests": 1, "eval_window": 1, "contaminated": 1, "too_easy": 1}
    assert removed["late"] == "eval_window"


# ---------------------------------------------------------------------------------------------
# verify (with a stand-in pool) and the stage runner


class FakeResult:
    def __init__(self, passed):
        self.passed, self.reason, self.first_failure = passed, "", 0
        self.verdict = "passed" if passed else "wrong_answer"


class FakePool:
    """Passes a program iff it contains the marker "OK" — enough to test the policy plumbing."""

    def __init__(self):
        self.calls = 0

    def judge(self, problems, codes):
        self.calls += 1
        return [FakeResult("OK" in code) for code in codes]


def test_verify_policies():
    cfg = load_cfg().verify

    def problems():
        return [make("good", solutions=["bad", "OK"]), make("bad", solutions=["bad"]), make("none")]

    kept, counts, failures = verify.verify_problems(problems(), cfg, FakePool())
    assert [p.question_id for p in kept] == ["good", "none"]
    assert counts == {"verified": 1, "failed": 1, "no_reference": 1, "dropped": 1}
    assert failures[0]["question_id"] == "bad" and kept[1].metadata["verified"] is None
    with cfg.unlocked():
        cfg.require, cfg.on_failure, cfg.require_reference = "all", "flag", True
    kept, counts, _ = verify.verify_problems(problems(), cfg, FakePool())
    assert [(p.question_id, p.metadata["verified"]) for p in kept] == [("good", False), ("bad", False)]


def test_verdict_cache_rejudges_only_changed_pairs(tmp_path):
    cfg, pool, cache = load_cfg().verify, FakePool(), str(tmp_path / "verdicts.jsonl")

    def run(problem):
        return verify.verify_problems([problem], cfg, pool, cache_path=cache, limits=(6.0, 2048))

    run(make("a", solutions=["OK"]))
    run(make("a", solutions=["OK"]))
    assert pool.calls == 1
    changed = make("a", solutions=["OK"])
    changed.tests[0].output = "different\n"
    kept, _, _ = run(changed)
    assert pool.calls == 2 and kept[0].metadata["verified"]


@pytest.fixture()
def pipeline_cfg(dumps, tmp_path):
    cfg = load_cfg(
        lcb=(str(dumps / "lcb.jsonl"), "lcb", 0),
        apps=(str(dumps / "apps.parquet"), "auto", 1),
        cc=(str(dumps / "hf"), "codecontests", 2),
        dc=(str(dumps / "deepcoder.jsonl"), "deepcoder", 3),
        dir=(str(dumps / "folders"), "dir", 4),
    )
    with cfg.unlocked():
        cfg.workdir = str(tmp_path / "work")
        cfg.export.num_shards = 3
    return cfg


def test_pipeline_end_to_end_and_resume(pipeline_cfg):
    cfg, pool = pipeline_cfg, FakePool()
    records = stages.run_pipeline(cfg, pool=pool)
    assert records["collect"]["rows"] == 14  # format "lcb" is forced: the unrelated row passes here
    assert records["process"]["problems"] == 12  # ... and fails here, as does DeepCoder's "weird" test
    assert records["process"]["per_source"]["lcb"]["dropped"] == {"no_tests": 1}  # forced "lcb"
    assert records["process"]["per_source"]["dc"]["dropped"] == {"bad_tests": 1}
    assert records["collect"]["dropped"] == 2 and records["process"]["dropped"] == 2  # bad JSON, folder
    assert records["filter"]["removed"] == {"eval_window": 1, "no_tests": 1}  # lcb/3000 dated 2024-09
    assert records["verify"]["failed"] == 4 and records["verify"]["no_reference"] == 6  # no "OK" marker
    shards = stages.shard_paths(cfg)
    assert [os.path.basename(s) for s in shards] == [f"train-0000{i}-of-00003.jsonl" for i in range(3)]
    loaded = [p for s in shards for p in load_problems(s)]
    assert len(loaded) == records["export"]["problems"] == 6
    assert sorted(p.question_id for p in loaded)[-1] == "lcb/abc100_a"
    assert sum(p.question_id.startswith("dc/") for p in loaded) == 5
    report = json.load(open(os.path.join(cfg.workdir, "export", "report.json")))
    assert report["stages"]["filter"]["removed"]["no_tests"] == 1
    assert os.path.getsize(os.path.join(cfg.workdir, "export", "difficulty.png")) > 1000

    # A rerun skips every stage; --force or a config change rebuilds.
    calls = pool.calls
    again = stages.run_pipeline(cfg, pool=pool)
    assert again == records and pool.calls == calls
    with cfg.unlocked():
        cfg.verify.on_failure = "flag"
    again = stages.run_pipeline(cfg, pool=pool)
    assert again["filter"] == records["filter"] and again["verify"]["kept"] == 10
    assert again["export"]["problems"] == 10 and pool.calls == calls  # verdicts came from the cache
    with open(os.path.join(cfg.workdir, "verify_cache.jsonl")) as f:
        assert len(f.readlines()) == 4
    forced = stages.run_stage(cfg, "collect", force=True)
    assert forced["fingerprint"] == records["collect"]["fingerprint"] and forced["rows"] == 14
    assert not [n for n in os.listdir(cfg.workdir) if n.startswith(".")]  # no temp dirs left


def constant_rate_factory(rate):
    """A `filter.difficulty.pass_rate_fn` factory, named in a config as a "module:factory" string."""
    return lambda problems: [rate] * len(problems)


def test_filter_stage_with_live_pass_rate_fn_from_config(pipeline_cfg):
    cfg = pipeline_cfg
    with cfg.unlocked():
        d = cfg.filter.difficulty
        d.enabled, d.pass_rate_cache = True, os.path.join(cfg.workdir, "rates.jsonl")
        d.pass_rate_fn, d.pass_rate_fn_kwargs = "test_dataset:constant_rate_factory", {"rate": 0.9}
    records = stages.run_pipeline(cfg, ("collect", "process", "filter"))
    assert records["filter"]["kept"] == 0 and records["filter"]["removed"]["too_easy"] == 10
    assert len(filters.load_pass_rates(cfg.filter.difficulty.pass_rate_cache)) == 10


def test_failed_stage_leaves_no_output(pipeline_cfg):
    cfg = pipeline_cfg
    stages.run_pipeline(cfg, ("collect", "process"))
    with cfg.unlocked():
        cfg.filter.difficulty.enabled = True

    def broken(problems):
        raise RuntimeError("sampler down")

    with pytest.raises(RuntimeError, match="sampler down"):
        stages.run_stage(cfg, "filter", pass_rate_fn=broken)
    assert sorted(os.listdir(cfg.workdir)) == ["collect", "process"]
    with pytest.raises(RuntimeError, match="needs stage filter"):
        stages.run_stage(cfg, "verify")


def test_cli_runs_on_bundled_samples(tmp_path, capsys):
    from microcoder_jax.dataset.__main__ import main

    argv = ["filter", "--config", os.path.join(REPO, "configs", "data_pipeline.py"), "--workdir", str(tmp_path)]
    for stage in ("collect", "process"):
        assert main([stage, *argv[1:]]) == 0
    assert main([*argv, "--config.filter.max_tests=4"]) == 0
    out = capsys.readouterr().out
    assert "kept': 24" in out and "tests_capped': 23" in out
    assert main([*argv, "--config.filter.nonexistent=1"]) == 2  # one `error:` line, exit status 2
    assert "unknown config key 'filter.nonexistent'" in capsys.readouterr().err
