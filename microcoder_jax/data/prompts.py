"""Prompts: a problem rendered in the model's chat template, asking for one fenced Python program.

Stdin problems get the statement and the stdin instruction; call-based problems also get their
starter code. The chat template is the tokenizer's own (Qwen3's for real checkpoints), so the
thinking switch (`enable_thinking`) behaves exactly as the model was trained with.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

INSTRUCTION_STDIN = (
    "Write a Python 3 program that solves the problem. It reads from standard input and writes to "
    "standard output. Answer with exactly one fenced code block: ```python ... ```."
)
INSTRUCTION_CALL = (
    "Complete the starter code below in Python 3. Answer with exactly one fenced code block: "
    "```python ... ``` containing the full solution."
)


def user_message(
    problem, *, instruction_stdin: str = INSTRUCTION_STDIN, instruction_call: str = INSTRUCTION_CALL
) -> str:
    """The user turn: statement, instruction and (call-based) the starter code in a fence."""
    statement = problem.question_content.strip()
    if problem.call_based or problem.starter_code.strip():
        starter = problem.starter_code.strip()
        text = f"{statement}\n\n{instruction_call}"
        return f"{text}\n\n```python\n{starter}\n```" if starter else text
    return f"{statement}\n\n{instruction_stdin}"


@functools.lru_cache(maxsize=8)
def few_shot_turns(path: str, instruction_stdin: str, instruction_call: str) -> tuple[dict, ...]:
    """Chat messages of worked examples from a problem file: per problem a user turn (as any
    prompt's) and an assistant turn with its first solution in a python fence."""
    from microcoder_jax.data.problems import load_problems

    problems = load_problems(path)
    if not problems:
        raise ValueError(f"{path}: no problems")
    turns = []
    for p in problems:
        if not p.solutions or not p.solutions[0].strip():
            raise ValueError(f"{path}: problem {p.question_id!r} has no solution to show (solutions[0])")
        user = user_message(p, instruction_stdin=instruction_stdin, instruction_call=instruction_call)
        turns += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": f"```python\n{p.solutions[0].strip()}\n```"},
        ]
    return tuple(turns)


def render_prompt(
    tokenizer,
    problem,
    *,
    enable_thinking: bool = False,
    instruction_stdin: str = INSTRUCTION_STDIN,
    instruction_call: str = INSTRUCTION_CALL,
    system_prompt: str = "",
    few_shot: Sequence[dict] = (),
) -> str:
    """The full prompt text, ending where the assistant's answer starts; a non-empty `system_prompt`
    is a system turn before the problem (else the template's own default, if it has one), and
    `few_shot` (few_shot_turns) are worked exchanges between the two."""
    content = user_message(problem, instruction_stdin=instruction_stdin, instruction_call=instruction_call)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return render_messages(
        tokenizer, system + [dict(t) for t in few_shot] + [{"role": "user", "content": content}], enable_thinking
    )


def render_messages(tokenizer, messages: Sequence[dict], enable_thinking: bool = False) -> str:
    """Chat messages in the tokenizer's template, ending where the assistant's next answer starts."""
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )


def chat_messages(problem, data_config) -> list[dict]:
    """The messages before the first answer, as `data_config` asks: an optional system turn, the
    worked examples of `few_shot_file`, then the problem's user turn."""
    i_stdin, i_call = data_config.instruction_stdin, data_config.instruction_call
    system = [{"role": "system", "content": data_config.system_prompt}] if data_config.system_prompt else []
    shots = few_shot_turns(data_config.few_shot_file, i_stdin, i_call) if data_config.few_shot_file else ()
    user = {"role": "user", "content": user_message(problem, instruction_stdin=i_stdin, instruction_call=i_call)}
    return system + [dict(t) for t in shots] + [user]


def encode_messages(tokenizer, messages: Sequence[dict], data_config) -> list[int]:
    """Token ids of rendered chat messages (the template already holds the special tokens)."""
    text = render_messages(tokenizer, messages, data_config.enable_thinking)
    return tokenizer.encode(text, add_special_tokens=False)


def encode_prompt(tokenizer, problem, data_config) -> list[int]:
    """Token ids of the problem's prompt as `data_config` asks (chat_messages, rendered)."""
    return encode_messages(tokenizer, chat_messages(problem, data_config), data_config)


def prompt_bucket(length: int, buckets: Sequence[int] | None = None) -> int:
    """The static prompt width for a longest prompt of `length` tokens: the smallest of `buckets`
    that fits, or without buckets a power of two from 32 to 1024, then a multiple of 1024."""
    if buckets:
        fitting = [b for b in sorted(buckets) if b >= length]
        if not fitting:
            raise ValueError(f"prompt of {length} tokens is longer than the largest bucket {max(buckets)}")
        return int(fitting[0])
    if length <= 1024:
        return max(32, 1 << (max(length, 1) - 1).bit_length())
    return -(-length // 1024) * 1024


def left_pad(prompts: Sequence[Sequence[int]], width: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded ids and mask [B, width] int32 (1 on real tokens); every prompt has 1..width tokens."""
    ids = np.full((len(prompts), width), pad_id, np.int32)
    mask = np.zeros((len(prompts), width), np.int32)
    for row, prompt in enumerate(prompts):
        if not 0 < len(prompt) <= width:
            raise ValueError(f"prompt {row} has {len(prompt)} tokens; need 1..{width}")
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    return ids, mask


_ANSWER = "\x1fANSWER\x1f"  # a stand-in answer no template or message contains


def follow_up(tokenizer, content: str, answer_end: str = "", enable_thinking: bool = False) -> str:
    """The template's text after an answer, with a user message `content`, up to where the next
    answer starts: what an environment's feedback turn adds to the sequence the model continues.
    `answer_end`: how the sampled answer ended (its stop token's text); when the template closes
    an answer with the same text it is not repeated (the answer's own tokens stay as sampled)."""
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": _ANSWER}]
    full = tokenizer.apply_chat_template(
        messages + [{"role": "user", "content": content}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
    )
    tail = full[full.index(_ANSWER) + len(_ANSWER) :]
    return tail[len(answer_end) :] if answer_end and tail.startswith(answer_end) else tail
