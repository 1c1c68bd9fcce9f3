"""`python -m microcoder_jax.eval --checkpoint=DIR [--step=N] [--out=FILE] [--config=FILE]
[--config.eval.KEY=VALUE ...]`

pass@1, and pass@k for every k up to the samples per problem (the unbiased estimator of Chen et
al. 2021), overall and by difficulty and platform, printed as a table and written as JSON.
`--checkpoint` is a training workdir (its newest checkpoint; `--step` picks another) or a Hugging
Face checkpoint directory. The problems are `eval.files` (the demo's own problems for the demo);
samples, response cap, sampling and the date window are the `eval.*` config keys. The table and
the report name the step scored and whether the problems are held out or training problems; the
report goes to WORKDIR/eval.json (for a Hugging Face folder DIR: DIR-eval/eval.json; or `--out`),
and the eval writes nothing outside that folder. `--step=0` is refused: the start's score is the
run's own (train.eval_at_start: WORKDIR/eval/step_0.json), shown under the table when it exists.
The training loop calls `evaluate_at_step` on its eval schedule.
"""

from __future__ import annotations

import json
import os
import re
import collections
from collections import defaultdict

import numpy as np

from microcoder_jax.data.dates import in_window


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n - c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, have {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def summarize(problems, passes: list[list[bool]], ks=None, judge_errors: int = 0) -> dict:
    """Per-problem pass counts -> pass@k overall, by difficulty and by platform.

    `passes[i]` holds problem i's judged samples only: a sample the judge could not run
    (`judge_error`, counted in `judge_errors`) is neither a pass nor a fail, and a problem left
    with fewer than k judged samples is left out of pass@k (its count is in `short_of_k`).
    """
    n = max((len(p) for p in passes), default=0)
    ks = [k for k in (ks or (1, 2, 4, 8, 16, 32, 64)) if k <= n] or ([1] if n else [])

    def group(indices):
        out: dict = {"problems": len(indices)}
        for k in ks:
            vals = [pass_at_k(len(passes[i]), sum(passes[i]), k) for i in indices if len(passes[i]) >= k]
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
        "judge_errors": int(judge_errors),
        "short_of_k": {f"pass@{k}": sum(len(p) < k for p in passes) for k in ks},
        "per_problem": {p.question_id: int(sum(passes[i])) for i, p in enumerate(problems)},
    }


def format_table(report: dict) -> str:
    """A plain-text table: what was scored (the step, the problems: held out or the training
    ones), then one row per group, one column per pass@k."""
    keys = [k for k in report["overall"] if k.startswith("pass@")]
    lines = [f"scored: {report['scored']}"] if "scored" in report else []
    if "problem_set" in report:
        lines.append(f"problems: {report['problem_set']['description']}")
    lines.append(f"{'group':<28}{'problems':>9}" + "".join(f"{k:>10}" for k in keys))

    def row(name, g):
        lines.append(f"{name:<28}{g['problems']:>9}" + "".join(f"{100 * g[k]:>9.1f}%" for k in keys))

    row("overall", report["overall"])
    for section in ("by_difficulty", "by_platform"):
        for name, g in report[section].items():
            row(f"{section[3:]}={name}", g)
    if "greedy" in report:
        lines.append(f"greedy (T = 0) pass@1: {100 * report['greedy']['overall']['pass@1']:.1f}%")
    if "episodes" in report:  # multi-turn: one episode per problem, pass@1 by the turn it passed
        e = report["episodes"]
        turns = sorted(k for k in e if k.startswith("pass_turn"))
        lines.append(
            "episodes: "
            + ", ".join(f"pass@1 after turn {k[9:]} {100 * e[k]:.1f}%" for k in turns)
            + f", repaired {100 * e['repaired_frac']:.1f}%, {e['turns_mean']:.2f} turns"
            + (f", {100 * e['repeat_frac']:.0f}% of later answers repeat the program" if "repeat_frac" in e else "")
        )
        for turn, counts in e.get("answers_by_turn", {}).items():
            total = sum(counts.values()) or 1
            shares = ", ".join(f"{k} {100 * c / total:.0f}%" for k, c in sorted(counts.items(), key=lambda x: -x[1]))
            lines.append(f"  answers of {turn}: {shares}")
    if report.get("reasons"):
        total = sum(report["reasons"].values()) or 1
        lines.append(
            "answers: " + ", ".join(f"{name} {100 * c / total:.0f}%" for name, c in report["reasons"].items() if c)
        )
    return "\n".join(lines)


