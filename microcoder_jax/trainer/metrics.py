"""Per-step metrics: one JSON object per line in `<workdir>/metrics.jsonl`, TensorBoard scalars, tqdm
on a terminal or one plain line per step in a log file (`step_line`), and the run's closing summary.

The JSONL file is the record the plots and tests read. On resume, rows logged after the checkpoint
the run restarts from are dropped first (the file is replaced whole, never half-written), so each
step appears once however the previous process ended; TensorBoard purges the same steps
(`purge_step`; a fresh start purges all). `extra` (W&B, which keeps only increasing steps) is not
sent the re-run steps the previous process already logged there: it keeps their first values.

Throughput and cost (`throughput`, in every row): gen_tokens (the model's tokens sampled, feedback turns left out; under
DAPO with refills, estimated as the trained rows' mean length x every judged response),
train_tokens (real tokens through the train step's forward and backward), judge_programs /
judge_tests (programs judged, tests run), their rates per second of their phase
(`throughput/*_per_s`), each phase's share of the step (`share/*`, the rest is `share/other`),
and `cost/chip_s` = devices x step seconds, per solved problem (a group with a passing response)
and per passing response (None when there is none).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Iterable

import numpy as np

# Shown in the progress bar, in this order (name in the record -> short label).
PROGRESS_KEYS = (
    ("reward_mean", "reward"),
    ("pass_rate", "pass"),
    ("response_length_mean", "len"),
    ("temperature", "T"),
    ("entropy", "ent"),
    ("grad_norm", "gnorm"),
)


# Step metrics stored under another name in the row: the step's reward_mean is after the
# truncation rule's shaping (soft overlong), the row's reward_mean is the judge's reward.
RENAMED_STEP_METRICS = {"reward_mean": "reward_shaped_mean", "entropy": "policy_entropy"}


def read_metrics(path: str) -> list[dict]:
    """All rows of a metrics.jsonl file (a torn last line from a killed run is ignored)."""
    from microcoder_jax.data.jsonl import read_jsonl

    return [row for _, row in read_jsonl(path, missing_ok=True) if isinstance(row, dict)]


def step_record(
    step_metrics: dict,
    rollout,
    div: dict,
    *,
    signal: str,
    temperature: float,
    next_temperature: float,
    times: dict,
    verdicts: dict,
    ds_stats: dict,
    generations: int,
    t_step: float,
    group_size: int | None = None,
    devices: int = 1,
    judge_tests: int | None = None,
) -> dict:
    """The metrics.jsonl row of one step, from the step's metrics and the Rollout it trained on;
    with `group_size`, the throughput and cost keys too (`judge_tests`: tests run, all hosts)."""
    m = step_metrics
    record: dict = {
        "reward_mean": _judged_mean(rollout.rewards),  # NaN rewards are judge errors: left out
        "pass_rate": float(np.mean(rollout.passed)),
        "response_length_mean": float(np.mean(rollout.response_lengths)),
        "truncation_rate": float(np.mean(rollout.truncated)),
        "masked_fraction": float(m.get("frac_masked", 0.0)) + float(m.get("frac_removed", 0.0)),
        "repetition_rate": float(m.get("frac_repeating", 0.0)),
        "diversity": div.get(signal, float("nan")),
        "temperature": temperature,
        "next_temperature": next_temperature,
        "entropy": div["entropy"],
        "clip_fraction": m.get("clip_frac"),
        "no_code_rate": float(np.mean(rollout.no_code)),
        "time_sample_s": times["sample"],
        "time_judge_s": times["judge"],
        "time_judge_wait_s": times["judge_wait"],
        "time_train_s": times["train"],
        "time_step_s": time.perf_counter() - t_step,
        "generations": generations,
    }
    for k, v in m.items():
        record.setdefault(RENAMED_STEP_METRICS.get(k, k), v)
    record.update({f"div/{k}": v for k, v in div.items()})
    total = max(sum(verdicts.values()), 1)
    record.update({f"verdict/{k}": v / total for k, v in verdicts.items()})
    record.update(ds_stats)
    record["rows"] = len(rollout.rewards)
    if group_size is not None:
        record.update(
            throughput(
                rollout,
                times,
                time_step=record["time_step_s"],
                group_size=group_size,
                devices=devices,
                programs=sum(verdicts.values()),
                tests=judge_tests,
                generations=generations,
            )
        )
    return record


PARTIAL_KEYS = (
    "token_age_max",
    "stale_token_frac",
    "groups_carried",
    "groups_dropped_stale",
    "prompts_in_flight",
    "recomputed_tokens",
)


def decode_metrics(decode: dict, staleness: int) -> dict:
    """The paged engine's slot utilisation (live slot-steps over decode steps x the full slot
    width S: how full the engine ran, the tail included) and, with partial rollouts, the token
    ages (steps between the weights that drew a token and those that train on it), carries, drops."""
    out: dict = {}
    if "slots" in decode:  # NaN: the batch needed no decoding (partial rollouts: all of it had finished)
        steps, live = decode.get("steps", 0), decode.get("live_slot_steps", 0)
        out["slot_utilisation"] = live / (steps * decode["slots"]) if steps else float("nan")
        out["decode_steps"] = steps
    if "token_age_mean" in decode:
        out["token_age_mean"] = decode["token_age_mean"] + staleness
        out.update({k: decode[k] + (staleness if k == "token_age_max" else 0) for k in PARTIAL_KEYS})
    return out


def step_row(
    run,
    step_metrics: dict,
    got,
    div: dict,
    *,
    temperature: float,
    next_temperature: float,
    times: dict,
    t_step: float,
    judge_tests,
    staleness: int = 0,
    weights_bytes: int = 0,
) -> dict:
    """The metrics row of a trained step batch (`got`: a StepRollout whose batch is the one
    trained, old log-probs in): `step_record`, the sampler/learner log-prob gap, the batch's
    staleness (updates between the policy that sampled it and the one that trained on it) and
    the paged engine's counts. The loop's and replay's tail."""
    import jax

    record = step_record(
        step_metrics,
        got.batch,
        div,
        signal=run.temperature.signal,
        temperature=temperature,
        next_temperature=next_temperature,
        times=times,
        verdicts=got.verdicts,
        ds_stats=got.ds_stats,
        generations=got.generations,
        t_step=t_step,
        group_size=run.sampling.group_size,
        devices=jax.device_count(),
        judge_tests=judge_tests,
    )
    gaps = got.gaps
    record["sampler_logprob_gap"] = sum(gaps) / len(gaps) if gaps else float("nan")
    record["staleness"] = staleness
    record.update(decode_metrics(got.decode or {}, staleness))
    record.update({f"episode_{k}": v for k, v in (got.episodes or {}).items()})  # multi-turn (trainer/episodes.py)
    if "rollout_wait" in times:  # the learner waiting for the worker's batch
        record["time_rollout_wait_s"] = times["rollout_wait"]
    if "weights" in times:  # mesh.rollout_devices: the learner -> worker weight transfer
        record["time_weights_s"] = times["weights"]
        record["weights_bytes"] = weights_bytes
    return record


