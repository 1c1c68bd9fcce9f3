"""Replay a rollout batch: `python -m microcoder_jax.replay --workdir DIR --step N`.

When a step misbehaves (a loss spike, a KL jump) it can be re-run. With `train.save_rollouts`
(steps) or `train.save_rollouts_every` (every N-th step) the loop saves, for step N (the `step`
of metrics.jsonl), the train state it started from (`DIR/rollouts/states/`, a checkpoint of
step N-1, written before the step donates it) and, after the step, its Rollout (tokens, masks,
rewards, passed / no_code / truncated, temperatures, sampler entropy, old log-probs of the
sampling policy, reference log-probs under KL) as `rollouts/step_N.npz` beside
`rollouts/step_N.json` (the policy's step, temperature, verdict counts, DAPO stats, phase
times, the sampler log-prob gaps and the logged row). A step whose loss is not finite is saved
too, before the run stops.

`replay` restores that state and runs the loop's learner (trainer/learner.py: packing, the
jitted train step, the metrics row) on the saved batch. On the same devices and config it equals
the logged row bitwise, except the keys that depend on time (`time_*`, `throughput/*`, `share/*`,
`cost/*`: sampling and judging are not re-run, their saved seconds are used). The command
prints the row as one JSON line and which keys differ; exit status 0 when none does, 1
otherwise. A step in which no group's rewards differ (all 0, say) has zero advantages: the
command says so, and names saved steps with signal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import jax
import numpy as np

from microcoder_jax.trainer import batch_files

ROLLOUTS_DIR = "rollouts"
TIMED_PREFIXES = ("time_", "throughput/", "share/", "cost/")


def is_timed(key: str) -> bool:
    """Whether a row key depends on wall-clock time (never compared by a replay)."""
    return key.startswith(TIMED_PREFIXES)


def _base(workdir: str, step: int) -> str:
    """Saved step `step`'s files without their suffix (trainer/batch_files.py: .npz and .json)."""
    return os.path.join(workdir, ROLLOUTS_DIR, f"step_{step:06d}")


def saved_steps(workdir: str) -> list[int]:
    folder = os.path.join(workdir, ROLLOUTS_DIR)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(int(n[5:-4]) for n in names if n.startswith("step_") and n.endswith(".npz"))


class RolloutSaver:
    """The loop's side: which steps to save, and saving them (every process calls each method;
    the state save and the gather of device arrays are collective, process 0 writes the files)."""

    def __init__(self, run, workdir: str, meta: dict | None = None):
        self.meta = meta or {}  # every state's checkpoint meta (setup.base_meta: the LoRA base's fingerprint)
        self.steps = set(run.train.save_rollouts)
        self.every = run.train.save_rollouts_every
        self.dir = os.path.join(workdir, ROLLOUTS_DIR)
        self._ckpt = None

    def wants(self, step: int) -> bool:
        return step in self.steps or bool(self.every and step % self.every == 0)

    def _states(self):
        if self._ckpt is None:
            from microcoder_jax.models.checkpoint import Checkpointer

            self._ckpt = Checkpointer(os.path.join(self.dir, "states"), keep=1 << 30, async_save=False)
        return self._ckpt

    def save_state(self, step: int, state) -> None:
        """Before step `step`: the state it starts from, as a checkpoint of step - 1."""
        if self.wants(step):
            from microcoder_jax.trainer.setup import saved_part

            self._states().save(step - 1, saved_part(state), {"step": step - 1, **self.meta})

    def save_rollout(self, step: int, got, times: dict, temperature: float, staleness: int = 0) -> None:
        """After the train step (before its loss is checked): the batch as trained (old log-probs
        in) and what the row needs; `staleness`: updates between its sampling and training policies."""
        if not self.wants(step):
            return
        arrays = batch_files.host_arrays(got.batch)
        if jax.process_index() == 0:
            os.makedirs(self.dir, exist_ok=True)
            meta = {
                **got.meta(),
                "step": step,
                "policy_step": step - 1,
                "staleness": staleness,
                "temperature": temperature,
                "times": dict(times),
                "devices": jax.device_count(),
            }
            batch_files.write(_base(os.path.dirname(self.dir), step), arrays, meta)

    def save_record(self, step: int, record: dict, next_temperature: float) -> None:
        """After the row is made: the logged row, to compare a replay with."""
        if self.wants(step) and jax.process_index() == 0:
            from microcoder_jax.trainer.metrics import plain_row

            base = _base(os.path.dirname(self.dir), step)
            meta = batch_files.read_meta(base)
            batch_files.write_meta(
                base, {**meta, "next_temperature": next_temperature, "record": plain_row(step, record)}
            )

    def close(self) -> None:
        if self._ckpt is not None:
            self._ckpt.close()


