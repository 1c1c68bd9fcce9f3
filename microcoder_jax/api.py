"""Start a run from Python: your problems, your reward, the metrics rows back.

    from microcoder_jax import api
    from microcoder_jax.data.problems import Problem, TestCase

    problems = [Problem("add", [TestCase("1 2\\n", "3\\n")], question_content="Read a and b; print a + b.")]

    def reward(problem, response, result):  # the judge's verdict, and no input("Enter ...") prompts
        return float(result.passed and "Enter" not in response)

    rows = api.train(model="path/to/Qwen3-0.6B", problems=problems, reward=reward, workdir="runs/mine",
                     overrides=["train.steps=20"])
    print(rows[-1]["reward_mean"])

It is the `python -m microcoder_jax.train` run (same loop, checkpoints, resume, memory check), with
`config.problems_config()` as the starting config unless `config` is given.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from microcoder_jax import cli
from microcoder_jax import config as config_lib
from microcoder_jax.data.problems import Problem, save_problems
from microcoder_jax.judge import rewards as rewards_lib
from microcoder_jax.plan import host
from microcoder_jax.trainer import loop
from microcoder_jax.trainer.metrics import read_metrics


def train(
    config=None,
    *,
    workdir: str,
    model: str | None = None,
    problems: Sequence[Problem] | str | Sequence[str] | None = None,
    eval_problems: Sequence[Problem] | str | Sequence[str] | None = None,
    reward: str | Callable | None = None,
    reward_every_test: bool = False,
    overrides: Sequence[str] = (),
    memory_check: bool = True,
    log_fn=print,
    on_step=None,
) -> list[dict]:
    """Train (or resume) in `workdir`; returns the run's metrics rows (metrics.jsonl, as dicts).

    `config`: a ConfigDict, a config file path ("configs/paper.py:qwen3-1.7b,microcoder"), or None
    for `config.problems_config()`; `overrides`: "KEY=VALUE" strings as on the command line.
    `model`: a Hugging Face checkpoint folder (model.path; its tokenizer is used).
    `problems` / `eval_problems`: `Problem`s (written to WORKDIR/problems.jsonl / eval_problems.jsonl)
    or problem files (paths or globs).
    `reward`: a registered reward's name (judge/rewards.py), or a function
    `(problem, response_text, judge_result) -> float`, registered under its name
    (`reward_every_test`: whether it needs every test judged, or the judge may stop at the first
    failure). `on_step(step, record)` is called after each step.
    """
    if config is None or isinstance(config, str):
        config = cli.load_config(config, overrides) if config else _with(config_lib.problems_config(), overrides)
    else:
        config = _with(config, overrides)
    workdir = os.path.abspath(workdir)
    with config.unlocked():
        if model is not None:
            config.model.path = model
        if problems is not None:
            config.data.task = "problems"
            config.data.train_files = _files(problems, workdir, "problems.jsonl")
        if eval_problems is not None:
            config.eval.files = _files(eval_problems, workdir, "eval_problems.jsonl")
        if reward is not None:
            config.judge.reward = reward if isinstance(reward, str) else _register(reward, reward_every_test)
    loop.train(config, workdir, log_fn=log_fn, on_step=on_step, preflight=host.check if memory_check else None)
    return read_metrics(os.path.join(workdir, "metrics.jsonl"))


def _with(config, overrides: Sequence[str]):
    """`config` with "KEY=VALUE" overrides, parsed as the command line parses them."""
    if not overrides:
        return config
    import ast

    config = config.copy_and_resolve_references()
    with config.unlocked():
        for item in overrides:
            key, _, text = item.partition("=")
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = text  # a bare string, as --config.KEY=VALUE takes it
            node = config
            *groups, name = key.split(".")
            for g in groups:
                node = node[g]
            node[name] = value
    return config


def _files(problems, workdir: str, name: str) -> tuple:
    """Problem files for the config: paths as they are, `Problem`s written into the workdir."""
    if isinstance(problems, str):
        return (problems,)
    items = list(problems)
    if all(isinstance(p, (str, os.PathLike)) for p in items):
        return tuple(os.fspath(p) for p in items)
    if not all(isinstance(p, Problem) for p in items):
        raise config_lib.ConfigError(f"problems: expected Problems or file paths, got {type(items[0]).__name__}")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, name)
    save_problems(items, path)
    return (path,)


def _register(fn: Callable, every_test: bool) -> str:
    """Register a reward function under its name (again for the same function is a no-op)."""
    name = getattr(fn, "__name__", "") or "reward"
    if name == "<lambda>":
        name = f"reward_{id(fn):x}"
    rewards_lib.register_reward(name, every_test=every_test)(fn)
    return name
