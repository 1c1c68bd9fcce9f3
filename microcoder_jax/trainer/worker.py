"""The rollout worker: owns the sampler, the judge pool, the prompt stream, the temperature
scheduler and the weights it samples with; `begin(step)` returns that step's batch as soon as its
rows are sampled (`Sampled`: the learner may score them while the judge works) and its `wait()`
the judged batch (`Produced`); `produce(step)` is both. The worker never calls the learner: what
it makes flows one way, through the loop (trainer/loop.py), into the learner.

A batch is stamped with the policy version (learner updates) of the weights that sampled it;
`update_weights(params, version)` hands it newer ones. Batch t samples with key
`setup.key(seed, 1, t)`, the next prompts of the stream and the scheduler's temperature, which
the worker then updates from the batch's diversity: the scheduler sees batches in the order they
are produced, and its decision applies to the next batch sampled. The worker's state after a
batch (data position, scheduler) travels with it, so the learner checkpoints the state that
matches what it has consumed (pipeline.py).

Under `mesh.rollout_devices` the worker samples on devices of its own (`Run.as_role("rollout")`:
its mesh, and its paged sampler's tensor-parallel decode mesh over them): `update_weights` puts
the learner's params onto the worker's shardings with `jax.device_put`, device to device and
leaf by leaf (its previous copy freed as each leaf lands), and logs the bytes and seconds of
that transfer with the batch (`weights_bytes`, `time_weights_s`).
Every process runs both roles; multi-host split runs are refused for now.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

import jax

from microcoder_jax import models, sharding
from microcoder_jax.models import lora
from microcoder_jax.rl.batch import Rollout
from microcoder_jax.trainer.rollout import sampler_for
from microcoder_jax.trainer.setup import key
from microcoder_jax.trainer.step_batch import PendingStep, StepRollout, collect_step


@dataclasses.dataclass
class Produced:
    """One step's batch and what the learner logs and checkpoints with it."""

    step: int  # the RL step it is for (0-based)
    version: int  # learner updates behind the weights that sampled it
    got: StepRollout
    temperature: float  # it was sampled at
    next_temperature: float  # the scheduler's after it
    decision: Any  # the scheduler's Decision from its diversity
    div: dict
    times: dict  # sample / judge / judge_wait seconds
    judge_tests: int  # tests its programs ran, all hosts
    data_state: dict  # the prompt stream after it
    scheduler_state: dict  # the scheduler after it
    weights_bytes: int = 0  # moved learner -> worker for it (mesh.rollout_devices; 0: one mesh)

    @property
    def batch(self) -> Rollout:
        return self.got.batch

    def meta(self) -> dict:
        """Every field as plain data, the batch's arrays left out (saved beside them, batch_files.py)."""
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("got", "decision")}
        return {**plain, **self.got.meta(), "decision": self.decision.to_dict()}

    @classmethod
    def from_meta(cls, batch: Rollout, meta: dict) -> "Produced":
        """`meta()`'s inverse."""
        from microcoder_jax.sampling.temperature import Decision

        names = {f.name for f in dataclasses.fields(cls)} - {"got", "decision"}
        plain = {k: v for k, v in meta.items() if k in names}
        return cls(got=StepRollout.from_meta(batch, meta), decision=Decision(**meta["decision"]), **plain)


@dataclasses.dataclass
class Sampled:
    """Step `step`'s batch once its rows are sampled by weights version `version`: `rows` (tokens,
    attention and response masks, temperature; trainer/rollout.rows_of) are final, `wait()` gives the judged
    `Produced` (at once when the batch was made ahead)."""

    step: int
    version: int
    rows: dict
    wait: Callable[[], Produced]

    @staticmethod
    def made(produced: Produced) -> "Sampled":
        """A batch already judged (made ahead, or restored from a checkpoint)."""
        return Sampled(produced.step, produced.version, produced.batch.scoring_rows(), lambda: produced)


