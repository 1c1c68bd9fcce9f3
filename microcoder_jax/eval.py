"""`python -m microcoder_jax.eval --config ... --checkpoint ... --problems FILE [--max-new-tokens N] [--samples K]`

pass@1, and pass@k for every k up to the samples per problem (the unbiased estimator of Chen et
al. 2021), overall and by difficulty and platform, printed as a table and written as JSON.
`--checkpoint` is a training workdir (its newest checkpoint; `--step` picks another) or a Hugging
Face checkpoint directory. The training loop calls `evaluate_problems` on its eval schedule.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import types
from collections import defaultdict

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n - c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, have {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def in_date_window(problem, date_from: str = "", date_to: str = "") -> bool:
    """Whether the problem's contest date lies in [date_from, date_to] (ISO dates; '' = open)."""
    if not (date_from or date_to):
        return True
    day = _parse_date(problem.contest_date)
    if day is None:
        return False
    return (not date_from or day >= _parse_date(date_from)) and (not date_to or day <= _parse_date(date_to))


def _parse_date(text: str):
    text = (text or "").strip()
    if not text:
        return None
    try:
        return datetime.date.fromisoformat(text[:10])
    except ValueError:
        return None


def summarize(problems, passes: list[list[bool]], ks=None) -> dict:
    """Per-problem pass counts -> pass@k overall, by difficulty and by platform."""
    n = min((len(p) for p in passes), default=0)
    ks = [k for k in (ks or (1, 2, 4, 8, 16, 32, 64)) if k <= n] or ([1] if n else [])

    def group(indices):
        out = {"problems": len(indices)}
        for k in ks:
            vals = [pass_at_k(len(passes[i]), sum(passes[i]), k) for i in indices]
            out[f"pass@{k}"] = float(np.mean(vals)) if vals else float("nan")
        return out

    by = {"difficulty": defaultdict(list), "platform": defaultdict(list)}
    for i, p in enumerate(problems):
        by["difficulty"][p.difficulty or "unknown"].append(i)
        by["platform"][p.platform or "unknown"].append(i)
    return {
        "overall": group(list(range(len(problems)))),
        "by_difficulty": {k: group(v) for k, v in sorted(by["difficulty"].items())},
        "by_platform": {k: group(v) for k, v in sorted(by["platform"].items())},
        "samples_per_problem": n,
        "per_problem": {p.question_id: int(sum(passes[i])) for i, p in enumerate(problems)},
    }


def format_table(report: dict) -> str:
    """A plain-text table: one row per group, one column per pass@k."""
    keys = [k for k in report["overall"] if k.startswith("pass@")]
    lines = [f"{'group':<28}{'problems':>9}" + "".join(f"{k:>10}" for k in keys)]

    def row(name, g):
        lines.append(f"{name:<28}{g['problems']:>9}" + "".join(f"{100 * g[k]:>9.1f}%" for k in keys))

    row("overall", report["overall"])
    for section in ("by_difficulty", "by_platform"):
        for name, g in report[section].items():
            row(f"{section[3:]}={name}", g)
    return "\n".join(lines)


def evaluate_problems(run, roller, params, problems, *, rng, samples=None, max_new_tokens=None) -> dict:
    """Sample `eval.samples` answers per problem, judge them, and summarize pass@k."""
    import jax

    from microcoder_jax.data.loader import make_prompt_set
    from microcoder_jax.train import judge_arrays

    e = run.config.eval
    samples = samples or e.samples
    max_new_tokens = max_new_tokens or e.max_new_tokens
    problems = [p for p in problems if in_date_window(p, e.date_from, e.date_to)]
    if e.max_problems:
        problems = problems[:e.max_problems]
    prompt_set = make_prompt_set(problems, run.tokenizer, run.config.data)
    kept, prompts = prompt_set.problems, prompt_set.prompts
    passes: list[list[bool]] = []
    size = e.batch_problems
    for start in range(0, len(kept), size):
        chunk, chunk_prompts = kept[start:start + size], prompts[start:start + size]
        pad = size - len(chunk)  # a full batch every call: one compiled shape
        sample = roller.generate(params, chunk_prompts + [chunk_prompts[-1]] * pad,
                                 num_samples=samples, temperature=e.temperature,
                                 max_new_tokens=max_new_tokens, top_p=e.top_p, top_k=0,
                                 rng=jax.random.fold_in(rng, start))
        rows = len(chunk) * samples  # the padding prompts' rows are dropped
        kept_rows = types.SimpleNamespace(tokens=sample.tokens[:rows], lengths=sample.lengths[:rows])
        handle, codes, _ = roller.submit([p for p in chunk for _ in range(samples)], kept_rows)
        _, passed, _, _ = judge_arrays(handle.result(), codes, "all")
        passes += [list(map(bool, passed[i * samples:(i + 1) * samples])) for i in range(len(chunk))]
    report = summarize(kept, passes)
    report["skipped_too_long"] = prompt_set.skipped_too_long
    report["date_window"] = [e.date_from, e.date_to]
    report["max_new_tokens"] = max_new_tokens
    return report


