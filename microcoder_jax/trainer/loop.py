"""`python -m microcoder_jax.train [--config=configs/FILE.py[:ARG]] [--config.KEY=VALUE ...] [--workdir=DIR]`

The RL loop: a short orchestration of two roles. The rollout worker (worker.py: sampler, judge
pool, prompt stream, temperature scheduler) produces each step's judged `Rollout` (step_batch.py,
rollout.py: sample, judge, gather; under DAPO, refill until enough groups differ); the learner
(learner.py: train state, old log-probs, packing) trains on it with the jitted GRPO step
(rl/step.py: every mini-batch update); then the metrics row (metrics.py), and checkpoints /
evaluation on their schedules. `train.off_policy_steps` = k (pipeline.py): 0 runs the two in turn
(the old log-probs overlap the judge); k >= 1 samples the next batches in a background thread
with weights at most k updates old while the learner trains. A run restarts from the newest
complete checkpoint in its workdir and continues exactly (params, optimizer, data position,
scheduler, keys, batches in flight).
Multi-host: every process takes the same global prompt batch; sharding.py holds every device and
process detail. Without --config it runs the demo (a tiny model learning a
synthetic task on a CPU in minutes). `--help` lists every config key with its default and meaning.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from typing import Any, Callable

import jax

from microcoder_jax import cli, sharding
from microcoder_jax.trainer import compile_cache, preemption, wandb_writer
from microcoder_jax.trainer import evaluation as eval_lib
from microcoder_jax import config as config_lib
from microcoder_jax.models.checkpoint import Checkpointer, CheckpointReadError, CheckpointWriteError
from microcoder_jax.config import validate
from microcoder_jax.data import loader
from microcoder_jax.trainer.learner import Learner
from microcoder_jax.trainer.metrics import (
    JudgeCounter,
    MetricsWriter,
    progress_postfix,
    run_summary,
    step_line,
    step_row,
)
from microcoder_jax.trainer.partial import load_carry, save_carry
from microcoder_jax.trainer.pipeline import Pipeline, inflight_dir, load_inflight, prune_inflight, save_inflight
from microcoder_jax.trainer.replay import RolloutSaver
from microcoder_jax.trainer.resume import record_config
from microcoder_jax.trainer.worker import RolloutWorker
from microcoder_jax.trainer.setup import key, saved_part, setup, start_state, state_layout

log = logging.getLogger("microcoder_jax.trainer.loop")


class NonFiniteLossError(RuntimeError):
    """`train.max_nonfinite_steps` consecutive steps skipped a non-finite update: the run stops;
    every checkpoint holds finite params (the step never applies a non-finite update)."""


def train(config, workdir: str, *, log_fn=print, on_step=None, preflight=None, eval_command=None, blocks=None):
    """Run (or resume) training to `config.train.steps`; returns the final TrainState.

    `config` is validated first (nothing is written before; `blocks`: what `config.validate`
    returned when the caller has validated it already). `preflight(config, log_fn)`, if
    given, runs next, before anything is written (the CLI's memory check, plan/host.py, which sits
    above the trainer). `on_step(step, record)`, if given, is called after each step with its
    metrics record. A finished run logs its summary (`metrics.run_summary`; `eval_command`:
    the eval command it shows).
    """
    blocks, run, workdir = _prepare(config, workdir, log_fn, preflight, blocks)
    loop = _open(config, blocks, run, workdir, log_fn)
    guard = preemption.Guard().install()  # SIGTERM/SIGINT: finish the step, checkpoint, exit
    try:
        for step in range(loop.start, run.train.steps):
            produced, record = _step(loop, step)
            done = step + 1
            if on_step is not None:
                on_step(done, record)
            _stop_on_nonfinite(loop, done)
            _evaluate_and_save(loop, done, produced, guard)
    finally:
        _close(loop, guard)
    if loop.primary:
        for line in run_summary(workdir, evaluate=eval_command, checkpoints=_kept_steps(loop.ckpt.directory)):
            log_fn(line)
    return loop.learner.state


@dataclasses.dataclass
class _Loop:
    """What the steps of one run share: the run, its two roles, and where the results go."""

    run: Any
    workdir: str
    primary: bool
    log_fn: Callable
    ckpt: Checkpointer
    meta: dict  # the checkpoint's own fields, saved again with every checkpoint
    start: int
    learner: Learner
    worker: RolloutWorker
    pipeline: Pipeline
    pool: JudgeCounter
    saver: RolloutSaver
    writer: MetricsWriter | None
    bar: Any  # tqdm
    line_mode: bool  # one plain line per train.log_every steps (a log file, not a terminal)
    nonfinite_streak: int = 0  # consecutive steps with a skipped non-finite update


def _prepare(config, workdir: str, log_fn, preflight, blocks=None):
    """Validate (unless `blocks` says it was), preflight, and set up the run (tokenizer, problems,
    model shape) before writing its config.json: a failed set-up leaves no half-made workdir.
    Returns (typed blocks, run, workdir)."""
    blocks = validate(config) if blocks is None else blocks
    if blocks["mesh"].rollout_devices and jax.process_count() > 1:
        raise config_lib.ConfigError(
            f"mesh.rollout_devices={blocks['mesh'].rollout_devices:g}: a rollout mesh of "
            f"its own runs in one process; this run has {jax.process_count()}. Use 0 "
            "for multi-host runs (both roles on every device)."
        )
    if preflight is not None:
        preflight(config, log_fn)
    workdir = os.path.abspath(workdir)
    compile_cache.enable(blocks["train"].compile_cache, workdir)  # before the first compile
    primary = jax.process_index() == 0
    # before anything is written: a resume with a changed config is checked against config.json,
    # and set-up (tokenizer, problems, model shape) must succeed before config.json is saved
    record_config(workdir, config_lib.to_dict(config), write=False, log_fn=lambda message: None)
    fresh = not os.path.exists(workdir)
    try:
        run = setup(config, workdir, blocks)
    except BaseException:
        if fresh and primary:  # a failed set-up leaves no half-made workdir behind
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    record_config(workdir, config_lib.to_dict(config), write=primary, log_fn=log_fn)
    return blocks, run, workdir


def _open(config, blocks, run, workdir: str, log_fn) -> _Loop:
    """Restore or start the state, open the writers, the judge pool and both roles, probe the
    temperature, take back what a checkpoint kept in flight, evaluate the start; the pipeline last."""
    from microcoder_jax.judge.config import open_pool
    from microcoder_jax.sampling.temperature import TemperatureScheduler
    from microcoder_jax.trainer.setup import problem_files

    rl, primary = blocks["rl"], jax.process_index() == 0
    ckpt = Checkpointer(
        os.path.join(workdir, "checkpoints"), keep=run.train.keep_checkpoints, async_save=run.train.async_checkpoint
    )
    scheduler = TemperatureScheduler(run.temperature)
    begin = start_state(run, ckpt, log_fn)
    state, start = begin.state, begin.step
    if not start:  # committed like a restored state: the same programs, so a restart hits the compile cache
        state = jax.device_put(state, jax.tree.map(lambda a: a.sharding, state_layout(run)))
    if begin.scheduler_state is not None:
        scheduler.load_state_dict(begin.scheduler_state)
    data = loader.prompt_iterator(len(run.prompt_set.problems), run.data.num_prompts, run.seed, begin.data_state)
    writer = _metrics_writer(config, run, workdir, start, rl) if primary else None
    pool = JudgeCounter(open_pool(run.judge, hide=problem_files(run)))  # counts tests run
    learner = Learner(run, state, begin.ref_params)
    worker = RolloutWorker(run, pool, scheduler, data, state.params, start)
    saver = RolloutSaver(run, workdir, begin.meta)  # train.save_rollouts: batches kept for replay.py
    bar, line_mode = _progress(run, start, primary)
    decision = worker.probe(log_fn)
    if decision is not None and writer is not None:
        writer.write_text(0, "temperature", json.dumps(decision.to_dict()))
    in_flight = load_inflight(workdir, start) if start else []
    if worker.partial is not None and start:  # partial rollouts: the judged groups the checkpoint kept
        worker.partial.restore(load_carry(inflight_dir(workdir, start)))
    sharding.assert_same_on_hosts(len(in_flight), f"batches in flight at checkpoint {start} (WORKDIR/inflight*)")
    if in_flight:
        log_fn(f"resuming with {len(in_flight)} batch(es) sampled before the checkpoint (train.off_policy_steps)")
    if run.train.eval_at_start and start == 0 and run.eval_problems:  # the starting policy, as a baseline
        eval_lib.evaluate_at_step(run, pool, learner.params, 0, writer, key(run.seed, 3, 0), log_fn)
    pipeline = Pipeline(
        worker,
        k=run.train.off_policy_steps,
        start=start,
        steps=run.train.steps,
        params=state.params,
        ready=tuple(in_flight),
        inline=jax.process_count() > 1,
    )
    _warn_about_staleness(rl, run.train, pipeline, log_fn)
    return _Loop(
        run=run,
        workdir=workdir,
        primary=primary,
        log_fn=log_fn,
        ckpt=ckpt,
        meta=begin.meta,
        start=start,
        learner=learner,
        worker=worker,
        pipeline=pipeline,
        pool=pool,
        saver=saver,
        writer=writer,
        bar=bar,
        line_mode=line_mode,
    )


def _metrics_writer(config, run, workdir: str, start: int, rl) -> MetricsWriter:
    """metrics.jsonl (+ TensorBoard, + W&B when configured); a resume appends after `start`."""
    wandb_run = wandb_writer.open_writer(
        config, workdir, resume=bool(start), extra_config={"rl_resolved": dataclasses.asdict(rl)}
    )
    return MetricsWriter(
        workdir, resume_step=start if start else None, tensorboard=run.train.tensorboard, extra=wandb_run
    )


def _progress(run, start: int, primary: bool):
    """The tqdm bar, and whether to log plain lines instead: a log file (not a terminal) gets one
    line per train.log_every steps, not tqdm's \r updates."""
    from tqdm import tqdm

    terminal = sys.stdout.isatty() and sys.stderr.isatty()
    line_mode = primary and run.train.log_every > 0 and not (run.train.progress and terminal)
    bar = tqdm(
        total=run.train.steps,
        initial=start,
        desc="train",
        disable=not (run.train.progress and primary) or line_mode,
        dynamic_ncols=True,
    )
    return bar, line_mode