class RolloutWorker:
    """Produces each step's batch (see the module doc). `data`: loader.prompt_iterator; `pool`:
    a JudgeCounter; `params` / `version`: the weights it starts sampling with."""

    def __init__(self, run, pool, scheduler, data, params, version: int):
        self.run, self.pool, self.scheduler, self.data = run.as_role("rollout"), pool, scheduler, data
        self.shardings = None
        if run.split:  # the stored params' layout on the worker's own devices
            mc = run.model_config
            self.shardings = sharding.logical_to_sharding(
                models.param_logical_axes(mc), self.run.mesh, models.param_shapes(mc)
            )
        self.moved_bytes, self.moved_s, self.params = 0, 0.0, None
        self.sampler = sampler_for(self.run)  # built once: sampling.engine on the worker's mesh
        self.later_sampler = None  # multi-turn episodes on the static engine: later turns' (wider prompts)
        if run.env.max_turns > 1 and not self.sampler.sessions:  # the paged engine keeps one session
            from microcoder_jax.trainer.episodes import turn_sampler

            self.later_sampler = turn_sampler(self.run)
        self.partial = None  # train.partial_rollouts: the session kept across steps (trainer/partial.py)
        if run.train.partial_rollouts:
            from microcoder_jax.trainer.partial import PartialRollouts

            self.partial = PartialRollouts(self.run, pool, self.sampler)
        self.update_weights(params, version)

    def update_weights(self, params, version: int) -> None:
        """Sample from now on with `params`, the policy after `version` learner updates (moved onto
        the worker's devices under mesh.rollout_devices)."""
        if self.shardings is not None:
            params, self.moved_bytes, self.moved_s = transfer(params, self.shardings, self.params)
        self.params, self.version = params, version

    def next_prompts(self) -> tuple[list, list]:
        """The next generation batch: (problems, prompts)."""
        indices = next(self.data)
        ps = self.run.prompt_set
        return [ps.problems[i] for i in indices], [ps.prompts[i] for i in indices]

    def probe(self, log_fn=print):
        """The diversity policy's start-up probe (once per run) on the first prompts; its Decision or None."""
        from microcoder_jax.data import loader
        from microcoder_jax.trainer.rollout import probe_temperature

        run = self.run
        if not (run.temperature.policy == "diversity" and run.temperature.probe and not self.scheduler.probed):
            return None
        first = loader.prompt_iterator(
            len(run.prompt_set.problems), run.data.num_prompts, run.seed, self.data.get_state()
        )
        prompts = [run.prompt_set.prompts[i] for i in next(first)]
        decision = probe_temperature(run, self.scheduler, self.params, prompts, key(run.seed, 2), self.sampler)
        log_fn(f"temperature probe: {decision.temperature:g} ({decision.reason})")
        return decision

    def produce(self, step: int) -> Produced:
        """Step `step`'s judged batch at the current weights (`begin` and its `wait`)."""
        return self.begin(step).wait()

    def begin(self, step: int) -> Sampled:
        """Step `step`'s batch at the current weights, returned once its rows are sampled."""
        from microcoder_jax.trainer.rollout import diversity

        run = self.run
        times = {"sample": 0.0, "judge": 0.0, "judge_wait": 0.0}
        temperature = self.scheduler.temperature
        self.pool.take()  # tests an evaluation ran are not this batch's
        if self.partial is not None:  # rows of several versions, judged as their groups finish
            batch, verdicts, ds, decode = self.partial.collect(
                self.params,
                self.version,
                self.next_prompts,
                temperature=temperature,
                rng=key(run.seed, 1, step),
                times=times,
            )
            got = StepRollout(batch, verdicts, ds, 1, [], decode=decode)
            pending = PendingStep(batch.scoring_rows(), lambda: got)
        else:
            pending = collect_step(
                run,
                self.sampler,
                self.pool,
                self.params,
                self.next_prompts,
                temperature=temperature,
                key_for=functools.partial(key, run.seed, 1, step),
                times=times,
                later_sampler=self.later_sampler,
            )
        version = self.version

        def wait() -> Produced:
            got = pending.wait()
            tests = sharding.allgather_counts({"tests": self.pool.take()}, ("tests",)).get("tests", 0)
            div = diversity(run, got.batch)
            decision = self.scheduler.update(step, div)
            if self.shardings is not None:
                times["weights"] = self.moved_s
            return Produced(
                step,
                version,
                got,
                temperature,
                self.scheduler.temperature,
                decision,
                div,
                times,
                tests,
                self.data.get_state(),
                self.scheduler.state_dict(),
                self.moved_bytes,
            )

        return Sampled(step, version, pending.rows, wait)

    def settle(self) -> None:
        """Partial rollouts: finish every row in flight and close the session (before an
        evaluation or a checkpoint; see trainer/partial.py). Otherwise nothing is in flight."""
        if self.partial is not None:
            self.partial.settle()


def transfer(params, shardings, replaces=None) -> tuple[Any, int, float]:
    """`params` on `shardings` (another mesh's devices) by jax.device_put, device to device with no
    host copy, one leaf at a time: each leaf of `replaces` (the worker's previous copy) is freed as
    its successor lands, so the worker's devices never hold two full copies (one copy plus the
    largest leaf). Under LoRA only the adapters move once the worker has the frozen base (it never
    changes). Returns (the moved params, bytes moved, seconds until they are there)."""
    t0 = time.perf_counter()
    paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    targets = treedef.flatten_up_to(shardings)
    old = treedef.flatten_up_to(replaces) if replaces is not None else [None] * len(paths)
    adapters_only = replaces is not None and lora.has_adapters(params)
    moved, nbytes = [], 0
    for (path, leaf), target, previous in zip(paths, targets, old):
        if adapters_only and not lora.is_adapter(str(getattr(path[-1], "key", ""))):
            moved.append(previous)  # the frozen base: already on the worker's devices
            continue
        moved.append(jax.block_until_ready(jax.device_put(leaf, target)))
        nbytes += moved[-1].nbytes
        if isinstance(previous, jax.Array) and previous is not leaf and not previous.is_deleted():
            previous.delete()
    return treedef.unflatten(moved), nbytes, time.perf_counter() - t0