LENGTH_BINS = 16

# Why an answer failed, in the order the first that applies is taken: the answer hit the response
# cap, had no code block, read its input with a prompt (`input("Enter a: ")`, which a judge
# reading stdout takes as part of the answer), or else the judge's verdict.
FAILURE_REASONS = (
    "passed",
    "truncated",
    "no_code",
    "prompt_text",
    "wrong_answer",
    "runtime_error",
    "compile_error",
    "timeout",
    "memory_limit",
)
_PROMPTED_INPUT = re.compile(r"""\binput\(\s*[rRbBfFuU]{0,2}(['"])(?!\1)""")
EXAMPLES_PER_REASON = 2


def failure_reason(result, code: str | None, truncated: bool) -> str:
    """The first of FAILURE_REASONS that applies to a judged answer (not a judge_error); `result`:
    its Turn (envs/) or JudgeResult, `code`: the program judged."""
    if result.passed:
        return "passed"
    if truncated:
        return "truncated"
    if code is None or result.verdict == "no_code":
        return "no_code"
    if _PROMPTED_INPUT.search(code):
        return "prompt_text"
    return result.verdict if result.verdict in FAILURE_REASONS else "runtime_error"


def by_length(lengths, passed, cap: int, bins: int = LENGTH_BINS) -> list[dict]:
    """Pass rate of answers in `bins` equal-width response-length bins over 1..cap (tokens, the end
    token included): where length pays. Empty bins are left out."""
    lengths, passed = np.asarray(lengths), np.asarray(passed, bool)
    edges = np.linspace(0, cap, bins + 1)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (lengths > lo) & (lengths <= hi)
        if inside.any():
            out.append(
                {
                    "from": int(lo) + 1,
                    "to": int(hi),
                    "answers": int(inside.sum()),
                    "pass_rate": float(passed[inside].mean()),
                }
            )
    return out


def _failure_reasons(turns, truncated, judged, texts, examples: dict) -> np.ndarray:
    """Each answer's index in FAILURE_REASONS (-1: not judged); keeps the first answers of each
    reason in ``examples`` (up to EXAMPLES_PER_REASON)."""
    reason = np.array(
        [
            FAILURE_REASONS.index(failure_reason(turn, turn.program, bool(t))) if j else -1
            for turn, t, j in zip(turns, truncated, judged)
        ],
        np.int32,
    )
    for r, text in zip(reason, texts):
        if r >= 0 and len(examples.setdefault(FAILURE_REASONS[r], [])) < EXAMPLES_PER_REASON:
            examples[FAILURE_REASONS[r]].append(text)
    return reason