def _warn_about_staleness(rl, train, pipeline: Pipeline, log_fn) -> None:
    if (train.off_policy_steps or train.partial_rollouts) and rl.is_correction == "none":
        log_fn(
            "warning: batches sampled by older weights (train.off_policy_steps / train.partial_rollouts) without "
            "rl.is_correction: one step stale, uncorrected runs collapsed on the truncation task "
            "(docs/experiments.md, staleness); rl.is_correction=auto picks tis"
        )
    if train.off_policy_steps and pipeline.inline:
        log_fn(
            f"train.off_policy_steps={train.off_policy_steps} on {jax.process_count()} processes: batches are made in "
            "the learner's thread (same batches as one process, no overlap; see trainer/pipeline.py)"
        )


def _step(loop: _Loop, step: int):
    """One RL step: the worker's batch (k = 0: sampled now with these params), the learner's update,
    the metrics row written and shown. Returns (the produced batch, its metrics record)."""
    run, learner, saver = loop.run, loop.learner, loop.saver
    t_step = time.perf_counter()
    sampled = loop.pipeline.get(step, learner.params, step)  # k = 0: returned once its rows are sampled
    scores = learner.score(sampled.rows)  # the old log-probs: on the device while the judge works
    produced = sampled.wait()
    times = {**produced.times, "rollout_wait": time.perf_counter() - t_step}
    saver.save_state(step + 1, learner.state)  # before the step donates it
    batch, step_metrics, times["train"], gap = learner.train(produced.batch, scores)
    got = dataclasses.replace(produced.got, batch=batch, gaps=produced.got.gaps + ([gap] if gap is not None else []))
    saver.save_rollout(step + 1, got, times, produced.temperature, step - produced.version)  # non-finite too
    # the step skipped its non-finite updates (params untouched); a streak of them stops the run
    loop.nonfinite_streak = loop.nonfinite_streak + 1 if int(step_metrics["nonfinite_skipped"]) else 0
    decision = produced.decision
    record = step_row(
        run,
        step_metrics,
        got,
        produced.div,
        temperature=produced.temperature,
        next_temperature=produced.next_temperature,
        times=times,
        t_step=t_step,
        judge_tests=produced.judge_tests,
        staleness=step - produced.version,
        weights_bytes=produced.weights_bytes,
    )
    done = step + 1
    if loop.writer is not None:
        record = loop.writer.write(done, record)
        if decision.changed:
            loop.writer.write_text(done, "temperature", json.dumps(decision.to_dict()))
    saver.save_record(done, record, produced.next_temperature)
    if decision.changed:
        loop.log_fn(f"temperature {decision.previous:g} -> {decision.temperature:g} at step {done}: {decision.reason}")
    loop.bar.update(1)
    loop.bar.set_postfix(progress_postfix(record))
    if loop.line_mode and (done % run.train.log_every == 0 or done == run.train.steps):
        loop.log_fn(step_line(done, run.train.steps, record))
    return produced, record


