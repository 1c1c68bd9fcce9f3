"""The dataset pipeline's knobs: every key's default and meaning, in this one place.

`default_config()` is what the pipeline runs without `--config` (the bundled sample problems);
configs/data_pipeline.py starts from it and adds sources. `describe(cfg)` is the pipeline's
`--help` listing: each key, its value and its meaning (a source's fields by their name, for any
source); `check(cfg)` refuses a value outside a knob's choices. The stages read the same
ConfigDict (`cfg.filter.max_tests`, ...).
"""

from __future__ import annotations

import os

import ml_collections

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(_PACKAGE, "data", "samples", "problems.jsonl")  # the bundled problems

# One input dump, `sources.NAME.FIELD`: (field, default, meaning), in the order source() takes them.
SOURCE_FIELDS = (
    (
        "path",
        "",
        "a file, a glob, or a directory (searched for .jsonl/.json/.parquet and the .arrow files "
        "of a Hugging Face datasets cache); with format=dir the folder of problem folders",
    ),
    (
        "format",
        "auto",
        "auto (detected per row) | lcb | apps (APPS/TACO) | codecontests | deepcoder | "
        "leetcode (assert tests) | ours | dir (docs/datasets.md)",
    ),
    ("priority", 100, "lower wins when two sources hold the same problem (dedup keeps the first)"),
    ("limit", 0, "read at most this many rows, dropped ones included (0 = all); for smoke runs"),
    (
        "harness",
        "",
        "how stdin programs run: plain (ours, LiveCodeBench) | apps (a top-level `return` "
        "ends the program, as in APPS/TACO's harness) | '' = by format (apps -> apps)",
    ),
)

KNOBS = (  # (key, default, meaning) of everything but the sources
    (
        "workdir",
        "data_pipeline",
        "the pipeline's folder: collect/ process/ filter/ verify/ export/ and the "
        "verify cache (--workdir overrides it)",
    ),
    ("log_level", "INFO", "progress lines on stderr: DEBUG | INFO | WARNING | ERROR"),
    ("process.max_solutions", 4, "Python reference solutions kept per problem (metadata['solutions'])"),
    ("filter.seed", 0, "seeds test-set sampling and MinHash permutations"),
    ("filter.min_statement_chars", 20, "shorter statements count as 'no_statement'"),
    ("filter.min_tests", 1, "fewer tests -> 'too_few_tests' (0 tests is always 'no_tests')"),
    ("filter.max_tests", 32, "larger test sets are sampled down to this (hundreds of tests stall rollouts)"),
    ("filter.keep_first_tests", 3, "the first tests (public examples) always survive the sampling"),
    ("filter.max_input_bytes", 1 << 20, "a test input above this -> 'oversized'"),
    ("filter.max_output_bytes", 1 << 20, "a test output above this -> 'oversized'"),
    ("filter.oversized", "drop_problem", "drop_problem | drop_tests (drop only the big tests)"),
    ("filter.drop_interactive", True, "'interactive': the judge must talk back; we only feed stdin"),
    ("filter.drop_file_io", True, "'file_io': reads/writes named files instead of stdin/stdout"),
    ("filter.drop_multi_answer_without_checker", True, "'any valid answer' problems need a checker"),
    ("filter.near_duplicate_threshold", 0.7, "MinHash Jaccard for 'near_duplicate' (0 disables)"),
    ("filter.minhash_num_perm", 128, "MinHash signature length"),
    ("filter.minhash_shingle", 5, "word shingle size for MinHash"),
    (
        "filter.eval_window_start",
        "2024-08-01",
        "problems dated in [eval_window_start, eval_window_end] are "
        "'eval_window' (ISO dates, '' = open; default: LiveCodeBench v5, v6)",
    ),
    ("filter.eval_window_end", "2025-05-01", "end of the eval window, inclusive (both '' = no window)"),
    (
        "filter.eval_problems",
        "",
        "the evaluation set's problem files, comma-separated: a statement sharing >= "
        "contamination_threshold of its word n-grams with them is 'contaminated'",
    ),
    ("filter.contamination_ngram", 13, "n of the word n-grams"),
    ("filter.contamination_threshold", 0.2, "fraction of a statement's n-grams found in the eval set"),
    ("filter.contamination_max_df", 5, "n-grams in more eval statements than this are boilerplate"),
    (
        "filter.difficulty.enabled",
        False,
        "keep problems the model solves sometimes but not always, by pass rate ('too_hard' / 'too_easy')",
    ),
    ("filter.difficulty.min_pass_rate", 0.0, "below -> 'too_hard'"),
    ("filter.difficulty.max_pass_rate", 0.75, "above -> 'too_easy'"),
    (
        "filter.difficulty.pass_rate_cache",
        "",
        "JSONL {question_id, pass_rate} of known rates; rates measured live are appended",
    ),
    ("filter.difficulty.missing", "keep", "keep | drop ('no_pass_rate') problems without a rate"),
    ("filter.difficulty.batch_size", 64, "problems per pass_rate_fn call"),
    (
        "filter.difficulty.pass_rate_fn",
        "",
        "'module:factory' measuring missing rates live: "
        "factory(**pass_rate_fn_kwargs) returns fn(problems) -> rates in "
        "[0, 1], e.g. filters.pass_rate_fn_from_generate ('' = cache only)",
    ),
    ("filter.difficulty.pass_rate_fn_kwargs", {}, "keyword arguments of the pass_rate_fn factory"),
    ("verify.enabled", True, "run the reference solutions through the judge"),
    ("verify.max_references", 2, "references judged per problem"),
    ("verify.require", "any", "any | all: which references must pass"),
    ("verify.on_failure", "drop", "drop | flag (keep, metadata['verified'] = False)"),
    ("verify.require_reference", False, "drop problems that have no reference solution"),
    ("verify.workers", 0, "judge processes (0 = number of cores)"),
    ("verify.timeout", 6.0, "CPU seconds per test for reference solutions"),
    ("verify.memory_mb", 2048, "memory limit per program"),
    ("verify.cache", True, "reuse verdicts of unchanged (problem, reference) pairs: <workdir>/verify_cache.jsonl"),
    ("export.num_shards", 4, "JSONL shards written (fewer if fewer problems)"),
    ("export.prefix", "train", "shard file names: PREFIX-0000i-of-0000N.jsonl"),
    ("export.seed", 0, "shuffle seed, so each shard mixes sources"),
)


