"""The easy problem templates: determinism, held-out templates, references judged by the real judge,
the CLI and its one-line errors, and the committed samples."""

from __future__ import annotations

import json
import os
import re

import pytest

from microcoder_jax.data import easy_problems as ep
from microcoder_jax.data.loader import read_problems
from microcoder_jax.data.problems import Problem, load_problems
from microcoder_jax.judge import JudgePool

SAMPLES = os.path.join(os.path.dirname(ep.__file__), "samples")
SAMPLE_OPTIONS = dict(seed=0, train_per_template=1, held_out_per_template=1, tests=5)  # see docs/datasets.md


def _cli(tmp_path, name, *args) -> tuple[bytes, bytes]:
    out = tmp_path / name
    assert ep.main(["--out", str(out), *args]) == 0
    return (out / "train.jsonl").read_bytes(), (out / "held_out.jsonl").read_bytes()


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_problems(tmp_path, capsys):
    first = _cli(tmp_path, "a", "--seed", "3", "--train-per-template", "2", "--held-out-per-template", "2")
    again = _cli(tmp_path, "b", "--seed", "3", "--train-per-template", "2", "--held-out-per-template", "2")
    other = _cli(tmp_path, "c", "--seed", "4", "--train-per-template", "2", "--held-out-per-template", "2")
    assert first == again
    assert first[0] != other[0] and first[1] != other[1]
    a, c = load_problems(tmp_path / "a" / "train.jsonl"), load_problems(tmp_path / "c" / "train.jsonl")
    assert [p.question_id for p in a] == [p.question_id for p in c]  # the same ids, other parameters
    assert sum(x.tests[0].input != y.tests[0].input for x, y in zip(a, c)) > 0.8 * len(a)
    assert "wrote" in capsys.readouterr().out


def test_templates_counts_and_held_out_by_template(tmp_path):
    assert len(ep.TRAIN) >= 40 and len(ep.HELD_OUT) >= 15
    assert not set(ep.TRAIN) & set(ep.HELD_OUT)
    _cli(tmp_path, "d", "--train-per-template", "3", "--held-out-per-template", "2", "--tests", "7")
    for split, templates, per in (("train", ep.TRAIN, 3), ("held_out", ep.HELD_OUT, 2)):
        problems = load_problems(tmp_path / "d" / f"{split}.jsonl")
        assert len(problems) == per * len(templates)
        ids = [p.question_id for p in problems]
        assert ids == [f"easy/{t}/{i:04d}" for t in templates for i in range(per)]
        assert {p.metadata["template"] for p in problems} == set(templates)
        assert {p.metadata["split"] for p in problems} == {split}
        assert all(len(p.tests) == 7 for p in problems)


def test_problem_shape_sample_first_edges_and_no_prompt_instruction():
    problems = ep.generate(ep.TRAIN, "train", 4, 0, 6) + ep.generate(ep.HELD_OUT, "held_out", 4, 0, 6)
    for p in problems:
        assert not p.call_based and p.source == ep.SOURCE and p.difficulty == "easy"
        assert len(p.tests) == 6 and len({t.input for t in p.tests}) == 6, p.question_id
        assert all(t.kind == "stdin" and t.input.endswith("\n") and t.output.strip() for t in p.tests)
        assert p.metadata["public_tests"] == 1 and len(p.solutions) == 1
        sample = p.tests[0]
        text = p.question_content
        assert sample.input.rstrip("\n") in text and sample.output.rstrip("\n") in text, p.question_id
        assert re.search(r"Input", text) and re.search(r"Output", text)
        assert "prompt" not in text.lower()
        assert Problem.from_json(json.loads(json.dumps(p.to_json()))) == p
    tests = [t.input for p in problems for t in p.tests]
    assert "0\n" in tests and "1\n5\n" in tests and "0 0\n" in tests  # zero, one element
    assert any(re.match(r"-\d", x) for x in tests)  # negative numbers
    yes_no = [t.output for p in problems if p.metadata["template"] == "palindrome" for t in p.tests]
    assert {"YES\n", "NO\n"} <= set(yes_no) or {"Yes\n", "No\n"} <= set(yes_no)


