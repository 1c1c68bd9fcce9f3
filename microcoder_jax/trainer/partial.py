"""Partial rollouts (`train.partial_rollouts`): the rollout worker's paged session outlives a step.

The worker keeps one session open and its slots full: it pushes the next generation batch
whenever fewer rows wait in the queue than there are slots (and the session's ring has room),
and judges each group as it finishes. A step's batch is the first `data.num_prompts` groups to
finish; the rows still decoding keep their slots and KV and, after the next weight update,
continue with the newer weights (every token records the version that drew it). A group with a
token more than `train.max_staleness` steps older than the weights at hand-off is dropped and
counted. The batch mixes policies, so the learner computes the old log-probs at train time and
`rl.is_correction` (auto: tis) weighs each token against the sampler's own log-prob. Under DAPO
(`rl.dynamic_sampling`) a group whose rewards are all equal is left out, up to `train.max_refills`
batches' worth of groups per step; after that the batch is topped up with groups as they come.

`settle()` (before an evaluation or a checkpoint) decodes every row to its end with no new
pushes and closes the session; its groups wait, judged, for the next batches and are saved
with a checkpoint (`save_carry` / `load_carry`), so a resume from a scheduled checkpoint trains
on exactly what the uninterrupted run trains on (a preemption's checkpoint settles early: the
same rows, other continuations).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Any, Callable, Optional

import jax
import numpy as np

from microcoder_jax.rl.batch import Rollout
from microcoder_jax.sampling.static_sampler import prompt_bucket
from microcoder_jax.trainer.rollout import GroupJudge, finish
from microcoder_jax.trainer.step_batch import session_prompts

CARRY = "carry"


def should_push(session, prompts: int) -> bool:
    """Push the next generation batch of `prompts` prompts: the ring has room for it and fewer
    rows wait in the queue than there are slots (so a refill never finds the queue empty)."""
    return session.room() >= prompts and session.queued() < session.full_shape.slots


@dataclasses.dataclass
class Group:
    """One finished prompt's G rows: judged (`rollout`) or still with the judge (`judge`)."""

    prompt: int  # the session's prompt index (order of pushes)
    versions: np.ndarray  # [G, max_new] the version that drew each token (0 after the end)
    lengths: np.ndarray  # [G]
    judge: Optional[GroupJudge] = None
    sample: Any = None
    rollout: Optional[Rollout] = None
    counts: dict = dataclasses.field(default_factory=dict)

    def oldest(self) -> int:
        """The version of its oldest token."""
        written = np.arange(self.versions.shape[1])[None, :] < self.lengths[:, None]
        return int(np.where(written, self.versions, np.iinfo(np.int32).max).min())

    def judged(self, run, times: dict) -> "Group":
        if self.rollout is None:
            assert self.judge is not None
            self.rollout, self.counts = finish(run, self.judge, self.sample, times=times)
            self.judge = self.sample = None
        return self


