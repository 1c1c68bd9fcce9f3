"""One RL step's training batch: one judged generation batch, or DAPO's until enough groups differ.

`collect_step` is what the worker calls; it returns once the step's rows are sampled (the
verdicts may still be coming), so the learner can score them while the judge works. Under DAPO
on the static engine it collects generation batch after batch (batch k sampled with
`key_for(k)`); on a sampler with sessions (the paged engine) `RefillLoop` pushes generation
batches into a running session, judges each group as it finishes and pushes a refill as soon as
the groups in hand cannot fill the batch: the same batches in the same order as refilling after
each batch is judged, with the refill decoding beside the tail of the batch before it. A session
holds `SESSION_BATCHES` generation batches (one shape for every session, so no recompile); a
refill that does not fit waits for the next session. Row r of a session draws token t with
fold_in(fold_in(key, r), t), r counting on over its pushes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional

from microcoder_jax import sharding
from microcoder_jax.rl.dynamic_sampling import GroupBuffer, add_rollouts, refill_certain
from microcoder_jax.sampling.paged_sampler import PagedSession
from microcoder_jax.sampling.static_sampler import SamplerOutput, prompt_bucket
from microcoder_jax.rl.batch import Rollout
from microcoder_jax.trainer.rollout import GroupJudge, add_decode, collect, finish, rows_of, sequences, start

SESSION_BATCHES = 2  # generation batches a paged session has room for: one running, one refill
PARTIAL_BATCHES = 3  # partial rollouts: generation batches the session's ring holds (trainer/partial.py)


def session_prompts(num_prompts: int, rl_config, train) -> int:
    """Prompts a paged session has room for (the planner sizes its pool from this): one step's
    (DAPO: and a refill's), or partial rollouts' ring across steps (`train`: the TrainConfig)."""
    if train.partial_rollouts:
        return num_prompts * PARTIAL_BATCHES
    return num_prompts * (min(SESSION_BATCHES, 1 + train.max_refills) if rl_config.dynamic_sampling else 1)


@dataclasses.dataclass
class StepRollout:
    """The step's batch and what it took: verdict counts over every generation batch, DAPO stats,
    how many generation batches, the sampler/learner log-prob gap (the learner's, added when it
    trains on the batch), sessions opened (paged DAPO), the paged engine's decode counts (slot utilisation)."""

    batch: Rollout
    verdicts: dict
    ds_stats: dict
    generations: int
    gaps: list
    sessions: int = 0
    decode: dict = dataclasses.field(default_factory=dict)  # the paged engine's counts (+ partial rollouts')
    episodes: dict = dataclasses.field(default_factory=dict)  # multi-turn episodes' stats (trainer/episodes.py)

    def meta(self) -> dict:
        """Every field but the batch, as saved beside it (trainer/batch_files.py)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "batch"}

    @classmethod
    def from_meta(cls, batch: Rollout, meta: dict) -> "StepRollout":
        """`meta()`'s inverse (fields absent from an older file take their defaults)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"batch"}
        return cls(batch, **{k: v for k, v in meta.items() if k in names})


@dataclasses.dataclass
class PendingStep:
    """A step's batch once its rows are sampled: `rows` (rollout.rows_of: tokens, attention_mask,
    temperature) are final, so the learner may score them while the judge works; `wait()` gives
    the judged StepRollout. Under DAPO the rows are known only once the groups are chosen, after
    judging: `wait()` then returns at once."""

    rows: dict
    wait: Callable[[], StepRollout]


def collect_step(
    run,
    sampler,
    pool,
    params,
    next_prompts: Callable[[], tuple[list, list]],
    *,
    temperature: float,
    key_for: Callable[[int], object],
    times: dict,
    later_sampler=None,
) -> PendingStep:
    """The step's batch by `sampler` (the worker's: rollout.sampler_for); `next_prompts()` gives
    the next generation batch's (problems, prompts), `key_for(k)` the sampling key of generation
    batch k (see the module doc). Multi-turn episodes (env.max_turns > 1) sample turns after the
    first with `later_sampler` (episodes.turn_sampler) and are judged before the rows are known."""
    rl = run.rl_config
    if run.env.max_turns > 1:
        from microcoder_jax.trainer.episodes import collect_episodes

        def episodes(k, problems, prompts):
            return collect_episodes(
                run, sampler, later_sampler, pool, params, problems, prompts,
                temperature=temperature, rng=key_for(k), times=times,
            )  # fmt: skip

        if rl.dynamic_sampling:  # generation batch after batch, each a session of its own
            got = _dapo_batches(run, next_prompts, episodes)
        else:
            rollout, counts, stats = episodes(0, *next_prompts())
            got = StepRollout(rollout, counts, {}, 1, [], episodes=stats)
        return PendingStep(got.batch.scoring_rows(), lambda: got)
    if not rl.dynamic_sampling:  # one generation batch: returned as soon as it is sampled
        decode: dict = {}
        problems, prompts = next_prompts()
        judge, sample = start(
            run,
            pool,
            params,
            problems,
            prompts,
            temperature=temperature,
            rng=key_for(0),
            times=times,
            decode=decode,
            sampler=sampler,
        )

        seq = sequences(sample)  # once, for the learner's rows now and the Rollout after

        def wait() -> StepRollout:
            rollout, counts = finish(run, judge, sample, times=times, seq=seq)
            return StepRollout(rollout, counts, {}, 1, [], decode=decode)

        return PendingStep(rows_of(sample, seq), wait)
    if sampler.sessions:
        got = RefillLoop(run, pool, sampler, params, temperature, key_for, times).collect(next_prompts)
    else:
        decode: dict = {}

        def one_batch(k, problems, prompts):
            rollout, counts = collect(
                run, pool, params, problems, prompts,
                temperature=temperature, rng=key_for(k), times=times, decode=decode, sampler=sampler,
            )  # fmt: skip
            return rollout, counts, {}

        got = _dapo_batches(run, next_prompts, one_batch)
        got.decode = decode
    return PendingStep(got.batch.scoring_rows(), lambda: got)


def _dapo_batches(run, next_prompts, collect_batch) -> StepRollout:
    """DAPO one generation batch at a time: `collect_batch(k, problems, prompts)` samples and
    judges batch k (-> Rollout, verdict counts, episode stats), until the groups with a signal fill
    the step's batch (rl.dynamic_sampling). Multi-turn episodes' stats are over every episode of the
    step's generation batches (episodes.merge_stats)."""
    buffer, verdicts, generations, episodes = GroupBuffer(), {}, 0, []
    while True:
        problems, prompts = next_prompts()
        rollout, counts, stats = collect_batch(generations, problems, prompts)
        generations += 1
        _add_counts(verdicts, counts)
        if stats:
            episodes.append((stats, len(rollout.rewards)))
        buffer, full, ds_stats = add_rollouts(
            buffer,
            rollout.as_dict(),
            group_size=run.sampling.group_size,
            num_prompts=len(prompts),
            max_refills=run.train.max_refills,
        )
        if full is not None:
            from microcoder_jax.trainer.episodes import merge_stats

            return StepRollout(Rollout(**full), verdicts, ds_stats, generations, [], episodes=merge_stats(episodes))


def _add_counts(total: dict, counts: dict) -> None:
    for k, v in counts.items():
        total[k] = total.get(k, 0) + v


@dataclasses.dataclass
class _Batch:
    """A generation batch pushed into a session: its prompt indices there, its judge, and its
    rows on the host once every group is in (the session is then let go, so a drained one is freed)."""

    session: Optional[PagedSession]
    first: int
    judge: GroupJudge
    sample: Optional[SamplerOutput] = None


@dataclasses.dataclass
class RefillLoop:
    """DAPO on a session sampler: generation batches pushed into a running session, judged group by
    group, a refill pushed as soon as the groups in hand cannot fill the batch (see the module doc)."""

    run: Any
    pool: Any
    sampler: Any  # a sampler with sessions (sampling/interface.py)
    params: Any
    temperature: float
    key_for: Callable[[int], object]
    times: dict
    session: Optional[PagedSession] = None
    pending: list = dataclasses.field(default_factory=list)  # _Batch, oldest first
    buffer: GroupBuffer = dataclasses.field(default_factory=GroupBuffer)
    verdicts: dict = dataclasses.field(default_factory=dict)
    added: int = 0  # generation batches judged and added
    pushed: int = 0  # generation batches pushed
    sessions: int = 0  # sessions opened
    early: int = 0  # refills pushed before the batches before them were added
    decode: dict = dataclasses.field(default_factory=dict)  # decode counts of the sessions closed

    def run_session(self, steps: Optional[int]) -> None:
        """Decode `steps` steps (None: to the end), handing each finished group to its batch's judge."""
        session = self.session
        assert session is not None  # push opened it
        t0 = time.perf_counter()
        finished = session.run(steps)
        self.times["sample"] += time.perf_counter() - t0
        for index in finished:
            batch = [b for b in self.pending if b.session is session and b.first <= index][-1]
            batch.judge.add(index - batch.first, session.output([index]))
            if batch.judge.complete:
                batch.judge.sampled_at = time.perf_counter()
                batch.sample = session.output(range(batch.first, batch.first + len(batch.judge.problems)))
                batch.session = None

    def push(self, problems, prompts) -> None:
        """Queue a generation batch: into the running session, or a new one of the same shape once
        the running one has drained (full, or too narrow a prompt bucket)."""
        run, s = self.run, self.run.sampling
        width = prompt_bucket(max(len(p) for p in prompts), run.data.prompt_buckets)
        session = self.session
        if (
            session is None
            or width > session.shape.prompt_width
            or (session.num_prompts + len(prompts) > session.shape.max_prompts)
        ):
            while session is not None and not session.done:  # drain it: one session decodes at a time
                self.run_session(None)
            if session is not None:
                session.close()
                add_decode(self.decode, session.stats())
            self.session = None  # freed before the next one is made
            room = session_prompts(len(prompts), run.rl_config, run.train)  # one shape for every session: no recompile
            self.session = session = self.sampler.open_session(
                self.params,
                max_prompts=room,
                prompt_width=width,
                rng=self.key_for(self.pushed),
                rows=run.data.num_prompts * s.group_size,
            )
            self.sessions += 1
        t0 = time.perf_counter()
        first = session.push(prompts, temperature=self.temperature, top_p=s.top_p, top_k=s.top_k).start
        self.times["sample"] += time.perf_counter() - t0
        self.early += bool(self.pending)
        self.pending.append(_Batch(session, first, GroupJudge(run, self.pool, problems, s.group_size)))
        self.pushed += 1

    def collect(self, next_prompts: Callable[[], tuple[list, list]]) -> StepRollout:
        run, G = self.run, self.run.sampling.group_size
        total, every = 1 + run.train.max_refills, self.sampler.report_every(run.sampling.max_new_tokens)
        self.push(*next_prompts())
        while True:
            # every host decides on the same all-gathered verdicts, so all push and finish in lockstep
            known = [sharding.allgather_rows(b.judge.known(), b.judge.n) for b in self.pending]
            if self.pushed < total and refill_certain(
                self.buffer, known, group_size=G, num_prompts=run.data.num_prompts
            ):
                self.push(*next_prompts())
                continue
            session = self.session
            assert session is not None  # the first push (above) opened one
            while self.pending and self.pending[0].judge.complete and (session.done or known[0][0].all()):
                batch = self.pending.pop(0)
                known.pop(0)
                rollout, counts = finish(run, batch.judge, batch.sample, times=self.times)
                _add_counts(self.verdicts, counts)
                self.added += 1
                self.buffer, full, ds_stats = add_rollouts(
                    self.buffer,
                    rollout.as_dict(),
                    group_size=G,
                    num_prompts=run.data.num_prompts,
                    max_refills=run.train.max_refills,
                )
                if full is not None:
                    if self.pending or not session.done:
                        raise RuntimeError("dynamic sampling filled a batch with refills still queued (a bug)")
                    session.close()
                    add_decode(self.decode, session.stats())
                    ds_stats = {**ds_stats, "ds_early_refills": self.early, "ds_sessions": self.sessions}
                    return StepRollout(
                        Rollout(**full), self.verdicts, ds_stats, self.added, [], self.sessions, self.decode
                    )
            if not session.done:
                self.run_session(every)
            elif not self.pending and self.pushed >= total:  # add_rollouts fills the last one: never here
                raise RuntimeError("dynamic sampling: every generation batch was added without a full batch")