def evaluate_problems(run, pool, params, problems, *, rng, temperature=None, samples=None, progress=None) -> dict:
    """Sample `eval.samples` answers per problem in the date window (at `eval.temperature`; the
    keyword arguments override both), judge them, summarize pass@k and the answers' lengths.
    `progress(line)`: told after each batch of problems (the eval CLI prints it)."""
    import jax

    from microcoder_jax import sharding
    from microcoder_jax.data.loader import make_prompt_set
    from microcoder_jax.envs import make_env
    from microcoder_jax.trainer.rollout import GroupJudge, generate, verdict_arrays

    e = run.eval
    temperature = e.temperature if temperature is None else temperature
    problems = [p for p in problems if in_window(p.contest_date, e.date_from, e.date_to)][: e.max_problems or None]
    env = make_env(run.data, "all")  # pass@k counts answers that pass every test, whatever the training reward
    prompt_set = make_prompt_set(problems, run.tokenizer, run.data, messages=env.messages)
    kept, prompts = prompt_set.problems, prompt_set.prompts
    passes: list[list[bool]] = []
    judge_errors = 0
    size, k = e.batch_problems, samples or e.samples
    lengths, truncated, judged_passes, reasons = [], [], [], []  # per judged answer
    examples: dict[str, list[str]] = {}  # this host's first answers per failure reason
    for start in range(0, len(kept), size):
        chunk, chunk_prompts = kept[start : start + size], prompts[start : start + size]
        pad = size - len(chunk)  # a full batch every call: one compiled shape
        # each host judges its share of the real rows (the padding prompts' are dropped) and the
        # verdicts are all-gathered; with the paged engine each problem's samples go to the pool as
        # they finish, overlapping the tail of decoding
        n = len(chunk) * k
        judge = GroupJudge(run, pool, chunk + [chunk[-1]] * pad, k, rows=sharding.host_rows(n), env=env)
        out = generate(
            run,
            params,
            chunk_prompts + [chunk_prompts[-1]] * pad,
            num_samples=k,
            temperature=temperature,
            max_new_tokens=e.max_new_tokens,
            top_p=e.top_p,
            top_k=0,
            rng=jax.random.fold_in(rng, start),
            on_group_done=judge.add,
        )
        turns = judge.results()
        rewards, passed, _, _ = verdict_arrays(turns)
        judged = np.isfinite(rewards)  # a judge_error's reward is NaN: not the answer's fault
        mine = np.asarray(out.truncated[:n])[judge.rows]
        reason = _failure_reasons(turns, mine, judged, judge.texts(), examples)
        passed, judged, reason = sharding.allgather_rows([passed, judged, reason], n)
        reasons += np.asarray(reason)[np.asarray(judged, bool)].tolist()
        judge_errors += int(n - judged.sum())
        lengths += np.asarray(out.lengths[:n])[judged].tolist()
        truncated += np.asarray(out.truncated[:n])[judged].tolist()
        judged_passes += np.asarray(passed)[judged].tolist()
        passes += [
            [bool(p) for p, j in zip(passed[i * k : (i + 1) * k], judged[i * k : (i + 1) * k]) if j]
            for i in range(len(chunk))
        ]
        if progress is not None:
            progress(f"{len(passes)} of {len(kept)} problems at T = {float(temperature):g}: {sum(judged_passes)} of "
                     f"{len(judged_passes)} answers passed")  # fmt: skip
    report = summarize(kept, passes, judge_errors=judge_errors)
    report["skipped_too_long"] = prompt_set.skipped_too_long
    report["date_window"] = [e.date_from, e.date_to]
    report["max_new_tokens"] = e.max_new_tokens
    report["temperature"] = float(temperature)
    report["lengths"] = {
        "mean": float(np.mean(lengths)) if lengths else float("nan"),
        "truncated": float(np.mean(truncated)) if truncated else float("nan"),
        # the finished answers only: a truncated one is at the cap whatever it would have written
        "by_length": by_length(
            np.asarray(lengths)[~np.asarray(truncated, bool)],
            np.asarray(judged_passes, bool)[~np.asarray(truncated, bool)],
            e.max_new_tokens,
        ),
    }
    report["reasons"] = {name: reasons.count(i) for i, name in enumerate(FAILURE_REASONS)}
    report["examples"] = examples
    return report


def problem_set(run, compared: bool = True, scored: int | None = None) -> dict:
    """Which problems an eval scores, against the training problems: {"held_out": True / False /
    None (not known), "description": one line}. `compared`: whether the run names its training
    data (the eval CLI without data.train_files has only eval.files); `scored`: how many were
    scored (the date window, eval.max_problems), default all."""
    config, n = run.config, len(run.eval_problems) if scored is None else scored
    if config.data.task == "demo":
        per_op = config.demo.held_out_per_op
        if per_op:
            return {
                "held_out": True,
                "description": f"{n} held out: the demo's evaluation problems, with tests of their own "
                f"(demo.held_out_per_op={per_op})",
            }
        return {
            "held_out": False,
            "description": f"the {n} training problems (demo.held_out_per_op=0; set it to score held-out tests)",
        }
    if not compared:
        return {"held_out": None, "description": f"{n} from eval.files (data.train_files unset: not compared)"}
    trained = {p.question_id for p in run.prompt_set.problems}
    shared = sum(p.question_id in trained for p in run.eval_problems)
    if not shared:
        return {"held_out": True, "description": f"{n} held out (eval.files: no question_id in data.train_files)"}
    if shared == n:
        return {
            "held_out": False,
            "description": f"the {n} training problems (every eval.files id is in data.train_files)",
        }
    return {
        "held_out": False,
        "description": f"{n} from eval.files, {shared} of them training problems (data.train_files)",
    }


