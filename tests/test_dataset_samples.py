"""The bundled sample problems under the real judge: every reference solution passes, a
program that only knows the first expected answer fails, and the verify stage drops a problem
whose tests disagree with its reference."""

import copy
import json
import os

import pytest

from microcoder_jax.dataset import process, stages
from microcoder_jax.judge.pool import JudgePool
from microcoder_jax.data.problems import load_problems

from test_dataset import load_cfg

SAMPLES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "microcoder_jax", "data", "samples", "problems.jsonl"
)


@pytest.fixture(scope="module")
def pool():
    pool = JudgePool(workers=2, timeout=4.0)
    yield pool
    if hasattr(pool, "close"):
        pool.close()


@pytest.fixture(scope="module")
def samples():
    return load_problems(SAMPLES)


def first_answer_only(problem) -> str:
    """A wrong program that prints (or returns) the first test's expected output for every input."""
    expected = problem.tests[0].output
    if problem.call_based:
        return (
            f"import json\nclass Solution:\n    def {problem.func_name}(self, *args):\n"
            f"        return json.loads({expected!r})\n"
        )
    return f"import sys\nsys.stdin.read()\nsys.stdout.write({expected!r})\n"


def test_samples_are_well_formed(samples):
    assert len(samples) == 24
    assert sum(p.call_based for p in samples) == 10
    assert len({p.question_id for p in samples}) == 24
    for p in samples:
        assert 3 <= len(p.tests) <= 8 and len(process.solutions_of(p)) == 1
        assert p.difficulty in ("easy", "medium") and p.platform and p.contest_date
        assert len({t.output for t in p.tests}) > 1  # so first_answer_only must fail
        assert p.call_based == bool(p.starter_code)


def test_references_pass_and_wrong_programs_fail(samples, pool):
    results = pool.judge(
        samples + samples, [process.solutions_of(p)[0] for p in samples] + [first_answer_only(p) for p in samples]
    )
    right, wrong = results[:24], results[24:]
    failed = [(p.question_id, r.verdict, r.reason) for p, r in zip(samples, right) if not r.passed]
    assert not failed
    assert all(r.tests_passed == len(p.tests) for p, r in zip(samples, right))
    assert [p.question_id for p, r in zip(samples, wrong) if r.passed] == []


def test_pipeline_verifies_samples_and_drops_broken_problem(samples, pool, tmp_path):
    broken = copy.deepcopy(samples[0])
    broken.question_id = "broken"
    broken.question_content += " (a copy whose last expected output is wrong)"
    broken.tests[-1].output = "123456789\n"
    dump = tmp_path / "dump.jsonl"
    with open(dump, "w") as f:
        for p in [*samples, broken]:
            f.write(json.dumps(p.to_json()) + "\n")
    cfg = load_cfg(mine=(str(dump), "ours", 0))
    with cfg.unlocked():
        cfg.workdir = str(tmp_path / "work")
        cfg.filter.near_duplicate_threshold = 0.0  # keep the copy: this test is about verify
    records = stages.run_pipeline(cfg, pool=pool)
    assert records["filter"]["kept"] == 25
    counts = {k: records["verify"][k] for k in ("verified", "failed", "dropped")}
    assert counts == {"verified": 24, "failed": 1, "dropped": 1}
    kept = [p for path in stages.shard_paths(cfg) for p in load_problems(path)]
    assert len(kept) == 24 and all(p.metadata["verified"] for p in kept)
    failed = [json.loads(line) for line in open(os.path.join(cfg.workdir, "verify", "failed.jsonl"))]
    assert [f["question_id"] for f in failed] == ["mine/broken"]


def test_verify_runs_apps_references_and_assert_tests_as_their_datasets_do(pool):
    """An APPS reference with a top-level `return` verifies (APPS harness); a LeetCode row whose
    tests need its helpers runs as an assert test: its reference passes, a wrong one fails."""
    from test_dataset_readers import REFERENCE, STARTER

    apps = process.to_problem(
        {
            "source": "apps",
            "format": "apps",
            "origin": "",
            "row": {
                "problem_id": 1,
                "question": "Double n, or print neg for a negative n. " * 3,
                "input_output": json.dumps({"inputs": ["2\n", "-1\n"], "outputs": ["4\n", "neg\n"]}),
                "solutions": json.dumps(["n = int(input())\nif n < 0:\n    print('neg')\n    return\nprint(2 * n)\n"]),
            },
        }
    )
    helpers = "def as_list(n):\n    return [1] * n\n"
    leet = process.to_problem(
        {
            "source": "lc",
            "format": "leetcode",
            "origin": "",
            "row": {
                "task_id": "ones",
                "starter_code": STARTER,
                "entry_point": "Solution().pairSum",
                "prompt": helpers,
                "test": "def check(candidate):\n"
                "    assert candidate(as_list(3), 2) == 3\n    assert candidate([1], 2) == 0\n",
                "completion": REFERENCE,
            },
        }
    )
    wrong = REFERENCE.replace("== k", "!= k")
    apps_ok, plain, leet_ok, leet_wrong = pool.judge(
        [apps, _without_harness(apps), leet, leet], [apps.solutions[0], apps.solutions[0], leet.solutions[0], wrong]
    )
    assert apps_ok.passed and plain.verdict == "compile_error"
    assert leet.tests[0].kind == "assert" and leet_ok.passed and leet_wrong.verdict == "wrong_answer"


def _without_harness(problem):
    other = copy.deepcopy(problem)
    other.metadata.pop("stdin_harness")
    return other
