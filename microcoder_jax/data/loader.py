"""The prompt pipeline: problem files -> tokenized prompts -> a shuffled, host-split, checkpointable stream.

Problems are read and their prompts tokenized once at start-up (malformed rows and prompts over the
length cap are skipped and counted). The stream is a grain `MapDataset` over problem indices:
shuffled with a seed and reshuffled every epoch, batched to the global rollout batch; the training
loop takes the whole batch on every host (`prompt_dataset` can also cut one host's slice). Its
iterator state is one integer, saved in checkpoints.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Sequence

import grain
import numpy as np

from microcoder_jax.blocks import ConfigError
from microcoder_jax.data.prompts import chat_messages, encode_messages
from microcoder_jax.data import problems as problems_lib

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PromptSet:
    """Problems with their tokenized prompts, and what was skipped on the way."""

    problems: list
    prompts: list[list[int]]
    skipped_malformed: int = 0
    skipped_too_long: int = 0
    skipped_no_tests: int = 0

    def report(self) -> str:
        return (
            f"{len(self.problems)} problems ({self.skipped_malformed} malformed rows skipped, "
            f"{self.skipped_no_tests} problems without tests skipped, "
            f"{self.skipped_too_long} prompts over the length cap skipped)"
        )


class NoUsableProblemsError(ConfigError):
    """Every problem was skipped (no tests, or a prompt over the length cap): the message names the
    knobs to raise and the longest prompt's token count. A ConfigError: one line, exit status 2."""


class _CountSkipped(logging.Handler):
    """Collects load_problems' skipped-row count (it logs the count instead of returning it)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        if record.args and isinstance(record.args, tuple) and isinstance(record.args[0], int):
            self.count += record.args[0]


def expand_paths(paths: str | Sequence[str]) -> list[str]:
    """Problem files from a tuple of paths / glob patterns or a comma-separated string of them.

    A pattern expands to its matches, sorted; one that matches nothing is an error naming it.
    """
    import glob

    if isinstance(paths, str):
        paths = paths.split(",")
    out = []
    for item in paths:
        item = str(item).strip()
        if not item:
            continue
        if glob.has_magic(item):
            matches = sorted(glob.glob(os.path.expanduser(item)))
            if not matches:
                raise FileNotFoundError(f"no problem files match the pattern {item!r}")
            out += matches
        else:
            out.append(os.path.expanduser(item))
    return out


def read_problems(paths: str | Sequence[str]) -> tuple[list, int]:
    """Problems of every file (any supported row format) and the number of malformed rows skipped.

    `paths`: files or glob patterns, as a tuple or a comma-separated string (see `expand_paths`).
    """
    paths = expand_paths(paths)
    counter = _CountSkipped()
    logger = logging.getLogger(problems_lib.__name__)
    logger.addHandler(counter)
    try:
        problems = [p for path in paths for p in problems_lib.load_problems(path, skip_malformed=True)]
    finally:
        logger.removeHandler(counter)
    return problems, counter.count


def make_prompt_set(problems, tokenizer, data_config, skipped_malformed: int = 0, messages=None) -> PromptSet:
    """Tokenize every prompt, `messages(problem)` (default data.prompts.chat_messages; a run passes
    its environment's) rendered in the chat template; problems without tests (nothing could judge
    them) and prompts longer than `data_config.max_prompt_tokens` are skipped and counted."""
    messages = messages or (lambda problem: chat_messages(problem, data_config))
    limit = min(data_config.max_prompt_tokens, max(data_config.prompt_buckets))
    no_tests = len(problems_lib.without_tests(problems))
    kept, prompts, too_long, longest = [], [], 0, 0
    for problem in (p for p in problems if p.tests):
        ids = encode_messages(tokenizer, messages(problem), data_config)
        if len(ids) > limit:
            too_long, longest = too_long + 1, max(longest, len(ids))
            continue
        kept.append(problem)
        prompts.append(ids)
    out = PromptSet(kept, prompts, skipped_malformed, too_long, no_tests)
    if too_long or skipped_malformed or no_tests:
        log.warning("prompt set: %s", out.report())
    if not kept:
        raise NoUsableProblemsError(f"no usable problems: {out.report()}{_fix(data_config, limit, longest, no_tests)}")
    return out


def _fix(data_config, limit: int, longest: int, no_tests: int) -> str:
    """What to change when nothing is usable: the knobs, with values that fit the longest prompt."""
    if not longest:
        if no_tests:
            return "; a problem needs tests to be judged (the row format: microcoder_jax/data/problems.py)"
        return "; the files hold no problem rows (the row format: microcoder_jax/data/problems.py)"
    need = 1 << (longest - 1).bit_length()  # the next power of two
    return (
        f"; the longest prompt is {longest} tokens, the cap min(data.max_prompt_tokens="
        f"{data_config.max_prompt_tokens}, max(data.prompt_buckets={tuple(data_config.prompt_buckets)})) "
        f"is {limit}: raise both, e.g. --config.data.max_prompt_tokens={need} "
        f"--config.data.prompt_buckets='({need},)'"
    )


def prompt_dataset(
    num_items: int, global_batch: int, seed: int, *, process_index: int = 0, process_count: int = 1
) -> grain.MapDataset:
    """Batches of problem indices: epoch-wise shuffled, endless, this host's slice of each batch."""
    if global_batch % process_count:
        raise ValueError(f"{global_batch} prompts per batch do not split over {process_count} hosts")
    per_host = global_batch // process_count
    lo = process_index * per_host
    ds = grain.MapDataset.range(num_items).shuffle(seed=seed).repeat(None)
    ds = ds.batch(global_batch, drop_remainder=True)
    return ds.map(lambda b: np.asarray(b[lo : lo + per_host], np.int64))


def prompt_iterator(num_items: int, global_batch: int, seed: int, state: dict | None = None):
    """A checkpointable iterator over `prompt_dataset`'s global batches (`get_state`/`set_state`).

    Every host gets the same whole batch (seeded, so identical everywhere): the sampler runs it on
    the global mesh and each host then judges its own share of the rows (see `sharding.host_rows`).
    """
    ds = prompt_dataset(num_items, global_batch, seed)
    it = iter(ds.to_iter_dataset())
    if state:
        it.set_state(state)
    return it