def _stop_on_nonfinite(loop: _Loop, done: int) -> None:
    limit = loop.run.train.max_nonfinite_steps
    if loop.nonfinite_streak >= limit:
        loop.ckpt.wait()  # let pending saves finish before naming the newest
        raise NonFiniteLossError(
            f"{loop.nonfinite_streak} consecutive steps (to step {done}) had non-finite updates, skipped "
            f"(train.max_nonfinite_steps={limit}); stopping. The newest "
            f"checkpoint (step {loop.ckpt.latest_step()}) holds finite params; lower rl.learning_rate or "
            f"check the data before resuming."
        )


def _evaluate_and_save(loop: _Loop, done: int, produced, guard) -> None:
    """After step `done`: evaluate and checkpoint on their schedules (or on a stop request, then
    stop), and hand the new params to the worker."""
    run, pipeline, ckpt = loop.run, loop.pipeline, loop.ckpt
    if run.train.eval_every and done % run.train.eval_every == 0 and run.eval_problems:
        pipeline.drain()  # the worker idle: the pool and the sampler are the evaluation's
        eval_lib.evaluate_at_step(
            run, loop.pool, loop.learner.params, done, loop.writer, key(run.seed, 3, done), loop.log_fn
        )
    stopping = guard.requested
    if stopping or done == run.train.steps or (run.train.checkpoint_every and done % run.train.checkpoint_every == 0):
        ahead = pipeline.drain()  # sampled, not yet trained on: saved with the state
        if ahead:
            save_inflight(loop.workdir, done, ahead)
        if loop.worker.partial is not None:
            save_carry(inflight_dir(loop.workdir, done), loop.worker.partial.carried())
        last = ahead[-1] if ahead else produced  # the worker's state after its newest batch
        ckpt.save(
            done,
            saved_part(loop.learner.state),
            {"step": done, "data": last.data_state, "scheduler": last.scheduler_state, **loop.meta},
        )
        prune_inflight(loop.workdir, set(ckpt.all_steps()) | {done})
    ckpt.poll()  # a failed background save stops the run here, in one line
    if stopping and done < run.train.steps:
        raise guard.stop(done, ckpt.directory)
    pipeline.publish(loop.learner.params, done)


