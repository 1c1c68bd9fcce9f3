"""Dataset pipeline config: raw problem dumps on local disk -> training shards.

    python -m microcoder_jax.data.pipeline all --config configs/data_pipeline.py \
        --config.workdir=/data/mc --config.sources.samples.path=/dumps/lcb.jsonl

Out of the box it runs on the bundled sample problems. Add one `sources.<name>` block per dump;
see each knob's comment. Stage outputs land in `<workdir>/<stage>/`, shards in `<workdir>/export/`.
"""
import os

import ml_collections

import microcoder_jax

SAMPLES = os.path.join(os.path.dirname(microcoder_jax.__file__), "data", "samples", "problems.jsonl")


def source(path: str, fmt: str = "auto", priority: int = 100, limit: int = 0,
           harness: str = "") -> ml_collections.ConfigDict:
    """One input dump.
    path: a file, a glob, or a directory (searched recursively for .jsonl/.json/.parquet and the
      .arrow files of a local Hugging Face datasets cache); for fmt="dir" the folder of problem
      folders: ours (statement.md, *.in/*.out, solution*.py, optional meta.json and checker.py),
      raw APPS folders or Kattis packages (docs/datasets.md).
    fmt: auto (detect per row) | lcb (LiveCodeBench code_generation_lite) | apps (APPS/TACO) |
      codecontests (deepmind/code_contests) | deepcoder (DeepCoder/rllm style) | leetcode
      (check(candidate) assert tests) | ours | dir.
    priority: lower wins when two sources hold the same problem (dedup keeps the first).
    limit: read at most this many rows, dropped ones included (0 = all); handy for smoke runs.
    harness: how stdin programs run: "plain" (ours, LiveCodeBench) or "apps" (a top-level
      `return` ends the program, as in the APPS/TACO harness); "" = by format (apps -> "apps").
    """
    return ml_collections.ConfigDict(dict(path=path, format=fmt, priority=priority, limit=limit, harness=harness))


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.workdir = "data_pipeline"  # stage directories collect/ process/ filter/ verify/ export/
    c.log_level = "INFO"

    # Input dumps, e.g. c.sources.lcb = source("/dumps/lcb/*.jsonl", "lcb", priority=0),
    # c.sources.taco = source("~/.cache/huggingface/datasets/BAAI___taco", "apps", priority=2).
    c.sources = ml_collections.ConfigDict()
    c.sources.samples = source(SAMPLES, "ours", priority=0)

    c.process = ml_collections.ConfigDict()
    c.process.max_solutions = 4  # Python reference solutions kept per problem (metadata["solutions"])

    f = c.filter = ml_collections.ConfigDict()
    f.seed = 0  # seeds test-set sampling and MinHash permutations
    f.min_statement_chars = 20  # shorter statements count as "no_statement"
    f.min_tests = 1  # fewer tests -> "too_few_tests" (0 tests is always "no_tests")
    f.max_tests = 32  # larger test sets are sampled down to this (hundreds of tests stall rollouts)
    f.keep_first_tests = 3  # the first tests (public examples) always survive the sampling
    f.max_input_bytes = 1 << 20  # a test input above this -> "oversized"
    f.max_output_bytes = 1 << 20  # a test output above this -> "oversized"
    f.oversized = "drop_problem"  # drop_problem | drop_tests (drop only the big tests)
    f.drop_interactive = True  # "interactive": the judge must talk back; we only feed stdin
    f.drop_file_io = True  # "file_io": reads/writes named files instead of stdin/stdout
    f.drop_multi_answer_without_checker = True  # "any valid answer" problems need a checker
    f.near_duplicate_threshold = 0.7  # MinHash Jaccard for "near_duplicate" (0 disables)
    f.minhash_num_perm = 128  # MinHash signature length
    f.minhash_shingle = 5  # word shingle size for MinHash
    # Problems dated inside [start, end] (ISO dates, "" = open) are "eval_window": the default
    # covers LiveCodeBench v5 and v6 (2024-08-01 .. 2025-05-01).
    f.eval_window_start = "2024-08-01"
    f.eval_window_end = "2025-05-01"
    # Comma-separated problem files of the evaluation set (load_problems formats); a statement
    # sharing >= contamination_threshold of its word n-grams with them is "contaminated".
    f.eval_problems = ""
    f.contamination_ngram = 13  # n of the word n-grams
    f.contamination_threshold = 0.2  # fraction of a statement's n-grams found in the eval set
    f.contamination_max_df = 5  # n-grams in more eval statements than this are boilerplate

    # Keep problems the model solves sometimes but not always ("too_hard" / "too_easy").
    # Rates come from pass_rate_cache (JSONL {question_id, pass_rate}); with pass_rate_fn set the
    # missing ones are measured live and appended to the cache.
    d = f.difficulty = ml_collections.ConfigDict()
    d.enabled = False
    d.min_pass_rate = 0.0  # below -> "too_hard"
    d.max_pass_rate = 0.75  # above -> "too_easy"
    d.pass_rate_cache = ""  # path of the pass-rate cache file
    d.missing = "keep"  # keep | drop ("no_pass_rate") problems without a rate
    d.batch_size = 64  # problems per pass_rate_fn call
    # "module:factory"; factory(**pass_rate_fn_kwargs) returns fn(problems) -> rates in [0, 1],
    # e.g. data.pipeline.filters.pass_rate_fn_from_generate(generate, pool, k) around the sampler.
    d.pass_rate_fn = ""
    d.pass_rate_fn_kwargs = ml_collections.ConfigDict()

    v = c.verify = ml_collections.ConfigDict()
    v.enabled = True  # judge reference solutions with the evaluator
    v.max_references = 2  # references judged per problem
    v.require = "any"  # any | all: which references must pass
    v.on_failure = "drop"  # drop | flag (keep, metadata["verified"] = False)
    v.require_reference = False  # drop problems that have no reference solution
    v.workers = 0  # judge processes (0 = number of cores)
    v.timeout = 6.0  # CPU seconds per test for reference solutions
    v.memory_mb = 2048  # memory limit per program
    v.cache = True  # reuse verdicts of unchanged (problem, reference) pairs: <workdir>/verify_cache.jsonl

    e = c.export = ml_collections.ConfigDict()
    e.num_shards = 4  # JSONL shards {prefix}-0000i-of-0000N.jsonl (fewer if fewer problems)
    e.prefix = "train"
    e.seed = 0  # shuffle seed, so each shard mixes sources
    return c
