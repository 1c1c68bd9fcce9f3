"""Length profiles for the planner's time (`--lengths`): the response and prompt lengths one step
meets, drawn for the step's rows.

- `cap`: every response runs to max_new and every prompt fills its bucket (the worst case; the
  default, because it is the one a memory plan must survive and the only one a user cannot get wrong);
- `paper`: responses lognormal with mean 70% of max_new and 10% at the cap (the paper's reported
  lengths, about 2,000-3,700 of 4K), prompts lognormal with mean 20% of the bucket (a few hundred
  tokens of 2048; competitive-programming statements);
- `lognormal:MEAN,AT_CAP`: responses lognormal with that mean (a fraction of max_new) and share at
  the cap; prompts as `paper`;
- `run:WORKDIR`: a run's own: the mean response length and truncation rate of its metrics.jsonl
  rows (a lognormal of that mean and share at the cap) and the mean prompt length (train tokens
  minus generated tokens, per row), from the last `RUN_ROWS` steps.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from microcoder_jax.plan.packing import lognormal_lengths

RUN_ROWS = 20  # metrics rows read from the end of a run
PROMPT_MEAN, PROMPT_AT_CAP = 0.2, 0.01  # prompts of `paper` / `lognormal:`, fractions of the bucket


class LengthsError(ValueError):
    """A --lengths value that does not parse, or a run directory without metrics."""


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str  # as given
    response_mean: float | None  # fraction of max_new; None = every response at the cap
    response_at_cap: float = 1.0
    prompt_mean: float | None = None  # fraction of the bucket; None = every prompt fills it
    prompt_at_cap: float = PROMPT_AT_CAP
    run: dict | None = None  # what was read from a run (workdir, rows, means, measured times)

    @property
    def is_cap(self) -> bool:
        return self.response_mean is None and self.prompt_mean is None

    def responses(self, n: int, cap: int, seed: int = 0) -> np.ndarray:
        if self.response_mean is None:
            return np.full(n, cap, np.int32)
        return lognormal_lengths(np.random.default_rng(seed), n, cap, self.response_mean, self.response_at_cap)

    def prompts(self, n: int, width: int, seed: int = 1) -> np.ndarray:
        if self.prompt_mean is None:
            return np.full(n, width, np.int32)
        return lognormal_lengths(np.random.default_rng(seed), n, width, self.prompt_mean, self.prompt_at_cap)

    def describe(self) -> str:
        if self.is_cap:
            return "cap (every response at max_new, every prompt fills its bucket: the worst case)"
        r = (
            f"responses lognormal, mean {self.response_mean:.0%} of max_new, {self.response_at_cap:.0%} at the cap"
            if self.response_mean is not None
            else "responses at the cap"
        )
        p = (
            f"prompts lognormal, mean {self.prompt_mean:.0%} of the bucket"
            if self.prompt_mean is not None
            else "prompts fill the bucket"
        )
        return f"{self.name}: {r}; {p}"


def parse(text: str | None, *, max_new: int | None = None) -> Profile:
    """`cap` | `paper` | `lognormal:MEAN,AT_CAP` | `run:WORKDIR` -> a Profile (LengthsError if not)."""
    text = (text or "cap").strip()
    if text == "cap":
        return Profile("cap", None, prompt_mean=None)
    if text == "paper":
        return Profile("paper", 0.7, 0.1, PROMPT_MEAN)
    kind, _, arg = text.partition(":")
    if kind == "lognormal":
        try:
            mean, at_cap = (float(x) for x in arg.split(","))
        except ValueError:
            raise LengthsError(f"--lengths={text}: give lognormal:MEAN,AT_CAP, e.g. lognormal:0.45,0.05") from None
        if not (0 < mean < 1 and 0 < at_cap < 1 and at_cap < mean):
            raise LengthsError(f"--lengths={text}: need 0 < AT_CAP < MEAN < 1 (fractions of max_new)")
        return Profile(text, mean, at_cap, PROMPT_MEAN)
    if kind == "run":
        return from_run(arg, max_new=max_new)
    raise LengthsError(f"--lengths={text}: use cap, paper, lognormal:MEAN,AT_CAP or run:WORKDIR")


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise LengthsError(f"--lengths=run:{workdir}: no metrics.jsonl there (a train run's --workdir)")
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a row cut by a crash
    rows = [r for r in rows if "response_length_mean" in r]
    if not rows:
        raise LengthsError(f"--lengths=run:{workdir}: metrics.jsonl has no step rows yet")
    return rows


def from_run(workdir: str, max_new: int | None = None, prompt_width: int | None = None) -> Profile:
    """The lengths of a run's last steps (see the module doc); the run's own config sets the caps."""
    rows = read_metrics(workdir)[-RUN_ROWS:]
    if max_new is None or prompt_width is None:
        cfg = os.path.join(workdir, "config.json")
        if os.path.isfile(cfg):
            with open(cfg) as f:
                c = json.load(f)
            max_new = max_new or c.get("sampling", {}).get("max_new_tokens")
            prompt_width = prompt_width or max(c.get("data", {}).get("prompt_buckets") or [0]) or None
    if not max_new:
        raise LengthsError(f"--lengths=run:{workdir}: no config.json there to read max_new_tokens from")
    mean_len = float(np.mean([r["response_length_mean"] for r in rows]))
    at_cap = float(np.mean([r.get("truncation_rate", 0.0) for r in rows]))
    prompt = [
        (r["train_tokens"] - r["gen_tokens"]) / r["rows"]
        for r in rows
        if r.get("train_tokens") and r.get("gen_tokens") is not None and r.get("rows")
    ]
    times = {
        k: float(np.mean([r[k] for r in rows if k in r]))
        for k in ("time_sample_s", "time_judge_s", "time_judge_wait_s", "time_train_s", "time_step_s")
        if any(k in r for r in rows)
    }
    run = dict(
        workdir=workdir,
        steps=len(rows),
        response_length_mean=mean_len,
        truncation_rate=at_cap,
        prompt_length_mean=float(np.mean(prompt)) if prompt else None,
        max_new=max_new,
        prompt_width=prompt_width,
        times=times,
        device=next((r["device_kind"] for r in rows if "device_kind" in r), None),
    )
    mean = min(max(mean_len / max_new, 0.01), 0.99)
    at_cap = min(max(at_cap, 0.001), mean * 0.9)
    pmean = None if not prompt or not prompt_width else min(max(float(np.mean(prompt)) / prompt_width, 0.01), 0.99)
    return Profile(f"run:{workdir}", mean, at_cap, pmean, min(PROMPT_AT_CAP, (pmean or 1) * 0.5), run=run)


def mean_of(profile: Profile, cap: int) -> float:
    """The profile's expected response length in tokens (for a quick look, not the simulation)."""
    return cap if profile.response_mean is None else profile.response_mean * cap