def _close(loop: _Loop, guard) -> None:
    try:  # the guard stays up while closing: a second signal during the final save exits at once
        loop.pipeline.close()
        loop.bar.close()
        loop.ckpt.close()
        loop.saver.close()
        loop.pool.close()
        if loop.writer is not None:
            loop.writer.close()
    finally:
        guard.uninstall()


def _kept_steps(directory: str) -> list[int]:
    """The checkpoint steps in `directory`, oldest first."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(n) for n in names if n.isdigit())


def _evaluate_command(argv, workdir: str) -> str:
    """The eval command for this run: its own --config arguments and the workdir as the checkpoint."""
    import shlex

    args, take = [], False
    for a in argv:
        if take or a.startswith("--config"):
            args.append(a)
        take = a == "--config"
    return shlex.join(["python", "-m", "microcoder_jax.eval", *args, f"--checkpoint={workdir}"])


def _define_flags(fv) -> None:
    from absl import flags

    flags.DEFINE_string("workdir", None, "run directory (default: runs/<config name>)", flag_values=fv)


def main(argv=None, *, preflight=None) -> int:
    """The CLI; `preflight(config, log_fn)`: run before anything is written (see `train`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax", "tensorboardX"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else list(argv)

    def body() -> int:
        args = cli.parse(
            argv,
            prog="python -m microcoder_jax.train",
            doc=__doc__,
            default_file=config_lib.DEFAULT_FILE,
            define_flags=_define_flags,
        )
        if args.args:
            raise config_lib.ConfigError(f"unexpected arguments {args.args}; see --help")
        config = args.config
        blocks = validate(config)  # every value, before anything is written (and once)
        d = config.distributed
        try:
            sharding.initialize_distributed(
                d.coordinator_address, d.num_processes, d.process_id, mode=d.initialize
            )  # before any other JAX call
        except ValueError as e:
            raise config_lib.ConfigError(str(e)) from None
        workdir = args.workdir or os.path.join("runs", cli.run_name(argv, "demo"))
        cmd = _evaluate_command(argv, workdir)  # shown in the run's summary
        try:
            # its Guard takes the signals over
            train(config, workdir, preflight=preflight, eval_command=cmd, blocks=blocks)
        except preemption.Preempted as e:
            print(e, file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:
            print("interrupted before the first RL step: nothing to save", file=sys.stderr)
            return 130
        except (NonFiniteLossError, CheckpointWriteError, CheckpointReadError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        finally:
            preemption.exit_at_once("{name} received while the run exits: exiting now")
        return 0  # the run's summary (it starts "done: WORKDIR") was printed by train

    previous = preemption.exit_at_once()  # set-up: a signal exits at once, in one line (preemption.py)
    try:
        return cli.main_guard(body)
    finally:
        preemption.restore(previous)
