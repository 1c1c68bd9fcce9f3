"""Checks a run config before anything is written: every typed block, then the rules across blocks.

`validate(config)` raises `ConfigError` with the key, the bad value and what is valid. Each
block checks its own fields (`blocks.Block`, `RLConfig`); the rules here are the ones that join
two blocks (the task and its files, the paged engine and the prompt buckets).
"""
from __future__ import annotations

from microcoder_jax.config import ConfigError, all_keys, blocks, get


def _fail(key: str, value, what: str):
    raise ConfigError(f"{key}={value!r}: {what}")


def _check_known_keys(config) -> None:
    """A key no block declares (a typo in a config file) is an error, not silently ignored."""
    from microcoder_jax.config import flat_keys

    known = {k for k, _, _ in all_keys()}
    unknown = sorted(set(flat_keys(config)) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; `--help` lists every key")


def _check_across(config, typed: dict) -> None:
    data, sampling, train = typed["data"], typed["sampling"], typed["train"]
    if sampling.engine == "paged" and any(b % sampling.page_size for b in data.prompt_buckets):
        _fail("data.prompt_buckets", data.prompt_buckets, f"with sampling.engine=paged every bucket must be a "
              f"multiple of sampling.page_size={sampling.page_size} (or change the page size)")
    if data.task == "problems":
        if not data.train_files:
            _fail("data.train_files", (), "data.task=problems needs problem files")
        if not (typed["tokenizer"].path or typed["model"].path):
            _fail("tokenizer.path", "", "set model.path (or tokenizer.path) to load a tokenizer")
        if train.warm_start_steps:
            _fail("train.warm_start_steps", train.warm_start_steps, "only for data.task=demo")


def validate(config) -> dict:
    """Raise ConfigError on the first bad value; returns the typed blocks (`config.blocks`)."""
    seed = get(config, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        _fail("seed", seed, "must be an int >= 0")
    _check_known_keys(config)
    typed = blocks(config)
    _check_across(config, typed)
    return typed