def start_score(workdir: str) -> dict | None:
    """The run's own score of its starting params (train.eval_at_start: WORKDIR/eval/step_0.json)."""
    path = os.path.join(workdir, "eval", "step_0.json")
    try:
        with open(path) as f:
            overall = json.load(f)["overall"]
    except (OSError, ValueError, KeyError):
        return None
    return {"file": path, **{k: v for k, v in overall.items() if k.startswith("pass@")}}


def evaluate_run(run, pool, params, rng, progress=None) -> dict:
    """The run's evaluation problems at `eval.*`; with `eval.greedy` also one greedy answer each
    (report["greedy"]): pass@1 of the policy itself, free of the sampling temperature."""
    report = evaluate_problems(run, pool, params, run.eval_problems, rng=rng, progress=progress)
    if run.eval.greedy:
        already = run.eval.temperature == 0 and run.eval.samples == 1  # the report is the greedy pass
        greedy = (
            report
            if already
            else evaluate_problems(
                run, pool, params, run.eval_problems, rng=rng, temperature=0.0, samples=1, progress=progress
            )
        )
        report["greedy"] = {k: greedy[k] for k in ("overall", "lengths", "reasons", "examples")}
    if run.env.max_turns > 1:
        report["episodes"] = evaluate_episodes(run, pool, params, run.eval_problems, rng=rng, progress=progress)
    return report


def evaluate_episodes(run, pool, params, problems, *, rng, progress=None) -> dict:
    """Multi-turn episodes on the evaluation problems (env.kind=feedback), `eval.samples` per problem
    at `eval.temperature`, judged with the `all` reward: pass@1 after each turn (an episode counts
    from the turn its answer passes), how often a failing first answer is repaired, how often an
    answer after feedback repeats the previous program, turns per episode."""
    import jax

    from microcoder_jax.data.loader import make_prompt_set
    from microcoder_jax.envs import make_env
    from microcoder_jax.trainer.episodes import collect_episodes, merge_stats, turn_sampler
    from microcoder_jax.trainer.rollout import sampler_for

    e = run.eval
    problems = [p for p in problems if in_window(p.contest_date, e.date_from, e.date_to)][: e.max_problems or None]
    env = make_env(run.data, "all", run.env_config)
    prompt_set = make_prompt_set(problems, run.tokenizer, run.data, messages=env.messages)
    kept, prompts, size, samples = prompt_set.problems, prompt_set.prompts, e.batch_problems, e.samples
    first, later = sampler_for(run), turn_sampler(run, e.max_new_tokens)
    parts: list = []  # (episode stats, real episodes) of each batch
    whys: dict = {}  # turn -> why its answers failed (or passed), over the real episodes
    for start in range(0, len(kept), size):
        chunk, chunk_prompts = kept[start : start + size], prompts[start : start + size]
        pad = size - len(chunk)  # a full batch every call: one compiled shape
        answers: list = []
        _, _, stats = collect_episodes(
            run, first, later, pool, params, chunk + [chunk[-1]] * pad, chunk_prompts + [chunk_prompts[-1]] * pad,
            temperature=e.temperature, rng=jax.random.fold_in(rng, start), times=collections.Counter(),
            env=env, group_size=samples, real_rows=len(chunk) * samples, max_new_tokens=e.max_new_tokens,
            answers=answers,
        )  # fmt: skip
        for turn, row, why in answers:
            if row < len(chunk) * samples:
                counts = whys.setdefault(f"turn{turn + 1}", {})
                counts[why] = counts.get(why, 0) + 1
        parts.append((stats, len(chunk) * samples))
        if progress is not None:
            done, so_far = min(start + size, len(kept)), merge_stats(parts)
            turns = ", ".join(
                f"after turn {k[9:]} {so_far[k]:.3f}" for k in sorted(so_far) if k.startswith("pass_turn")
            )
            progress(f"episodes: {done} of {len(kept)} problems, pass@1 {turns}")
    return merge_stats(parts) | {"problems": len(kept), "answers_by_turn": whys}