def _every_variant() -> list[Problem]:
    """Problems covering every template and every reference program each draws (layout variants)."""
    chosen, seen = [], set()
    for split, templates in (("train", ep.TRAIN), ("held_out", ep.HELD_OUT)):
        for p in ep.generate(templates, split, 10, 0, 8):
            key = (p.metadata["template"], p.solutions[0])
            if key not in seen:
                seen.add(key)
                chosen.append(p)
    return chosen


def test_references_pass_and_a_prompting_program_fails_through_the_real_judge():
    problems = _every_variant()
    assert {p.metadata["template"] for p in problems} == set(ep.TRAIN) | set(ep.HELD_OUT)
    prompting = ['print("Enter the input:")\n' + p.solutions[0] for p in problems]
    sum_two = next(p for p in problems if p.metadata["template"] == "sum_two")
    two_inputs = (  # the 135M model's habit: a prompt per number, one number per line
        'a = int(input("Enter the first integer: "))\nb = int(input("Enter the second integer: "))\nprint(a + b)\n'
    )
    with JudgePool(workers=2, timeout=2.0, memory_mb=256) as pool:
        results = pool.judge(
            [*problems, *problems, sum_two], [*(p.solutions[0] for p in problems), *prompting, two_inputs]
        )
    good, bad, model_like = results[: len(problems)], results[len(problems) : -1], results[-1]
    failed = [(p.question_id, r.verdict, r.reason) for p, r in zip(problems, good) if not r.passed]
    assert not failed
    assert all(r.tests_passed == r.tests_total == 8 for r in good)
    assert [r.verdict for r in bad] == ["wrong_answer"] * len(problems)
    assert not model_like.passed and model_like.verdict in ("wrong_answer", "runtime_error")


def test_the_rows_load_as_training_prompts(tmp_path):
    _cli(tmp_path, "e", "--train-per-template", "1", "--held-out-per-template", "1")
    problems, skipped = read_problems([str(tmp_path / "e" / "train.jsonl"), str(tmp_path / "e" / "held_out.jsonl")])
    assert skipped == 0 and len(problems) == len(ep.TRAIN) + len(ep.HELD_OUT)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--tests", "0"], "error: --tests 0: must be >= 1"),
        (["--tests", "21"], "error: --tests 21: must be <= 20"),
        (["--train-per-template", "-1"], "error: --train-per-template -1: must be >= 0"),
        (["--seed", "x"], "error: argument --seed: invalid int value: 'x'"),
        (["--bogus"], "error: unrecognized arguments: --bogus"),
        ("no --out", "error: the following arguments are required: --out"),
        ("out is a file", "a file, not a directory"),
    ],
)
def test_bad_arguments_are_one_error_line(args, says, tmp_path, capsys):
    if args == "no --out":
        argv = []
    elif args == "out is a file":
        (tmp_path / "f").write_text("")
        argv = ["--out", str(tmp_path / "f")]
    else:
        argv = ["--out", str(tmp_path / "x"), *args]
    with pytest.raises(SystemExit) as e:
        ep.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and says in err, err
    assert not (tmp_path / "x").exists()


def test_the_committed_samples_are_what_the_generator_writes(tmp_path):
    ep.write(str(tmp_path), **SAMPLE_OPTIONS)
    for split in ("train", "held_out"):
        committed = os.path.join(SAMPLES, f"easy_{split}.jsonl")
        assert (tmp_path / f"{split}.jsonl").read_bytes() == open(committed, "rb").read(), (
            f"{committed} is stale: regenerate it as docs/datasets.md says"
        )
    assert sum(os.path.getsize(os.path.join(SAMPLES, f"easy_{s}.jsonl")) for s in ("train", "held_out")) < 200_000
