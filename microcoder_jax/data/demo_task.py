"""The demo task: "read two integers a b, print a OP b", judged by the real judge.

A randomly initialised tiny model cannot write Python, so the demo first trains it, supervised, on
programs in the right format whose operation is drawn at random, independent of the prompt. After
this warm start the model writes valid programs but picks the operation by chance (pass rate about
1 / len(ops)); reading the operation off the prompt is left for RL to learn from the judge's reward.
"""

from __future__ import annotations


import numpy as np

from microcoder_jax.data.prompts import encode_prompt, left_pad, prompt_bucket, render_prompt
from microcoder_jax.data.tokenizer import CHATML_TEMPLATE, pad_token_id, train_bpe_tokenizer
from microcoder_jax.data.problems import Problem, TestCase

# operation -> (statement phrasings, Python expression, reference function). The first phrasing
# names the operation as the program writes it, the others in words.
OPS = {
    "sum": (
        (
            "Read two integers a and b and print the value of (a + b).",
            "Print the sum of the two integers a and b given on one line.",
            "Input: two integers a b. Output: a plus b.",
        ),
        "a + b",
        lambda a, b: a + b,
    ),
    "difference": (
        (
            "Read two integers a and b and print the value of (a - b).",
            "Print a minus b for the two integers a and b given on one line.",
            "Input: two integers a b. Output: a minus b.",
        ),
        "a - b",
        lambda a, b: a - b,
    ),
    "product": (
        (
            "Read two integers a and b and print the value of (a * b).",
            "Print the product of the two integers a and b given on one line.",
            "Input: two integers a b. Output: a times b.",
        ),
        "a * b",
        lambda a, b: a * b,
    ),
    "maximum": (
        (
            "Read two integers a and b and print the value of (max(a, b)).",
            "Print the maximum of the two integers a and b given on one line.",
            "Input: two integers a b. Output: the larger of a and b.",
        ),
        "max(a, b)",
        max,
    ),
    "minimum": (
        (
            "Read two integers a and b and print the value of (min(a, b)).",
            "Print the minimum of the two integers a and b given on one line.",
            "Input: two integers a b. Output: the smaller of a and b.",
        ),
        "min(a, b)",
        min,
    ),
    "remainder": (
        (
            "Read two integers a and b and print the value of (a % b).",
            "Print the remainder of a divided by b for the integers a and b on one line.",
            "Input: two integers a b. Output: a mod b.",
        ),
        "a % b",
        lambda a, b: a % b,
    ),
}
# Constant operations (demo.ops=("three", ...)): f(a, b) = k. With demo.hidden_op the statement
# never says k and a failing public example's expected output shows it: the feedback holds the
# answer itself, to be copied rather than worked out (configs/feedback_task.py:copy).
CONSTANTS = {"three": 3, "four": 4, "six": 6, "seven": 7, "eight": 8}
OPS.update(
    {
        name: ((f"Read two integers a and b and print the number {k}.",), str(k), lambda a, b, k=k: k)
        for name, k in CONSTANTS.items()
    }
)

DEMO_INSTRUCTION = "Answer with one ```python``` block."
# demo.hidden_op: one statement for every operation, which only the examples' outputs reveal (the
# feedback environment shows a failing example: a task on which feedback pays)
HIDDEN_STATEMENT = "Read two integers a and b and print the value of f(a, b)."


def program(op: str) -> str:
    """The reference program for an operation."""
    return f"a, b = map(int, input().split())\nprint({OPS[op][1]})"


def response_text(op: str) -> str:
    """An answer as the model should write it: one fenced Python block."""
    return f"```python\n{program(op)}\n```"


HELD_OUT_SEED = 1_000_003  # the held-out problems' tests: one fixed set, whatever the run's seed