def reason_shares(report: dict) -> dict:
    """{"eval_reason/<name>": share of the judged answers} for the metrics rows."""
    total = sum(report.get("reasons", {}).values())
    return {f"eval_reason/{k}": v / total for k, v in report.get("reasons", {}).items()} if total else {}


def evaluate_at_step(run, pool, params, step: int, writer, rng, log_fn=print) -> dict:
    """The training loop's eval: the report in WORKDIR/eval/step_N.json, its numbers in the metrics."""
    import jax

    report = evaluate_run(run, pool, params, rng)
    report["step"], report["problem_set"] = step, problem_set(run, scored=report["overall"]["problems"])
    report["scored"] = f"step {step}" + (" (the starting params, before RL step 1)" if step == 0 else "")
    if jax.process_index() == 0:
        path = os.path.join(run.workdir, "eval", f"step_{step}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
    log_fn(format_table(report))
    if writer is not None:
        writer.write(
            step,
            {
                **{f"eval_{k}": v for k, v in report["overall"].items() if isinstance(v, (int, float))},
                "eval_judge_errors": report["judge_errors"],
                "eval_response_length": report["lengths"]["mean"],
                "eval_truncation_rate": report["lengths"]["truncated"],
                **reason_shares(report),
                **({"eval_greedy_pass@1": report["greedy"]["overall"]["pass@1"]} if "greedy" in report else {}),
                **{
                    f"eval_episode_{k}": v
                    for k, v in report.get("episodes", {}).items()
                    if k != "problems" and isinstance(v, (int, float))
                },
            },
        )
        writer.write_text(step, "eval", format_table(report))
    return report


def _is_hf_dir(path: str) -> bool:
    return os.path.exists(os.path.join(path, "config.json")) and not os.path.isdir(os.path.join(path, "checkpoints"))


def _load_params(run, checkpoint: str, step: int | None):
    """Params from a training workdir / its checkpoints dir, or from a HF checkpoint directory."""
    from microcoder_jax.models.checkpoint import load_params
    from microcoder_jax.trainer.setup import abstract_train_state, frozen_base, with_base

    if _is_hf_dir(checkpoint):
        from microcoder_jax.models import hf

        return hf.load_hf_params(checkpoint, run.model_config, mesh=run.mesh), "hf"
    directory = (
        os.path.join(checkpoint, "checkpoints")
        if os.path.isdir(os.path.join(checkpoint, "checkpoints"))
        else checkpoint
    )
    params, found = load_params(directory, abstract_train_state(run).params, step)
    if not run.model_config.lora_rank:
        return params, found
    from microcoder_jax.models.checkpoint import read_checkpoint_meta

    meta = read_checkpoint_meta(directory, found)  # LoRA: adapters on the base they were trained on
    return with_base(run, params, frozen_base(run), meta, f"checkpoint step {found} in {directory}"), found


def _progress():
    """A progress printer for the eval CLI: each line on stderr with the seconds since the start."""
    import sys
    import time

    start = time.perf_counter()
    return lambda line: print(f"eval [{time.perf_counter() - start:6.0f} s] {line}", file=sys.stderr, flush=True)


def _define_flags(fv) -> None:
    from absl import flags

    flags.DEFINE_string(
        "checkpoint",
        None,
        "training workdir (or its checkpoints/ dir), a HF checkpoint dir, or a .gguf file / 'smollm2'",
        flag_values=fv,
    )
    flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)
    flags.DEFINE_string(
        "out",
        None,
        "JSON report path (default: WORKDIR/eval.json; for a Hugging Face folder DIR, DIR-eval/eval.json); "
        "whatever the eval writes goes into its folder",
        flag_values=fv,
    )