def source(path: str, *args, **fields) -> ml_collections.ConfigDict:
    """One input dump: `path`, then format, priority, limit, harness (positional or by name);
    the rest keep SOURCE_FIELDS' defaults."""
    names = [name for name, _, _ in SOURCE_FIELDS]
    unknown = sorted(set(fields) - set(names))
    if unknown or len(args) > len(names) - 1:
        raise ValueError(f"source: unknown fields {unknown or args}; known: {', '.join(names)}")
    values = {name: default for name, default, _ in SOURCE_FIELDS}
    values.update(zip(names[1:], args), path=path, **fields)
    return ml_collections.ConfigDict(values)


def default_config() -> ml_collections.ConfigDict:
    """Every knob at its default, with one source: the bundled sample problems."""
    c = ml_collections.ConfigDict()
    for key, default, _ in KNOBS:
        *groups, name = key.split(".")
        node = c
        for g in groups:
            if g not in node:
                node[g] = ml_collections.ConfigDict()
            node = node[g]
        node[name] = ml_collections.ConfigDict(default) if isinstance(default, dict) else default
    c.sources = ml_collections.ConfigDict({"samples": source(SAMPLES, "ours", 0)})
    return c


def get_config(arg=None) -> ml_collections.ConfigDict:
    """This file as a config file: what the pipeline runs without --config."""
    return default_config()


DEFAULT_FILE = __file__


CHOICES = {
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR"),
    "filter.oversized": ("drop_problem", "drop_tests"),
    "filter.difficulty.missing": ("keep", "drop"),
    "verify.require": ("any", "all"),
    "verify.on_failure": ("drop", "flag"),
}


def check(cfg: ml_collections.ConfigDict) -> None:
    """The knobs with a fixed set of values, sources included; raises ValueError("KEY=VALUE: ...").
    (Types are ml_collections': an override keeps its default's type.)"""
    from microcoder_jax.config import get
    from microcoder_jax.dataset.collect import FORMATS
    from microcoder_jax.data.problems import STDIN_HARNESSES

    choices = dict(CHOICES)
    for name in cfg.sources:
        choices[f"sources.{name}.format"] = FORMATS
        choices[f"sources.{name}.harness"] = ("", *STDIN_HARNESSES)
    for key, allowed in choices.items():
        value = get(cfg, key)
        if (value.upper() if key == "log_level" and isinstance(value, str) else value) not in allowed:
            raise ValueError(f"{key}={value!r}: must be one of {', '.join(map(repr, allowed))}")


def meaning(key: str) -> str:
    """The meaning of a key: its KNOBS entry, a source field's (sources.NAME.FIELD), or ''."""
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "sources":
        return next((m for name, _, m in SOURCE_FIELDS if name == parts[2]), "")
    if key.startswith("filter.difficulty.pass_rate_fn_kwargs."):
        return "a keyword argument of the pass_rate_fn factory"
    return next((m for k, _, m in KNOBS if k == key), "")


def describe(cfg: ml_collections.ConfigDict) -> str:
    """One line per key of `cfg`: `--config.KEY=VALUE  meaning` (the pipeline's --help)."""
    from microcoder_jax.config import flat_keys, get

    lines = []
    for key in flat_keys(cfg):
        shown = repr(get(cfg, key))
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        lines.append(f"  --config.{key}={shown}  {meaning(key)}".rstrip())
    return "\n".join(lines)