def saved_config(workdir: str):
    """The run's config (its config.json, with today's defaults for keys added since)."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.trainer.resume import CONFIG_FILE, flatten

    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.isdir(workdir):
        raise config_lib.ConfigError(f"--workdir={workdir}: no such folder; pass a training run's --workdir")
    if not os.path.exists(path):
        raise config_lib.ConfigError(f"--workdir={workdir}: no {CONFIG_FILE}; is it a training run?")
    with open(path) as f:
        flat = flatten(json.load(f))
    config = config_lib.default_config()
    known = set(config_lib.flat_keys(config))
    for key, value in flat.items():
        key = config_lib.moved_keys().get(key, key)  # a run saved before the key moved blocks
        if key in known:
            group, name = key.rsplit(".", 1) if "." in key else ("", key)
            node = config_lib.get(config, group) if group else config
            node[name] = tuple(value) if isinstance(value, list) else value
    return config


def groups_with_signal(workdir: str, step: int, group_size: int) -> tuple[int, int, list]:
    """(groups whose judged rewards differ, groups, the distinct rewards) of a saved step. With no
    such group every advantage is 0 (no policy gradient), so a replay that equals the logged row says
    little about the loss and its gradients."""
    with np.load(_base(workdir, step) + ".npz") as data:
        rewards = np.asarray(data["rewards"], np.float64).reshape(-1, group_size)  # row = prompt * G + sample
    judged = [g[~np.isnan(g)] for g in rewards]  # a judge_error has no reward
    informative = sum(len(g) > 1 and g.max() > g.min() for g in judged)
    distinct = sorted({float(v) for g in judged for v in g})
    return informative, len(rewards), distinct


def _has_signal(workdir: str, step: int, group_size: int) -> bool:
    try:
        return groups_with_signal(workdir, step, group_size)[0] > 0
    except (ValueError, OSError, KeyError):  # not whole groups, or an unreadable file: not offered
        return False


def _signal_note(workdir: str, step: int) -> str | None:
    """A warning line when the replayed step has no reward spread in any group, naming saved steps that do."""
    group_size = saved_config(workdir).sampling.group_size
    try:
        informative, groups, distinct = groups_with_signal(workdir, step, group_size)
    except ValueError:  # rows that are not whole groups: nothing to say
        return None
    if informative:
        return None
    others = [s for s in saved_steps(workdir) if s != step and _has_signal(workdir, s, group_size)]
    rewards = "all " + ", ".join(f"{v:g}" for v in distinct) if len(distinct) == 1 else "equal within each group"
    hint = (
        f"saved steps with signal: {', '.join(map(str, others))}"
        if others
        else "save a step whose metrics row has frac_groups_all_equal < 1 (train.save_rollouts)"
    )
    return (
        f"note: step {step} has no learning signal (no group's rewards differ: {rewards}): every "
        f"advantage is 0, so the policy-gradient term is 0 and the update is the optimizer's momentum, "
        f"weight decay and any KL term; the comparison checks little of the loss and its gradients; {hint}"
    )


def replay(workdir: str, step: int, *, log_fn=print) -> tuple[dict, dict]:
    """Re-run step `step` of the run in `workdir`; returns (row, {key: (logged, replayed)} of the
    keys that differ, time-dependent ones left out)."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.models.checkpoint import Checkpointer
    from microcoder_jax.config import validate
    from microcoder_jax.trainer import compile_cache
    from microcoder_jax.trainer.learner import Learner
    from microcoder_jax.trainer.metrics import plain_row, step_row
    from microcoder_jax.trainer.rollout import diversity
    from microcoder_jax.trainer.setup import abstract_train_state, frozen_base, setup, with_base
    from microcoder_jax.trainer.step_batch import StepRollout

    workdir = os.path.abspath(workdir)
    config = saved_config(workdir)  # first: a folder that is no training run is named as such
    base = _base(workdir, step)
    if not os.path.exists(base + ".npz") or not os.path.exists(base + ".json"):
        saved = ", ".join(map(str, saved_steps(workdir)))
        raise config_lib.ConfigError(
            f"--step={step}: no saved rollout in {os.path.join(workdir, ROLLOUTS_DIR)} "
            + (f"(saved steps: {saved}); replay one of those, or " if saved else "(none saved); ")
            + "set train.save_rollouts or train.save_rollouts_every and run the steps again"
        )
    meta = batch_files.read_meta(base)
    typed = validate(config)
    compile_cache.enable(typed["train"].compile_cache, workdir)
    run = setup(config, workdir, typed)
    states = Checkpointer(os.path.join(workdir, ROLLOUTS_DIR, "states"), async_save=False)
    try:
        if step - 1 not in states.all_steps():
            kept = ", ".join(str(s + 1) for s in sorted(states.all_steps())) or "none"
            raise config_lib.ConfigError(
                f"--step={step}: the state it starts from (after step {step - 1}) is missing in "
                f"{states.directory}; steps with their state saved: {kept}"
            )
        state, saved_meta, _ = states.restore(abstract_train_state(run), step - 1)
        where = f"the saved state of step {step}"
        state = state._replace(params=with_base(run, state.params, frozen_base(run, log_fn), saved_meta, where))
    finally:
        states.close()
    batch, _ = batch_files.read(base)
    got = StepRollout.from_meta(batch, meta)
    log_fn(f"replaying step {step} from the state of step {meta['policy_step']} ({len(batch.rewards)} rows)")
    batch, metrics, train_s, _ = Learner(run, state, None).train(batch)  # as the loop trains it
    times = {**meta["times"], "train": train_s}
    logged = meta.get("record")  # absent when the step's loss was not finite
    step_s = (logged or {}).get("time_step_s", sum(meta["times"].values()))
    record = step_row(
        run,
        metrics,
        dataclasses.replace(got, batch=batch),
        diversity(run, batch),
        temperature=meta["temperature"],
        next_temperature=meta.get("next_temperature", meta["temperature"]),
        times=times,
        t_step=time.perf_counter() - (step_s - meta["times"]["train"] + train_s),
        judge_tests=(logged or {}).get("judge_tests"),
        staleness=meta.get("staleness", 0),
    )
    row = plain_row(step, record)
    diffs = {}
    if logged is not None:
        for key in sorted(set(row) | set(logged)):
            if not is_timed(key) and row.get(key, "<absent>") != logged.get(key, "<absent>"):
                diffs[key] = (logged.get(key, "<absent>"), row.get(key, "<absent>"))
    return row, diffs


def main(argv=None) -> int:
    from microcoder_jax import cli
    from microcoder_jax.sharding import describe_host_without_tpu

    describe_host_without_tpu()  # before any backend loads libtpu: no metadata-server noise off a TPU VM
    parser = argparse.ArgumentParser(
        prog="python -m microcoder_jax.replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workdir", required=True, help="the training run's directory")
    parser.add_argument("--step", type=int, required=True, help="the step to replay (as in metrics.jsonl)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        row, diffs = replay(args.workdir, args.step, log_fn=lambda m: print(m, file=sys.stderr))
        print(json.dumps(row))
        compared = len([k for k in row if not is_timed(k)])
        note = _signal_note(args.workdir, args.step)
        if note:
            print(note, file=sys.stderr)
        if not diffs:
            print(
                f"step {args.step}: the replay equals the logged row on all {compared} keys that do not depend on time",
                file=sys.stderr,
            )
            return 0
        for key, (before, after) in diffs.items():
            print(f"  {key}: logged {before!r}, replayed {after!r}", file=sys.stderr)
        print(f"step {args.step}: {len(diffs)} of {compared} keys differ from the logged row", file=sys.stderr)
        return 1

    return cli.main_guard(body)
