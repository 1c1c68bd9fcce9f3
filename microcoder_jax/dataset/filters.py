"""Filter: the rules that decide which processed problems become training data.

Each rule removes problems under its own name and the stage counts them, so the report shows what
every rule cost. Per-problem rules run first, as problems stream in (`check_problem`, which also
caps large test sets); the rules that compare problems with each other or with the evaluation set
run after (`dedup`, `contamination`, `eval_window`), and the difficulty band runs last, because it
is the expensive one (`difficulty_band`). A problem is counted under the first rule that removes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
from typing import Callable, Iterable, Sequence

import numpy as np

from microcoder_jax.data.dates import in_window
from microcoder_jax.dataset import dedup
from microcoder_jax.data.problems import Problem

log = logging.getLogger(__name__)

PassRateFn = Callable[[Sequence[Problem]], Sequence[float]]

# Phrases of interactive statements (matched in the lower-cased text).
_INTERACTIVE = (
    "interactive problem",
    "problem is interactive",
    "is an interactive",
    "interactor",
    "flush the output",
    "flush output",
    "fflush(stdout)",
    "stdout.flush(",
    "system.out.flush",
)
# Each alternative of the regex contains one of these substrings; the regex runs only then.
_MULTI_HINTS = ("if there", "print any", "output any", "of them", "in any order")
_MULTI_ANSWER = re.compile(
    r"if there (?:are|is|exist) (?:several|multiple|many|more than one)[\w\s,-]{0,30}?"
    r"(?:answers?|solutions?|ways|options|possibilities)"
    r"|(?:print|output) any (?:of them|one of them|valid|such|possible|correct|suitable|optimal)"
    r"|any (?:one )?of them (?:will be|is|are) accepted"
    r"|(?:print|output)[\w\s,-]{0,40}\bin any order\b",
)


def is_interactive(problem: Problem) -> bool:
    """The statement describes an interactive protocol (judge talks back), or a tag says so."""
    tags = [str(t).lower() for t in problem.metadata.get("tags") or []]
    if "interactive" in tags:
        return True
    text = problem.question_content.lower()
    return any(phrase in text for phrase in _INTERACTIVE)


def is_multi_answer(problem: Problem) -> bool:
    """The statement accepts any of several outputs, which exact comparison cannot judge."""
    text = problem.question_content.lower()
    return any(hint in text for hint in _MULTI_HINTS) and bool(_MULTI_ANSWER.search(text))


def cap_tests(problem: Problem, max_tests: int, keep_first: int, seed: int) -> bool:
    """Keep at most `max_tests`: the first `keep_first` (the public examples, in source order) plus
    a random sample of the rest, seeded by (seed, question_id) so reruns pick the same ones.
    Returns whether the problem was capped."""
    if max_tests <= 0 or len(problem.tests) <= max_tests:
        return False
    head = min(keep_first, max_tests)
    digest = hashlib.sha1(f"{seed}:{problem.question_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "little"))
    rest = sorted(rng.sample(range(head, len(problem.tests)), max_tests - head))
    problem.metadata["tests_before_cap"] = len(problem.tests)
    problem.tests = problem.tests[:head] + [problem.tests[i] for i in rest]
    return True


def check_problem(problem: Problem, cfg) -> str | None:
    """The name of the first per-problem rule that removes this problem, or None to keep it.

    Caps the test set in place (`cap_tests`) before the size rule, so a problem is judged on the
    tests it would train with. `cfg` is the config's `filter` block.
    """
    if len(problem.question_content.strip()) < cfg.min_statement_chars:
        return "no_statement"
    if not problem.tests:
        return "no_tests"
    if cfg.drop_interactive and is_interactive(problem):
        return "interactive"
    if cfg.drop_file_io and problem.metadata.get("file_io"):
        return "file_io"
    if (
        cfg.drop_multi_answer_without_checker
        and problem.checker is None
        and (problem.metadata.get("custom_validation") or is_multi_answer(problem))
    ):
        return "multi_answer_no_checker"
    if len(problem.tests) < cfg.min_tests:
        return "too_few_tests"
    if cap_tests(problem, cfg.max_tests, cfg.keep_first_tests, cfg.seed):
        problem.metadata["tests_capped"] = True
    max_in, max_out = cfg.max_input_bytes, cfg.max_output_bytes
    sizes_ok = [_fits(t.input, max_in) and _fits(t.output, max_out) for t in problem.tests]
    if not all(sizes_ok):
        if cfg.oversized == "drop_problem":
            return "oversized"
        problem.tests = [t for t, ok in zip(problem.tests, sizes_ok) if ok]
        if len(problem.tests) < max(1, cfg.min_tests):
            return "oversized"
    return None


def _fits(text: str, max_bytes: int) -> bool:
    """len(text.encode()) <= max_bytes, without encoding when the length alone decides it."""
    return len(text) * 4 <= max_bytes or (len(text) <= max_bytes and len(text.encode()) <= max_bytes)


def duplicates(problems: Sequence[Problem], cfg) -> dict[int, str]:
    """Index -> "exact_duplicate" | "near_duplicate" for every problem that repeats an earlier one
    (earlier in input order wins: list the preferred sources first)."""
    removed: dict[int, str] = {}
    first_by_key: dict[str, int] = {}
    for i, p in enumerate(problems):
        key = dedup.exact_key(p.question_content)
        if key in first_by_key:
            removed[i] = "exact_duplicate"
        else:
            first_by_key[key] = i
    if not cfg.near_duplicate_threshold:
        return removed
    survivors = [i for i in range(len(problems)) if i not in removed]
    hasher = dedup.MinHasher(cfg.minhash_num_perm, cfg.minhash_shingle, cfg.seed)
    texts = [problems[i].question_content for i in survivors]
    if not texts:
        return removed
    signatures = np.stack([hasher.signature(t) for t in texts])
    root = dedup.near_duplicate_clusters(signatures, cfg.near_duplicate_threshold, [not dedup.words(t) for t in texts])
    for pos, r in enumerate(root):
        if r != pos:
            removed[survivors[pos]] = "near_duplicate"
            problems[survivors[pos]].metadata["duplicate_of"] = problems[survivors[r]].question_id
    return removed


def contaminated(problems: Sequence[Problem], eval_problems: Sequence[Problem], cfg) -> dict[int, float]:
    """Index -> overlap score for problems whose statement shares at least `contamination_threshold`
    of its word n-grams with the evaluation set (or equals an evaluation statement exactly)."""
    if not eval_problems:
        return {}
    texts = (p.question_content for p in eval_problems)
    index = dedup.NGramIndex(texts, cfg.contamination_ngram, cfg.contamination_max_df)
    eval_keys = {dedup.exact_key(p.question_content) for p in eval_problems}
    hits = {}
    for i, p in enumerate(problems):
        score = 1.0 if dedup.exact_key(p.question_content) in eval_keys else index.overlap(p.question_content)
        if score >= cfg.contamination_threshold:
            hits[i] = score
    return hits


def load_pass_rates(path: str) -> dict[str, float]:
    """A pass-rate cache: JSONL rows {question_id, pass_rate} or {question_id, passed, total}, or a
    JSON object {question_id: rate}. Later rows win (the cache is appended to)."""
    if not path or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{") and "\n{" not in text.strip():
        try:
            return {str(k): float(v) for k, v in json.loads(text).items()}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
            pass
    rates = {}
    for n, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rate = row["pass_rate"] if "pass_rate" in row else row["passed"] / row["total"]
            rates[str(row["question_id"])] = float(rate)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            log.warning("%s: line %d of the pass-rate cache skipped: %s", path, n, e)
    return rates


def append_pass_rates(path: str, rates: dict[str, float]) -> None:
    """Append measured rates to the cache file (so an interrupted measurement is not repeated)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for qid, rate in rates.items():
            f.write(json.dumps({"question_id": qid, "pass_rate": float(rate)}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def pass_rate_fn_from_generate(
    generate: Callable[[Sequence[Problem], int], Sequence[str]], pool, num_samples: int = 8
) -> PassRateFn:
    """A live `pass_rate_fn` from a response generator: `generate(problems, k)` returns k responses
    per problem (problem-major, as the sampler's rows); each is extracted, judged in `pool`, and a
    problem's rate is the fraction of its responses that pass. Responses without a program fail."""
    from microcoder_jax.judge.extract import extract_code

    def pass_rate_fn(problems: Sequence[Problem]) -> list[float]:
        responses = list(generate(problems, num_samples))
        if len(responses) != len(problems) * num_samples:
            raise ValueError(f"generate returned {len(responses)} responses, expected {len(problems) * num_samples}")
        codes = [extract_code(r) for r in responses]
        judged = [i for i, c in enumerate(codes) if c is not None]
        passed = np.zeros(len(codes), bool)
        if judged:
            results = pool.judge([problems[i // num_samples] for i in judged], [codes[i] for i in judged])
            passed[judged] = [r.passed for r in results]
        return passed.reshape(len(problems), num_samples).mean(axis=1).tolist()

    return pass_rate_fn


def difficulty_band(problems: Sequence[Problem], cfg, pass_rate_fn: PassRateFn | None = None) -> dict[int, str]:
    """Index -> "too_easy" | "too_hard" | "no_pass_rate" for problems outside [min_pass_rate,
    max_pass_rate]. Rates come from the cache file; with `pass_rate_fn` the missing ones are
    measured in batches of `batch_size` and appended to the cache. Kept problems get
    `metadata["pass_rate"]`."""
    rates = load_pass_rates(cfg.pass_rate_cache)
    missing = [p for p in problems if p.question_id not in rates]
    if pass_rate_fn is not None:
        for start in range(0, len(missing), cfg.batch_size):
            batch = missing[start : start + cfg.batch_size]
            measured = [float(r) for r in pass_rate_fn(batch)]
            if len(measured) != len(batch):
                raise ValueError(f"pass_rate_fn returned {len(measured)} rates for {len(batch)} problems")
            new = {p.question_id: r for p, r in zip(batch, measured)}
            if cfg.pass_rate_cache:
                append_pass_rates(cfg.pass_rate_cache, new)
            rates.update(new)
            log.info("measured pass rates of %d/%d problems", min(start + cfg.batch_size, len(missing)), len(missing))
    removed = {}
    for i, p in enumerate(problems):
        rate = rates.get(p.question_id)
        if rate is None:
            if cfg.missing == "drop":
                removed[i] = "no_pass_rate"
            continue
        p.metadata["pass_rate"] = rate
        if rate < cfg.min_pass_rate:
            removed[i] = "too_hard"
        elif rate > cfg.max_pass_rate:
            removed[i] = "too_easy"
    return removed


def filter_problems(
    problems: Iterable[Problem],
    cfg,
    *,
    eval_problems: Sequence[Problem] = (),
    pass_rate_fn: PassRateFn | None = None,
) -> tuple[list[Problem], dict[str, int], dict[str, str]]:
    """Run every rule. Returns (kept problems, removed count per rule, question_id -> rule of every
    removed problem). Kept problems whose tests were sampled down carry `metadata["tests_capped"]`.
    `cfg` is the config's `filter` block."""
    counts: dict[str, int] = {}
    removed_ids: dict[str, str] = {}
    survivors: list[Problem] = []

    def drop(problem: Problem, rule: str) -> None:
        counts[rule] = counts.get(rule, 0) + 1
        removed_ids[problem.question_id] = rule

    for p in problems:
        rule = check_problem(p, cfg)
        window = (cfg.eval_window_start, cfg.eval_window_end)
        if rule is None and any(window) and in_window(p.contest_date, *window):  # no window: none removed
            rule = "eval_window"
        if rule:
            drop(p, rule)
        else:
            survivors.append(p)

    stages = [
        lambda ps: duplicates(ps, cfg),
        lambda ps: {i: "contaminated" for i in contaminated(ps, eval_problems, cfg)},
    ]
    if cfg.difficulty.enabled:
        stages.append(lambda ps: difficulty_band(ps, cfg.difficulty, pass_rate_fn))
    for stage in stages:
        removed = stage(survivors)
        for i, rule in sorted(removed.items()):
            drop(survivors[i], rule)
        survivors = [p for i, p in enumerate(survivors) if i not in removed]
    return survivors, counts, removed_ids