def _is_hf_dir(path: str) -> bool:
    return os.path.exists(os.path.join(path, "config.json")) and not os.path.isdir(
        os.path.join(path, "checkpoints"))


def _load_params(run, checkpoint: str, step: int | None):
    """Params from a training workdir / its checkpoints dir, or from a HF checkpoint directory."""
    from microcoder_jax.checkpoint import load_params
    from microcoder_jax.train import abstract_train_state

    if _is_hf_dir(checkpoint):
        from microcoder_jax.models import hf

        return hf.load_hf_params(checkpoint, run.model_config, mesh=run.mesh), "hf"
    directory = os.path.join(checkpoint, "checkpoints") if os.path.isdir(
        os.path.join(checkpoint, "checkpoints")) else checkpoint
    params, step = load_params(directory, abstract_train_state(run).params, step)
    return params, step


def main(argv=None) -> int:
    from microcoder_jax import config as config_lib
    from microcoder_jax.data.loader import read_problems
    from microcoder_jax.evaluator.pool import EvaluatorPool
    from microcoder_jax.train import Roller, _key, initialize_distributed, problem_files, setup

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="config file (default: the demo)")
    parser.add_argument("--checkpoint", required=True,
                        help="training workdir (or its checkpoints/ dir) or a HF checkpoint directory")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--problems", default=None, help="problem file(s), comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--samples", type=int, default=None, help="samples per problem (pass@k, k <= samples)")
    parser.add_argument("--date-from", default=None, help="first contest date (ISO), inclusive")
    parser.add_argument("--date-to", default=None, help="last contest date (ISO), inclusive")
    parser.add_argument("--out", default=None, help="JSON report path (default: CHECKPOINT/eval.json)")
    args, rest = parser.parse_known_args(argv)
    overrides = []
    for item in rest:
        if not item.startswith("--config."):
            parser.error(f"unknown argument {item!r}")
        overrides.append(item[len("--config."):])
    try:
        config = config_lib.load_config(args.config, overrides)
        initialize_distributed(config)  # before any other JAX call
    except config_lib.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with config.unlocked():
        if args.date_from is not None:
            config.eval.date_from = args.date_from
        if args.date_to is not None:
            config.eval.date_to = args.date_to
        if _is_hf_dir(args.checkpoint) and not config.model.path:
            config.model.path = args.checkpoint
        if config.data.task == "problems" and not config.data.train_files:
            config.data.train_files = tuple((args.problems or "").split(","))  # setup needs a prompt source
    if os.path.isdir(os.path.join(args.checkpoint, "checkpoints")):
        workdir = args.checkpoint  # a training workdir
    elif _is_hf_dir(args.checkpoint):
        workdir = os.getcwd()
    else:
        workdir = os.path.dirname(os.path.abspath(args.checkpoint))  # its checkpoints/ dir
    run = setup(config, workdir)
    problems = read_problems(args.problems)[0] if args.problems else run.eval_problems
    if not problems:
        parser.error("no problems: pass --problems FILE")
    params, step = _load_params(run, args.checkpoint, args.step)
    pool = EvaluatorPool(workers=config.evaluator.workers or None, timeout=config.evaluator.timeout,
                         memory_mb=config.evaluator.memory_mb,
                         hide=problem_files(config, args.problems or ()))  # programs can't read answers
    try:
        report = evaluate_problems(run, Roller(run, pool), params, problems, rng=_key(config.seed, 4),
                                   samples=args.samples, max_new_tokens=args.max_new_tokens)
    finally:
        pool.close()
    report["checkpoint"], report["step"] = os.path.abspath(args.checkpoint), step
    print(format_table(report))
    out = args.out or os.path.join(workdir, "eval.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