def _step_of(row: dict) -> float:
    step = row.get("step")
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else math.inf


def _judged_mean(rewards) -> float:
    r = np.asarray(rewards, np.float32)
    r = r[np.isfinite(r)]
    return float(r.mean()) if r.size else 0.0


def _rate(count, seconds):
    return count / seconds if count is not None and seconds > 0 else None


def throughput(
    rollout,
    times: dict,
    *,
    time_step: float,
    group_size: int,
    devices: int,
    programs: int,
    tests: int | None,
    generations: int,
) -> dict:
    """Rates, phase shares and chip-seconds of one step (see the module doc)."""
    # the model's tokens: the response mask, which leaves out a multi-turn episode's feedback turns
    # (response_lengths spans them)
    lengths = np.asarray(rollout.response_mask).sum(axis=1)
    gen_tokens = int(lengths.sum()) if generations <= 1 else int(round(float(lengths.mean()) * programs))
    train_tokens = int(np.asarray(rollout.attention_mask).sum())
    passed = np.asarray(rollout.passed, bool)
    solved = int(passed.reshape(-1, group_size).any(1).sum())
    chip_s = devices * time_step
    out = {
        "gen_tokens": gen_tokens,
        "train_tokens": train_tokens,
        "judge_programs": programs,
        "judge_tests": tests,
        "solved_problems": solved,
        "passing_responses": int(passed.sum()),
        "throughput/gen_tokens_per_s": _rate(gen_tokens, times["sample"]),
        "throughput/train_tokens_per_s": _rate(train_tokens, times["train"]),
        "throughput/judge_programs_per_s": _rate(programs, times["judge"]),
        "throughput/judge_tests_per_s": _rate(tests, times["judge"]),
        "cost/chip_s": chip_s,
        "cost/chip_s_per_solved_problem": chip_s / solved if solved else None,
        "cost/chip_s_per_passing_response": chip_s / passed.sum() if passed.any() else None,
    }
    phases = {k: times[k] for k in ("sample", "judge", "train")}
    for name, seconds in phases.items():
        out[f"share/{name}"] = seconds / time_step if time_step > 0 else None
    out["share/other"] = max(0.0, 1.0 - sum(phases.values()) / time_step) if time_step > 0 else None
    return out


