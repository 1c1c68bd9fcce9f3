"""The feedback environment: the model answers, its program runs on the problem's public tests
(the statement's examples), and while one fails the model reads what went wrong and answers
again, up to `max_turns` answers. The reward is the final answer's on the private tests.

Feedback is built only from public tests: a private test's input or output never reaches a
prompt. Each field is cut to `feedback_chars` characters (the cut is marked), so a program that
prints megabytes cannot blow up the context: of a failing test the judge keeps its verdict, its
reason (where the output first differs; an error with the program's line) and the start of the
program's output, never the whole of it.
A turn whose answer was cut at the length cap ends the episode (its end is not an answer to
continue from); so does the last turn, or a problem without public tests (nothing to show).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from microcoder_jax.data.problems import private_tests, public_tests
from microcoder_jax.data.prompts import chat_messages
from microcoder_jax.envs.base import Turn
from microcoder_jax.judge import extract_code
from microcoder_jax.judge.rewards import Reward

VERDICT_WORDS = {
    "wrong_answer": "wrong answer",
    "runtime_error": "runtime error",
    "timeout": "time limit exceeded",
    "memory_limit": "memory limit exceeded",
    "compile_error": "the program does not compile",
    "judge_error": "the judge could not run it",
}
NO_CODE = (
    "No Python program was found in your answer. Answer with the whole program in exactly one "
    "fenced code block: ```python ... ```."
)
FIX = "Fix the program; answer with the whole program in one ```python``` block."


def cut(text: str, limit: int) -> str:
    """`text` up to `limit` characters, the cut marked with how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters cut]"


def shown_output(result, limit: int) -> str | None:
    """What the program gave on a failing test (`result.output`, judged with show_output), cut to
    `limit` characters with the cut marked; "(nothing)" for an empty wrong answer; None when
    there is nothing to show (an error, time or memory limit with no output)."""
    text, size = getattr(result, "output", ""), getattr(result, "output_size", 0)
    if not size:
        return "(nothing)" if result.verdict == "wrong_answer" else None
    if size > len(text.encode("utf-8", errors="replace")) or len(text) > limit:
        return f"{text[:limit]}... [cut: {size} bytes in all]"
    return text.rstrip("\n")


def feedback_text(public, results, limit: int) -> str:
    """The user message after a failed answer: per failing public test its verdict, input,
    expected output, the program's output and the judge's reason, each cut to `limit` characters."""
    failed = [(i, t, r) for i, (t, r) in enumerate(zip(public, results)) if not r.passed]
    lines = [f"Your program failed {len(failed)} of the {len(public)} example tests."]
    for i, test, result in failed:
        lines += [
            "",
            f"Example {i + 1}: {VERDICT_WORDS.get(result.verdict, result.verdict)}",
            "Input:",
            cut(test.input.rstrip("\n"), limit),
            "Expected output:",
            cut(test.output.rstrip("\n"), limit),
        ]
        output = shown_output(result, limit)
        if output is not None:
            lines += ["Your output:", output]
        reason = result.reason.partition(": ")[2] if result.reason.startswith("test ") else result.reason
        if reason:
            lines.append(f"What happened: {cut(reason, limit)}")
    return "\n".join(lines + ["", FIX])


@dataclasses.dataclass(frozen=True)
class FeedbackTask:
    """Up to `max_turns` answers per problem, with public-test feedback between them; `reward` (a
    registered reward) scores each answer on the private tests (every test when there are none)."""

    data: object  # data.config.DataConfig: the first prompt, as the code task's
    reward: Reward
    max_turns: int = 2
    feedback_chars: int = 400
    name: str = "feedback"

    def messages(self, problem) -> list[dict]:
        return chat_messages(problem, self.data)

    def step(
        self, pool, problems: Sequence, responses: Sequence[str], turn: int = 0, truncated: Sequence[bool] = ()
    ) -> "_Judged":
        if not 0 <= turn < self.max_turns:
            raise ValueError(f"{self.name} has turns 0..{self.max_turns - 1}, not {turn}")
        problems, codes = list(problems), [extract_code(t) for t in responses]
        truncated = list(truncated) or [False] * len(problems)
        scored = [dataclasses.replace(p, tests=private_tests(p) or p.tests) for p in problems]
        reward_handle = pool.submit(scored, codes, every_test=self.reward.every_test)
        # the public tests one by one (a problem of one test each), so every failing one is known
        shown: list[tuple[int, int]] = []  # (row, how many public tests)
        singles, single_codes = [], []
        for row, (p, code) in enumerate(zip(problems, codes)):
            public = public_tests(p)
            if turn < self.max_turns - 1 and public and code is not None and not truncated[row]:
                shown.append((row, len(public)))
                singles += [dataclasses.replace(p, tests=[t]) for t in public]
                single_codes += [code] * len(public)
        public_handle = pool.submit(singles, single_codes, show_output=self.feedback_chars) if singles else None
        return _Judged(
            self, problems, scored, list(responses), codes, truncated, reward_handle, public_handle, shown, turn
        )


@dataclasses.dataclass
class _Judged:
    """Both judgements of one turn's rows, read as Turns."""

    env: FeedbackTask
    problems: list
    scored: list
    responses: list
    codes: list
    truncated: list
    reward_handle: object
    public_handle: object
    shown: list
    turn: int

    def done(self) -> bool:
        handles = [self.reward_handle, self.public_handle]
        return all(h.done() for h in handles if h is not None)  # type: ignore[attr-defined]

    def result(self) -> list[Turn]:
        env = self.env
        results = self.reward_handle.result()  # type: ignore[attr-defined]
        singles = self.public_handle.result() if self.public_handle is not None else []  # type: ignore[attr-defined]
        public_results, at = {}, 0
        for row, n in self.shown:
            public_results[row], at = singles[at : at + n], at + n
        turns = []
        last = self.turn >= env.max_turns - 1
        for row, (p, s, text, code, r) in enumerate(
            zip(self.problems, self.scored, self.responses, self.codes, results)
        ):
            turn = Turn(
                reward=env.reward(s, text, r),
                passed=bool(r.passed),
                no_code=code is None or r.verdict == "no_code",
                verdict=r.verdict,
                program=code,
            )
            if code is None and not last and not self.truncated[row] and public_tests(p):
                turn = dataclasses.replace(turn, done=False, feedback=NO_CODE)
            elif row in public_results and not all(x.passed for x in public_results[row]):
                shown = feedback_text(public_tests(p), public_results[row], env.feedback_chars)
                turn = dataclasses.replace(turn, done=False, feedback=shown)
            turns.append(turn)
        return turns