def _prepare(args):
    """The validated config and the workdir for `--checkpoint`; raises ConfigError."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.config import validate

    from microcoder_jax.models import resolve_model_path

    if args.checkpoint:  # a .gguf file or 'smollm2': the HF folder it converts into (cached)
        try:
            args.checkpoint = resolve_model_path(args.checkpoint)
        except (FileNotFoundError, ValueError) as e:
            raise config_lib.ConfigError(f"--checkpoint={args.checkpoint!r}: {e}") from None
    if not args.checkpoint or not os.path.exists(args.checkpoint):
        raise config_lib.ConfigError(
            f"--checkpoint={args.checkpoint!r}: pass an existing training workdir or Hugging Face checkpoint directory"
        )
    config = args.config
    with config.unlocked():
        if _is_hf_dir(args.checkpoint) and not config.model.path:
            config.model.path = args.checkpoint
        if config.data.task == "problems" and not config.data.train_files:
            config.data.train_files = tuple(config.eval.files)  # setup needs a prompt source
    if config.data.task == "problems" and not config.eval.files:
        raise config_lib.ConfigError("eval.files is empty: pass --config.eval.files=FILE[,FILE...]")
    validate(config)
    if os.path.isdir(os.path.join(args.checkpoint, "checkpoints")):
        return config, args.checkpoint  # a training workdir
    if _is_hf_dir(args.checkpoint):  # not the current directory: the report (and the demo's tokenizer) go
        # next to the export, or beside --out
        if args.out:
            return config, os.path.dirname(os.path.abspath(args.out))
        return config, os.path.abspath(args.checkpoint).rstrip(os.sep) + "-eval"
    return config, os.path.dirname(os.path.abspath(args.checkpoint))  # its checkpoints/ dir


def main(argv=None) -> int:
    from microcoder_jax import cli, sharding
    from microcoder_jax import config as config_lib

    def body() -> int:
        from microcoder_jax.judge.config import open_pool
        from microcoder_jax.trainer.setup import key, problem_files, setup

        args = cli.parse(
            argv,
            prog="python -m microcoder_jax.eval",
            doc=__doc__,
            default_file=config_lib.DEFAULT_FILE,
            define_flags=_define_flags,
        )
        if args.step == 0:
            raise config_lib.ConfigError(
                "--step=0: a run keeps no checkpoint of its starting params; with train.eval_at_start=True "
                "the run scores them itself (WORKDIR/eval/step_0.json, and the eval rows of step 0 in metrics.jsonl)"
            )
        compared = bool(args.config.data.train_files)  # before _prepare fills it in from eval.files
        config, workdir = _prepare(args)
        d = config.distributed
        sharding.initialize_distributed(d.coordinator_address, d.num_processes, d.process_id, mode=d.initialize)
        run = setup(config, workdir)
        if args.step is not None and _is_hf_dir(args.checkpoint):
            raise config_lib.ConfigError(
                f"--step={args.step}: {args.checkpoint} is a Hugging Face folder (one set of weights); drop --step"
            )
        try:
            params, step = _load_params(run, args.checkpoint, args.step)
        except FileNotFoundError as e:  # a pruned or never-saved step: the kept ones, in one line
            raise config_lib.ConfigError(f"--step={args.step}: {e}" if args.step is not None else str(e)) from None
        pool = open_pool(run.judge, hide=problem_files(run))
        try:  # the judge hides every problem file: programs cannot read the answers
            report = evaluate_run(run, pool, params, key(run.seed, 4), progress=_progress())
        finally:
            pool.close()
        report["checkpoint"], report["step"] = os.path.abspath(args.checkpoint), step
        report["problem_set"] = problem_set(
            run, compared=compared or config.data.task == "demo", scored=report["overall"]["problems"]
        )
        where = report["checkpoint"]
        report["scored"] = f"the Hugging Face folder {where}" if step == "hf" else f"step {step} of {workdir}"
        report["start"] = start_score(workdir) if step != "hf" else None
        print(format_table(report))
        if step != "hf":
            start = report["start"]
            print(
                f"the start (step 0, before RL; the run's own eval): pass@1 {100 * start['pass@1']:.1f}% "
                f"({start['file']})"
                if start and "pass@1" in start
                else "the start (step 0): not scored by this run; train.eval_at_start=True scores the starting "
                "params before RL step 1 (WORKDIR/eval/step_0.json)"
            )
        out = args.out or os.path.join(workdir, "eval.json")
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {out}")
        return 0

    return cli.main_guard(body)
