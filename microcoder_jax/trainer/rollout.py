"""The rollout: sample G responses per prompt, judge this host's rows, gather, assemble a `Rollout`.

`Rollout` (rl/batch.py) is the one contract between the rollout worker, the judge and the learner:
built once, with the rewards in, from the sampler's output (its per-row temperature and
log-probs included) and the verdicts. `start` samples and hands this host's rows to the judge
(with the paged engine, each group as soon as the sampler reports it finished, so judging
overlaps the tail of decoding); `finish` waits for the verdicts and all-gathers them, so every
host holds the same global rows. Between the two the caller may run device work (the learner's
old log-probs) while the pool judges; `collect` is both at once. `GroupJudge` and `finish` also
serve callers that drive the sampler themselves (step_batch.py: DAPO refills pushed into one
running paged session). Nothing here calls the learner.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import jax
import numpy as np

from microcoder_jax import sharding
from microcoder_jax.judge import VERDICTS
from microcoder_jax.rl.batch import SCORING_FIELDS, Rollout
from microcoder_jax.sampling.interface import make_sampler

__all__ = ["Rollout", "GroupJudge", "collect", "finish", "generate", "rows_of", "sampler_for", "sequences", "start"]


def sequences(sample) -> dict[str, np.ndarray]:
    """tokens, attention_mask and response_mask [N, P + max_new] from a SamplerOutput."""
    lengths = np.asarray(sample.lengths, np.int32)
    prompt_mask = np.asarray(sample.prompt_mask, np.int32)
    response = (np.arange(sample.tokens.shape[1])[None, :] < lengths[:, None]).astype(np.int32)
    return {
        "tokens": np.concatenate([np.asarray(sample.prompt_tokens, np.int32), np.asarray(sample.tokens, np.int32)], 1),
        "attention_mask": np.concatenate([prompt_mask, response], 1),
        "response_mask": np.concatenate([np.zeros_like(prompt_mask), response], 1),
    }


def sampler_logprobs(sample, response_mask) -> np.ndarray:
    """The sampler's log-probs [N, P + max_new] f32 in old_logprobs' layout (0 off the response)."""
    lp = np.asarray(sample.logprobs, np.float32)
    full = np.concatenate([np.zeros((lp.shape[0], response_mask.shape[1] - lp.shape[1]), np.float32), lp], 1)
    return np.where(response_mask > 0, full, np.float32(0))


def sampler_for(run, prompt_buckets=None):
    """The run's sampler (`sampling.engine`) on its model, stop ids, prompt buckets (`data.prompt_buckets`
    unless given: a multi-turn episode's later turns are wider) and mesh."""
    return make_sampler(
        run.sampling,
        run.model_config,
        stop_ids=run.stop_ids,
        pad_id=run.pad_id,
        prompt_buckets=run.data.prompt_buckets if prompt_buckets is None else prompt_buckets,
        mesh=run.mesh,
        sample_mesh=run.sample_mesh,
    )


def generate(
    run,
    params,
    prompts,
    *,
    num_samples: int,
    temperature: float,
    rng,
    sampler=None,
    max_new_tokens: Optional[int] = None,
    top_p: Optional[float] = None,
    top_k: Optional[int] = None,
    on_group_done=None,
    stats=None,
):
    """`sampler` (default: the run's, `sampler_for`) on these prompts, one temperature for all
    rows; the length cap, top-p and top-k are `sampling.*` unless given (evaluation gives its
    own). `on_group_done(first_prompt, SamplerOutput of whole groups)` is called as groups finish
    (see sampling/interface.py); `stats`: a dict the paged engine fills with its decode counts."""
    return (sampler or sampler_for(run)).generate(
        params,
        prompts,
        num_samples=num_samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        top_p=top_p,
        top_k=top_k,
        rng=rng,
        on_group_done=on_group_done,
        stats=stats,
    )


def add_decode(total: dict, stats: dict) -> None:
    """Sum a paged call's decode counts (PagedSession.stats) into `total` (the slot width is kept)."""
    for k, v in stats.items():
        total[k] = v if k == "slots" else total.get(k, 0) + v