def tests_run(result, every_test: bool) -> int:
    """Tests a JudgeResult ran: all of them when it passed or was judged with `every_test`, up to
    the first failure otherwise or on a compile error, none without a program."""
    if result.verdict in ("no_code", "judge_error"):
        return 0
    if result.passed or (every_test and result.verdict != "compile_error") or result.first_failure is None:
        return result.tests_total
    return result.first_failure + 1


class _CountedHandle:
    """A JudgeHandle whose results add their tests to the counter, once."""

    def __init__(self, handle, counter: "JudgeCounter", every_test: bool):
        self._handle, self._counter, self._every_test, self._counted = handle, counter, every_test, False

    def result(self, *args, **kwargs):
        results = self._handle.result(*args, **kwargs)
        if not self._counted:
            self._counted = True
            self._counter.tests += sum(tests_run(r, self._every_test) for r in results)
        return results

    def __getattr__(self, name):
        return getattr(self._handle, name)


class JudgeCounter:
    """The judge pool, counting the tests its programs run (this host's); `take()` returns the
    count since the last take and starts again (the loop takes it at each step's start and end)."""

    def __init__(self, pool):
        self._pool, self.tests = pool, 0

    def submit(self, problems, codes, *, every_test: bool = False, show_output: int = 0):
        handle = self._pool.submit(problems, codes, every_test=every_test, show_output=show_output)
        return _CountedHandle(handle, self, every_test)

    def judge(self, problems, codes, *, every_test: bool = False, show_output: int = 0):
        return self.submit(problems, codes, every_test=every_test, show_output=show_output).result()

    def take(self) -> int:
        tests, self.tests = self.tests, 0
        return tests

    def __getattr__(self, name):
        return getattr(self._pool, name)


def _plain(value):
    """A JSON-ready float/int/str from numpy or jax scalars; NaN/Inf become strings JSON accepts."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(np.asarray(value))
    return value if math.isfinite(value) else repr(value)


def plain_row(step: int, metrics: dict) -> dict:
    """The JSON-ready row of a step, as metrics.jsonl holds it."""
    return {"step": int(step), **{k: _plain(v) for k, v in metrics.items() if k != "step"}}


class MetricsWriter:
    """Appends step records to metrics.jsonl and TensorBoard, and to `extra` (a writer with
    write / write_text / close, e.g. W&B); only the writing process should hold one."""

    def __init__(self, workdir: str, *, resume_step: int | None = None, tensorboard: bool = True, extra=None):
        self._extra = extra
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, "metrics.jsonl")
        old = read_metrics(self.path)
        kept = [r for r in old if resume_step is not None and _step_of(r) <= resume_step]
        # the steps `extra` got from the previous process (it continues that run only on a resume)
        steps = [_step_of(r) for r in old] if resume_step is not None else []
        self.extra_logged_through = max((s for s in steps if s != math.inf), default=-1)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:  # drop rows past the checkpoint; a kill here keeps the old file
            f.writelines(json.dumps(r) + "\n" for r in kept)
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(
                os.path.join(workdir, "tensorboard"), purge_step=0 if resume_step is None else resume_step + 1
            )

    def write(self, step: int, metrics: dict) -> dict:
        """Record one step; returns the plain record written."""
        record = plain_row(step, metrics)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
        if self._extra is not None and step > self.extra_logged_through:
            self._extra.write(step, record)
        return record

    def write_text(self, step: int, tag: str, text: str) -> None:
        """A text event (temperature decisions, evaluation tables) in TensorBoard."""
        if self._tb is not None:
            self._tb.add_text(tag, text, step)
        if self._extra is not None and step > self.extra_logged_through:
            self._extra.write_text(step, tag, text)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._extra is not None:
            self._extra.close()


def progress_postfix(record: dict, keys: Iterable[tuple[str, str]] = PROGRESS_KEYS) -> dict:
    """The progress bar's key numbers from a step record."""
    out = {}
    for key, label in keys:
        value = record.get(key)
        if isinstance(value, (int, float)):
            out[label] = f"{value:.3g}"
    return out


