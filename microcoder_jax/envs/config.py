"""`EnvConfig`: the `env.*` block (what an episode is: one answer, or answers with feedback)."""

from __future__ import annotations

import dataclasses

from microcoder_jax.blocks import Block, knob

KINDS = ("code", "feedback")


@dataclasses.dataclass(frozen=True)
class EnvConfig(Block):
    PREFIX = "env"

    kind: str = knob(
        "code",
        "code: one answer per problem, judged (the MicroCoder recipe); feedback: after an answer "
        "that fails a public test the model sees what went wrong and answers again (envs/feedback.py)",
        choices=KINDS,
    )
    max_turns: int = knob(2, "feedback: answers per episode at most (1 = the code task, bit for bit)", at_least=1)
    feedback_chars: int = knob(
        400, "feedback: characters shown of each input / expected output / program's output / reason", at_least=1
    )
    feedback_tokens: int = knob(
        256, "feedback: tokens of one feedback turn at most (cut shorter to fit; sizes the batch)", at_least=16
    )

    @property
    def turns(self) -> int:
        """Answers per episode at most: 1 for the code task."""
        return self.max_turns if self.kind == "feedback" else 1

    def row_width(self, prompt_width: int, max_new: int) -> int:
        """A batch row's width: the prompt, `turns` answers and the feedback turns between them."""
        return prompt_width + self.turns * max_new + (self.turns - 1) * self.feedback_tokens