def decode(run, tokens, lengths) -> list[str]:
    """The responses' text, special tokens dropped (the end-of-turn token is no code)."""
    return run.tokenizer.batch_decode([row[:n].tolist() for row, n in zip(tokens, lengths)], skip_special_tokens=True)


def verdict_arrays(turns) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(rewards, passed, no_code) arrays and verdict counts from the environment's Turns."""
    rewards = np.array([t.reward for t in turns], np.float32)
    passed = np.array([t.passed for t in turns], bool)
    no_code = np.array([t.no_code for t in turns], bool)
    counts: dict[str, int] = {}
    for t in turns:
        counts[t.verdict] = counts.get(t.verdict, 0) + 1
    return rewards, passed, no_code, counts


class GroupJudge:
    """Judges this host's rows of one generation batch (len(problems) prompts x G) as groups arrive.

    `add(first_prompt, sample)` decodes the rows of those prompts that fall in this host's share
    (`rows`, default `sharding.host_rows(n)`: a group split between two hosts is judged half on
    each) and hands them to the environment (`env`, default the run's: envs/), at once and without
    blocking; `results()` waits and returns the share's Turns in row order, as
    `sharding.allgather_rows` expects them, and `texts()` the decoded responses.
    """

    def __init__(self, run, pool, problems, group_size: int, rows: Optional[slice] = None, env=None):
        self.run, self.pool, self.problems, self.G = run, pool, list(problems), group_size
        self.env = env or run.env
        self.n = len(self.problems) * group_size
        self.rows = sharding.host_rows(self.n) if rows is None else rows
        self.parts: list[tuple[int, Any, list]] = []  # (first global row, pending turns, texts)
        self.groups_added = 0
        self.sampled_at: Optional[float] = None  # perf_counter when its last group was sampled

    def add(self, first_prompt: int, sample) -> None:
        lo = first_prompt * self.G
        hi = lo + len(sample.lengths)
        if hi > self.n or len(sample.lengths) % self.G:
            raise ValueError(f"rows {lo}..{hi} are not whole groups of a batch of {self.n} rows")
        self.groups_added += len(sample.lengths) // self.G
        a, b = max(lo, self.rows.start), min(hi, self.rows.stop)
        if a < b:
            texts = decode(self.run, sample.tokens[a - lo : b - lo], sample.lengths[a - lo : b - lo])
            pending = self.env.step(self.pool, [self.problems[r // self.G] for r in range(a, b)], texts)
            self.parts.append((a, pending, texts))

    @property
    def complete(self) -> bool:
        """Every group of the batch has been added."""
        return self.groups_added * self.G == self.n

    def known(self) -> tuple[np.ndarray, np.ndarray]:
        """(known, rewards) over this host's share, without blocking: rows whose verdicts are in."""
        size = self.rows.stop - self.rows.start
        known, rewards = np.zeros(size, bool), np.zeros(size, np.float32)
        for a, pending, texts in self.parts:
            if pending.done():
                i = a - self.rows.start
                rewards[i : i + len(texts)] = [t.reward for t in pending.result()]
                known[i : i + len(texts)] = True
        return known, rewards

    def texts(self) -> list[str]:
        """This host's rows' response texts, in row order (as `results`)."""
        return [t for part in sorted(self.parts, key=lambda part: part[0]) for t in part[2]]

    def results(self) -> list:
        """This host's Turns in row order (blocks until all are judged)."""
        turns, at = [], self.rows.start
        for a, pending, texts in sorted(self.parts, key=lambda part: part[0]):
            if a != at:
                raise RuntimeError(f"rows {at}..{a} of this host's share were never submitted")
            turns += pending.result()
            at = a + len(texts)
        if at != self.rows.stop:
            raise RuntimeError(f"rows {at}..{self.rows.stop} of this host's share were never submitted")
        return turns


def finish(run, judge: GroupJudge, sample, *, times: dict, seq: Optional[dict] = None) -> tuple[Rollout, dict]:
    """The rollout of a sampled batch whose rows `judge` holds: the verdicts waited for and
    all-gathered (`seq`: `sequences(sample)` when the caller has it). Returns (rollout, verdict
    counts over all hosts)."""
    n = len(sample.lengths)
    t0 = time.perf_counter()
    seq = sequences(sample) if seq is None else seq
    turns = judge.results()
    times["judge_wait"] += time.perf_counter() - t0
    times["judge"] += time.perf_counter() - (judge.sampled_at or t0)
    rewards, passed, no_code, counts = verdict_arrays(turns)
    rewards, passed, no_code = sharding.allgather_rows((rewards, passed, no_code), n)
    rollout = Rollout(
        **seq,
        response_lengths=np.asarray(sample.lengths, np.int32),
        truncated=np.asarray(sample.truncated, bool),
        temperature=np.asarray(sample.temperature, np.float32),
        sample_entropy=np.asarray(sample.entropy, np.float32),
        rewards=rewards,
        passed=passed,
        no_code=no_code,
        sampler_logprobs=sampler_logprobs(sample, seq["response_mask"]),
    )
    return rollout, sharding.allgather_counts(counts, VERDICTS)


def rows_of(sample, seq: Optional[dict] = None) -> dict[str, np.ndarray]:
    """What the learner needs to score a sampled batch before its verdicts are in
    (rl.batch.SCORING_FIELDS: tokens, attention_mask, response_mask [N, P + max_new], the per-row
    temperature [N]), as the Rollout will hold them (`seq`: `sequences(sample)` when the caller has it)."""
    fields = {**(sequences(sample) if seq is None else seq), "temperature": np.asarray(sample.temperature, np.float32)}
    return {name: fields[name] for name in SCORING_FIELDS}


def start(
    run,
    pool,
    params,
    problems,
    prompts,
    *,
    temperature: float,
    rng,
    times: dict,
    decode: Optional[dict] = None,
    sampler=None,
) -> tuple[GroupJudge, Any]:
    """Sample G responses per prompt and hand this host's rows to the judge; returns (the judge,
    the SamplerOutput) for `finish`, which waits for the verdicts. The sampler's own log-probs go
    in the Rollout (rl.corrections, and the learner's gap).

    Paged engine: each group goes to the judge when the sampler reports it finished, so judging
    overlaps the tail of decoding; the rows, rewards and their order are those of judging after.
    `times` accumulates sample / judge / judge_wait seconds (judge: from the end of
    sampling to the last verdict; judge_wait: the part `finish` spent blocked on the pool);
    `decode` the paged engine's decode counts (add_decode); `sampler`: the worker's (default the
    run's, `sampler_for`).
    """
    G = run.sampling.group_size
    judge = GroupJudge(run, pool, problems, G)
    t0, stats = time.perf_counter(), {}
    sample = generate(
        run,
        params,
        prompts,
        num_samples=G,
        temperature=temperature,
        rng=rng,
        sampler=sampler,
        on_group_done=judge.add,
        stats=stats,
    )
    judge.sampled_at = time.perf_counter()
    times["sample"] += judge.sampled_at - t0
    if decode is not None:
        add_decode(decode, stats)
    return judge, sample


def collect(run, pool, params, problems, prompts, **kwargs) -> tuple[Rollout, dict]:
    """`start` then `finish`: one judged Rollout for these prompts, and its verdict counts."""
    judge, sample = start(run, pool, params, problems, prompts, **kwargs)
    return finish(run, judge, sample, times=kwargs["times"])


def diversity(run, batch: Rollout) -> dict:
    """The temperature scheduler's diversity metrics of a batch's responses."""
    from microcoder_jax.sampling.diversity import diversity_metrics

    return diversity_metrics(
        batch.tokens[:, -run.sampling.max_new_tokens :],
        batch.response_lengths,
        run.sampling.group_size,
        entropy=batch.sample_entropy,
    )


def probe_temperature(run, scheduler, params, prompts, key, sampler=None):
    """The diversity policy's start-up probe on these prompts (with `sampler`, default the run's);
    returns the scheduler's Decision."""
    G = run.sampling.group_size

    def sample_fn(temperature):
        out = generate(
            run,
            params,
            prompts,
            num_samples=G,
            temperature=temperature,
            rng=jax.random.fold_in(key, int(temperature * 1000)),
            sampler=sampler,
        )
        return out.tokens, out.lengths, out.entropy

    return scheduler.probe(sample_fn, G)