def step_line(step: int, steps: int, record: dict) -> str:
    """One plain log line of a step (what a log file gets instead of the progress bar)."""

    def num(key, fmt):
        value = record.get(key)
        return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"

    return (
        f"step {step}/{steps}: reward {num('reward_mean', '.3f')}  pass {num('pass_rate', '.3f')}  "
        f"len {num('response_length_mean', '.1f')}  trunc {num('truncation_rate', '.3f')}  "
        f"T {num('temperature', 'g')}  {num('time_step_s', '.1f')} s"
    )


def _mean(rows: list, key: str):
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return sum(values) / len(values) if values else None


def _span(rows: list) -> str:
    steps = [int(r["step"]) for r in rows]
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"


def run_summary(workdir: str, *, evaluate: str | None = None, checkpoints=(), window: int = 5) -> list[str]:
    """The lines a finished run ends with: the reward (and pass rate) over its first and last
    `window` steps, held-out pass@1 at its first and last evaluation, where its files are, and the
    commands that draw the plots, evaluate and show TensorBoard (`evaluate`: the eval command)."""
    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    train_rows = sorted((r for r in rows if "reward_mean" in r), key=_step_of)
    lines = [f"done: {workdir}"]
    if train_rows:
        k = max(1, min(window, len(train_rows) // 2))
        first, last = train_rows[:k], train_rows[-k:]
        lines.append(
            f"  reward {_mean(first, 'reward_mean'):.3f} ({_span(first)}) -> {_mean(last, 'reward_mean'):.3f} "
            f"({_span(last)}); pass rate {_mean(first, 'pass_rate'):.3f} -> {_mean(last, 'pass_rate'):.3f}"
        )
    evals = sorted((r for r in rows if isinstance(r.get("eval_pass@1"), (int, float))), key=_step_of)
    if evals:
        a, b = evals[0], evals[-1]
        lines.append(
            f"  held-out pass@1 {a['eval_pass@1']:.3f} (step {a['step']}) -> {b['eval_pass@1']:.3f} (step {b['step']})"
        )
    lines.append(f"  metrics      {os.path.join(workdir, 'metrics.jsonl')} (one row per step)")
    if checkpoints:
        lines.append(
            f"  checkpoints  {os.path.join(workdir, 'checkpoints')} (steps {', '.join(map(str, checkpoints))})"
        )
    if os.path.isdir(os.path.join(workdir, "eval")):
        lines.append(f"  eval         {os.path.join(workdir, 'eval')}/step_N.json (train.eval_every)")
    lines.append(
        f"  plots        python -m microcoder_jax.plot --workdir {workdir}  (-> {os.path.join(workdir, 'plots')}/)"
    )
    if evaluate:
        lines.append(f"  evaluate     {evaluate}")
    if os.path.isdir(os.path.join(workdir, "tensorboard")):
        lines.append(
            f"  tensorboard  pip install tensorboard && tensorboard --logdir {os.path.join(workdir, 'tensorboard')}"
        )
    return lines