class PartialRollouts:
    """The worker's session across steps (see the module doc); `collect` makes one step's batch."""

    def __init__(self, run, pool, sampler):
        if jax.process_count() > 1:
            raise ValueError("train.partial_rollouts runs on one process for now; set train.partial_rollouts=False")
        self.run, self.pool, self.sampler = run, pool, sampler
        self.session = None
        self.problems: dict[int, Any] = {}  # prompt index -> problem, while in the session
        self.finished: list[Group] = []  # groups finished and not yet handed on, oldest first
        self.width = prompt_bucket(max(len(p) for p in run.prompt_set.prompts), run.data.prompt_buckets)

    def _open(self, params, version: int, rng) -> None:
        run = self.run
        n = run.data.num_prompts
        self.session = self.sampler.open_session(
            params,
            max_prompts=session_prompts(n, run.rl_config, run.train),  # the ring
            prompt_width=self.width,
            rng=rng,
            rows=n * run.sampling.group_size,
            version=version,
        )

    def _push(self, next_prompts, temperature: float) -> None:
        s = self.run.sampling
        problems, prompts = next_prompts()
        assert self.session is not None
        first = self.session.push(prompts, temperature=temperature, top_p=s.top_p, top_k=s.top_k).start
        self.problems.update({first + i: p for i, p in enumerate(problems)})

    def _harvest(self, finished: list[int]) -> None:
        """Hand finished prompts to the judge and give their positions back to the session."""
        session, G = self.session, self.run.sampling.group_size
        assert session is not None
        for p in sorted(finished):
            sample = session.output([p])
            judge = GroupJudge(self.run, self.pool, [self.problems.pop(p)], G)
            judge.add(0, sample)
            assert sample.versions is not None
            self.finished.append(Group(p, sample.versions, sample.lengths, judge=judge, sample=sample))
        session.retire(finished)

    def collect(
        self, params, version: int, next_prompts: Callable, *, temperature: float, rng, times: dict
    ) -> tuple[Rollout, dict, dict, dict]:
        """Step batch at weights `version`: (rollout, verdict counts, DAPO stats, partial stats)."""
        run, n = self.run, self.run.data.num_prompts
        if self.session is None:
            self._open(params, version, rng)
        assert self.session is not None
        session, before = self.session, self.session.stats()
        if session.version != version:
            session.set_params(params, version, recompute=run.train.partial_recompute)
        every = self.sampler.report_every(run.sampling.max_new_tokens)
        batch: list[Group] = []
        counts: dict = {}
        dropped = {"stale": 0, "same_reward": 0}
        while True:
            while self.finished and len(batch) < n:  # hand on in finishing order
                group = self.finished.pop(0)
                if version - group.oldest() > run.train.max_staleness:
                    dropped["stale"] += 1
                    continue
                group.judged(run, times)
                for k, v in group.counts.items():
                    counts[k] = counts.get(k, 0) + v
                assert group.rollout is not None
                rewards = np.asarray(group.rollout.rewards)
                budget = run.train.max_refills * n  # DAPO's refills, in groups: then top up as is
                if run.rl_config.dynamic_sampling and np.all(rewards == rewards[0]) and dropped["same_reward"] < budget:
                    dropped["same_reward"] += 1  # DAPO: no signal in this group
                    continue
                batch.append(group)
            if len(batch) == n:
                break
            while should_push(session, n):
                t0 = time.perf_counter()
                self._push(next_prompts, temperature)
                times["sample"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            self._harvest(session.run(every))
            times["sample"] += time.perf_counter() - t0
        after = session.stats()
        stats = _stats(batch, version, before, after, dropped, in_flight=len(self.problems))
        parts = [g.rollout.as_dict() for g in batch if g.rollout is not None]  # every one judged above
        rollout = Rollout(**{k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
        ds = {}
        if run.rl_config.dynamic_sampling:
            flat = sum(int(np.all(g.rollout.rewards == g.rollout.rewards[0])) for g in batch if g.rollout is not None)
            ds = {"ds_groups_filtered": dropped["same_reward"], "ds_topped_up": flat}
        return rollout, counts, ds, stats

    def settle(self, times: Optional[dict] = None) -> None:
        """Decode every row to its end (no new pushes), judge, and close the session."""
        times = {"sample": 0.0, "judge": 0.0, "judge_wait": 0.0} if times is None else times
        session = self.session
        if session is None:
            return
        while not session.done:
            self._harvest(session.run(None))
        session.close()
        self.session = None
        for group in self.finished:
            group.judged(self.run, times)

    def carried(self) -> list[Group]:
        """The groups waiting for the next batches (judged: call after `settle`)."""
        if self.session is not None:
            raise RuntimeError("carried() before settle(): rows are still decoding (a bug)")
        return self.finished

    def restore(self, groups: list[Group]) -> None:
        self.finished = list(groups)


def _stats(batch: list[Group], version: int, before: dict, after: dict, dropped: dict, in_flight: int) -> dict:
    """The step's partial-rollout metrics: slot utilisation of its decode, token ages, carries."""
    ages, carried = [], 0
    for g in batch:
        written = np.arange(g.versions.shape[1])[None, :] < g.lengths[:, None]
        age = version - g.versions[written]
        ages.append(age)
        carried += int(age.max(initial=0) > 0)
    age = np.concatenate(ages) if ages else np.zeros(0, np.int64)
    steps = after["steps"] - before["steps"]
    live = after["live_slot_steps"] - before["live_slot_steps"]
    return {
        "steps": steps,  # the engine's names (PagedSession.stats), as the per-step path logs them
        "live_slot_steps": live,
        "slots": after["slots"],
        "token_age_mean": float(age.mean()) if age.size else 0.0,
        "token_age_max": int(age.max(initial=0)),
        "stale_token_frac": float((age > 0).mean()) if age.size else 0.0,
        "groups_carried": carried,
        "groups_dropped_stale": dropped["stale"],
        "prompts_in_flight": in_flight,
        "recomputed_tokens": after["recomputed"] - before["recomputed"],  # train.partial_recompute's prefill
    }


def save_carry(folder: str, groups: list[Group]) -> None:
    """The judged groups waiting at a checkpoint, in its in-flight folder (pipeline.inflight_dir)."""
    tmp = os.path.join(folder + ".carry.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arrays: dict = {}
    for i, g in enumerate(groups):
        assert g.rollout is not None
        for k, v in g.rollout.as_dict().items():
            arrays[f"{i}.{k}"] = np.asarray(v)
        arrays[f"{i}.versions"], arrays[f"{i}.lengths"] = g.versions, g.lengths
    np.savez(os.path.join(tmp, f"{CARRY}.npz"), **arrays)  # pyright: ignore[reportArgumentType]
    with open(os.path.join(tmp, f"{CARRY}.json"), "w") as f:
        json.dump([{"prompt": g.prompt, "counts": g.counts} for g in groups], f)
    os.makedirs(folder, exist_ok=True)
    for name in (f"{CARRY}.npz", f"{CARRY}.json"):
        os.replace(os.path.join(tmp, name), os.path.join(folder, name))
    shutil.rmtree(tmp, ignore_errors=True)


def load_carry(folder: str) -> list[Group]:
    """The groups `save_carry` wrote into `folder` ([] when none)."""
    meta_path = os.path.join(folder, f"{CARRY}.json")
    if not os.path.exists(meta_path):
        return []
    with open(meta_path) as f:
        meta = json.load(f)
    groups = []
    with np.load(os.path.join(folder, f"{CARRY}.npz")) as data:
        for i, m in enumerate(meta):
            fields = {k.split(".", 1)[1]: data[k] for k in data.files if k.split(".", 1)[0] == str(i)}
            versions, lengths = fields.pop("versions"), fields.pop("lengths")
            groups.append(Group(m["prompt"], versions, lengths, rollout=Rollout(**fields), counts=m["counts"]))
    return groups