def make_problems(
    ops,
    problems_per_op: int,
    tests_per_problem: int,
    seed: int,
    phrasings: int = 1,
    name: str = "demo",
    public_tests: int = 0,
    hidden_op: bool = False,
) -> list[Problem]:
    """Synthetic problems with stdin tests on which every listed operation gives a different answer.

    `phrasings` statement variants per operation are used in turn (the first ones share one
    template that differs only in the operation's name); ids are `NAME-OP-I`; the first
    `public_tests` tests are public (metadata, data/problems.py); `hidden_op`: every statement is
    HIDDEN_STATEMENT, the operation shown only by the tests.
    """
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"unknown demo ops {unknown}; known: {sorted(OPS)}")
    rng = np.random.default_rng(seed)
    problems = []
    for op in ops:
        statements, _, fn = OPS[op]
        for i in range(problems_per_op):
            tests = []
            while len(tests) < tests_per_problem:
                a, b = (int(x) for x in rng.integers(2, 40, size=2))
                if len({OPS[o][2](a, b) for o in ops}) == len(ops):  # the test tells every op apart
                    tests.append(TestCase(input=f"{a} {b}\n", output=f"{fn(a, b)}\n", kind="stdin"))
            problems.append(
                Problem(
                    question_id=f"{name}-{op}-{i}",
                    tests=tests,
                    question_content=HIDDEN_STATEMENT if hidden_op else statements[i % min(phrasings, len(statements))],
                    platform="demo",
                    difficulty="easy",
                    contest_date="2026-01-01",
                    source="demo",
                    metadata={"op": op, "public_tests": public_tests} if public_tests else {"op": op},
                )
            )
    return problems


def held_out_problems(
    ops, per_op: int, tests_per_problem: int, phrasings: int = 1, public_tests: int = 0, hidden_op: bool = False
) -> list[Problem]:
    """Evaluation problems: the training statements (the prompt names only the operation) with
    tests of their own, drawn from a fixed seed so every run is scored on the same set."""
    return make_problems(
        ops, per_op, tests_per_problem, HELD_OUT_SEED, phrasings, "demo-heldout", public_tests, hidden_op
    )


def tokenizer_corpus(problems, ops, data_config) -> list[str]:
    """The text the demo's BPE is trained on: the rendered prompts and every reference answer."""

    class _Template:  # renders with the ChatML template before any tokenizer exists
        def apply_chat_template(self, messages, tokenize, add_generation_prompt, enable_thinking):
            import jinja2

            return jinja2.Template(CHATML_TEMPLATE).render(
                messages=messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking
            )

    prompts = [
        render_prompt(
            _Template(),
            p,
            enable_thinking=data_config.enable_thinking,
            instruction_stdin=data_config.instruction_stdin,
            instruction_call=data_config.instruction_call,
            system_prompt=data_config.system_prompt,
        )
        for p in problems
    ]
    return prompts + [response_text(op) for op in ops] * 8


def build_tokenizer(problems, ops, data_config, vocab_size: int):
    """The demo's tokenizer: a byte-level BPE trained on the task text."""
    return train_bpe_tokenizer(tokenizer_corpus(problems, ops, data_config), vocab_size)


def warm_start_batch(tokenizer, problems, ops, data_config, max_new_tokens: int, rng):
    """Prompts of random problems with answers of *random* operations (format, not the mapping).

    Returns ids/mask/loss-mask [B, P + max_new] laid out as the RL batch: left-padded prompt of
    the static bucket length P, then the response and its end token, right-padded.
    """
    texts = [response_text(op) for op in rng.choice(list(ops), size=len(problems))]
    return sft_layout(tokenizer, problems, texts, data_config, max_new_tokens, cut=False)


def sft_layout(tokenizer, problems, texts, data_config, max_new_tokens: int, *, cut: bool):
    """Each problem's prompt (left-padded to its bucket) then its answer text and end token
    (right-padded), as (tokens, attention, loss_mask) [B, P + max_new]. An answer longer than
    `max_new_tokens` is an error, or with `cut` is cut there without its end token, as the sampler cuts."""
    pad, end = pad_token_id(tokenizer), tokenizer.eos_token_id
    prompts = [encode_prompt(tokenizer, p, data_config) for p in problems]
    plen = prompt_bucket(max(map(len, prompts)), data_config.prompt_buckets)
    ids, mask = left_pad(prompts, plen, pad)
    answers = np.full((len(problems), max_new_tokens), pad, np.int32)
    answer_mask = np.zeros_like(answers)
    for i, text in enumerate(texts):
        a = tokenizer.encode(text, add_special_tokens=False) + [end]
        if len(a) > max_new_tokens and not cut:
            raise ValueError(f"demo answer of {len(a)} tokens exceeds max_new_tokens={max_new_tokens}")
        a = a[:max_new_tokens]
        answers[i, : len(a)] = a
        answer_mask[i, : len(a)] = 1
    tokens = np.concatenate([ids, answers], 1)
    attention = np.concatenate([mask, answer_mask], 1)
    loss_mask = np.concatenate([np.zeros_like(mask), answer_mask], 1)
    return tokens, attention, loss_mask
