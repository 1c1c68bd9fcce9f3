"""The prompt pipeline and the demo task: malformed rows counted, shuffling, host split, resume."""

import json

import numpy as np
import pytest

from microcoder_jax.config import demo_config
from microcoder_jax.data import demo_task, loader
from microcoder_jax.judge import JudgePool


def test_malformed_rows_are_skipped_and_counted(tmp_path):
    good = {
        "question_id": "q1",
        "tests": [{"input": "1\n", "output": "1\n", "kind": "stdin"}],
        "question_content": "Echo.",
    }
    path = tmp_path / "p.jsonl"
    path.write_text(
        "\n".join(
            [json.dumps(good), "{not json", json.dumps({"nothing": 1}), json.dumps({**good, "question_id": "q2"})]
        )
        + "\n"
    )
    problems, skipped = loader.read_problems([str(path)])
    assert [p.question_id for p in problems] == ["q1", "q2"] and skipped == 2


def test_prompt_set_skips_long_prompts():
    c = demo_config()
    problems = demo_task.make_problems(c.demo.ops, 1, 1, seed=0)
    tok = demo_task.build_tokenizer(problems, c.demo.ops, c.data, c.demo.vocab_size)
    problems[0].question_content = "word " * 200
    ps = loader.make_prompt_set(problems, tok, c.data, skipped_malformed=1)
    assert len(ps.problems) == len(problems) - 1 and ps.skipped_too_long == 1
    assert "1 malformed" in ps.report() and "1 prompts over the length cap" in ps.report()
    assert max(map(len, ps.prompts)) <= max(c.data.prompt_buckets)


def test_prompt_set_skips_problems_without_tests():
    c = demo_config()
    problems = demo_task.make_problems(c.demo.ops, 1, 2, seed=0)
    tok = demo_task.build_tokenizer(problems, c.demo.ops, c.data, c.demo.vocab_size)
    problems[1].tests = []
    ps = loader.make_prompt_set(problems, tok, c.data)
    assert problems[1] not in ps.problems and len(ps.problems) == len(problems) - 1
    assert ps.skipped_no_tests == 1 and "1 problems without tests skipped" in ps.report()
    for p in problems:
        p.tests = []
    with pytest.raises(ValueError, match="no usable problems"):
        loader.make_prompt_set(problems, tok, c.data)


def test_stream_is_shuffled_per_epoch_split_over_hosts_and_resumable():
    ds = loader.prompt_dataset(10, 4, seed=1)
    batches = [ds[i] for i in range(5)]  # 20 indices = two epochs
    flat = np.concatenate(batches)
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert list(flat[:10]) != list(flat[10:20]) and list(flat[:10]) != list(range(10))
    halves = [loader.prompt_dataset(10, 4, seed=1, process_index=i, process_count=2) for i in (0, 1)]
    for i in range(5):
        np.testing.assert_array_equal(np.concatenate([halves[0][i], halves[1][i]]), batches[i])
    it = loader.prompt_iterator(10, 4, seed=1)
    next(it), next(it)
    state = it.get_state()
    rest = [next(it) for _ in range(3)]
    it2 = loader.prompt_iterator(10, 4, seed=1, state=state)
    for a in rest:
        np.testing.assert_array_equal(a, next(it2))
    with pytest.raises(ValueError):
        loader.prompt_dataset(10, 5, seed=0, process_count=2)


def test_demo_tests_tell_every_operation_apart_and_references_pass():
    ops = tuple(demo_task.OPS)
    problems = demo_task.make_problems(ops, 1, 3, seed=0)
    with JudgePool(workers=2, timeout=2.0, memory_mb=512) as pool:
        for p in problems:
            op = p.metadata["op"]
            codes = [demo_task.program(o) for o in ops]
            verdicts = [r.passed for r in pool.judge([p] * len(ops), codes)]
            assert verdicts == [o == op for o in ops], (op, verdicts)


def test_warm_start_batch_layout():
    c = demo_config()
    problems = demo_task.make_problems(c.demo.ops, 2, 1, seed=0)
    tok = demo_task.build_tokenizer(problems, c.demo.ops, c.data, c.demo.vocab_size)
    tokens, attention, loss_mask = demo_task.warm_start_batch(
        tok, problems[:3], c.demo.ops, c.data, 40, np.random.default_rng(0)
    )
    assert tokens.shape == (3, 64 + 40) and attention.shape == loss_mask.shape == tokens.shape
    assert not loss_mask[:, :64].any() and (loss_mask <= attention).all()
    for row, m in zip(tokens, loss_mask):
        answer = tok.decode(row[m == 1].tolist())
        assert answer.startswith("```python\na, b = map(int, input().split())") and answer.endswith("<|im_end|>")
