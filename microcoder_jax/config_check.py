"""Checks every value of a run config before anything is written: type, range, choices, paths.

`validate(config)` raises `ConfigError` with the key, the bad value and what is valid. The RL block
and the temperature block are checked by building what the run builds from them (`RLConfig`, the
`TemperatureScheduler`), so their rules live in one place each.
"""
from __future__ import annotations

import datetime
import glob
import math
import os

from microcoder_jax.config import ConfigError, all_keys, get

CHOICES = {
    "model.dtype": ("bfloat16", "float32", "float16"),
    "model.param_dtype": ("float32", "bfloat16"),
    "model.remat": ("none", "full", "dots", "dots_saveable"),
    "model.attention": ("auto", "xla", "cudnn", "splash"),
    "data.task": ("problems", "demo"),
    "sampling.engine": ("static", "paged"),
    "evaluator.reward": ("all", "fraction"),
    "distributed.initialize": ("auto", "always", "never"),
}
AT_LEAST = {  # key: smallest allowed value (None values are skipped)
    "seed": 0, "data.num_prompts": 1, "data.max_prompt_tokens": 1, "sampling.group_size": 2,
    "sampling.max_new_tokens": 1, "sampling.top_k": 0, "sampling.decode_phases": 1,
    "sampling.slots": 0, "sampling.page_size": 1, "sampling.refill_every": 1, "sampling.decode_tensor": -1,
    "temperature.temperature": 0.0, "evaluator.workers": 0, "evaluator.timeout": 1e-3,
    "evaluator.memory_mb": 1, "train.steps": 0, "train.checkpoint_every": 0, "train.keep_checkpoints": 1,
    "train.eval_every": 0, "train.warm_start_steps": 0, "eval.max_new_tokens": 1, "eval.samples": 1,
    "eval.temperature": 0.0, "eval.batch_problems": 1, "eval.max_problems": 0,
    "distributed.num_processes": 1, "distributed.process_id": 0, "demo.problems_per_op": 1,
    "demo.phrasings": 1, "demo.tests_per_problem": 1, "demo.vocab_size": 1, "demo.warm_start_lr": 0.0,
    "demo.warm_start_batch": 1, "model.vocab_size": 1, "model.hidden_size": 1,
    "model.intermediate_size": 1, "model.num_layers": 1, "model.num_heads": 1, "model.num_kv_heads": 1,
    "model.head_dim": 1,
}
PROBABILITY = ("sampling.top_p", "eval.top_p")  # in (0, 1]
DIRS = ("model.path", "tokenizer.path")  # must exist when set
FILES = ("data.train_files", "eval.files")  # every path or glob must match a file
DATES = ("eval.date_from", "eval.date_to")


def _fail(key: str, value, what: str):
    raise ConfigError(f"{key}={value!r}: {what}")


def _check_types(config) -> None:
    """Each value has its default's type (ints are fine for floats; None only for None defaults)."""
    for key, default, _ in all_keys():
        value = get(config, key)
        if value is None:
            continue
        if isinstance(default, (tuple, list)):
            if not isinstance(value, (tuple, list)):
                _fail(key, value, f"expected a tuple, e.g. {tuple(default) or ('a', 'b')}")
            continue
        kind = default if isinstance(default, type) else type(default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            _fail(key, value, f"expected {kind.__name__}, got {type(value).__name__}")


def _check_values(config) -> None:
    for key, allowed in CHOICES.items():
        if get(config, key) not in allowed:
            _fail(key, get(config, key), f"must be one of {', '.join(allowed)}")
    for key, low in AT_LEAST.items():
        value = get(config, key)
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
            _fail(key, value, f"must be a number >= {low}")
    for key in PROBABILITY:
        if not 0 < get(config, key) <= 1:
            _fail(key, get(config, key), "must lie in (0, 1]")
    for key in DIRS:
        if get(config, key) and not os.path.isdir(get(config, key)):
            _fail(key, get(config, key), "no such directory")
    for key in FILES:
        for pattern in get(config, key):
            if not isinstance(pattern, str) or not glob.glob(os.path.expanduser(pattern)):
                _fail(key, pattern, "no file matches this path or glob pattern")
    for key in DATES:
        if get(config, key):
            try:
                datetime.date.fromisoformat(get(config, key))
            except ValueError:
                _fail(key, get(config, key), "expected an ISO date (YYYY-MM-DD) or ''")
    buckets = config.data.prompt_buckets
    if not buckets or not all(isinstance(b, int) and b > 0 for b in buckets):
        _fail("data.prompt_buckets", buckets, "expected a non-empty tuple of positive ints")
    if config.sampling.engine == "paged" and any(b % config.sampling.page_size for b in buckets):
        _fail("data.prompt_buckets", buckets, f"with sampling.engine=paged every bucket must be a multiple "
              f"of sampling.page_size={config.sampling.page_size} (or change the page size)")
    sizes = [config.mesh.data, config.mesh.fsdp, config.mesh.tensor]
    if any(s != -1 and s < 1 for s in sizes) or sizes.count(-1) > 1:
        _fail("mesh", dict(zip(("data", "fsdp", "tensor"), sizes)), "sizes are >= 1, at most one is -1")


def _check_task(config) -> None:
    from microcoder_jax.data import demo_task
    from microcoder_jax.models.presets import PRESETS

    if not config.model.path and config.model.preset not in PRESETS:
        _fail("model.preset", config.model.preset, f"must be one of {', '.join(sorted(PRESETS))}")
    if config.model.path and not os.path.exists(os.path.join(config.model.path, "config.json")):
        _fail("model.path", config.model.path, "has no config.json (a Hugging Face checkpoint directory)")
    if config.data.task == "problems":
        if not config.data.train_files:
            _fail("data.train_files", (), "data.task=problems needs problem files")
        if not (config.tokenizer.path or config.model.path):
            _fail("tokenizer.path", "", "set model.path (or tokenizer.path) to load a tokenizer")
        if config.train.warm_start_steps:
            _fail("train.warm_start_steps", config.train.warm_start_steps, "only for data.task=demo")
    unknown = [op for op in config.demo.ops if op not in demo_task.OPS]
    if unknown:
        _fail("demo.ops", tuple(config.demo.ops), f"unknown {unknown}; known: {', '.join(demo_task.OPS)}")


def validate(config) -> None:
    """Raise ConfigError on the first bad value; builds RLConfig and the scheduler to check them."""
    from microcoder_jax.config import make_rl_config
    from microcoder_jax.sampling.temperature import TemperatureScheduler

    _check_types(config)
    _check_values(config)
    _check_task(config)
    try:
        make_rl_config(config)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"rl: {e}") from None
    try:
        TemperatureScheduler(config.temperature)
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"temperature: {e}") from None
