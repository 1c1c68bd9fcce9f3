"""`python -m microcoder_jax.train [--config=configs/FILE.py[:ARG]] [--config.KEY=VALUE ...] [--workdir=DIR]`

The RL loop. Each step: take a batch of prompts, collect a judged `Rollout` at the scheduler's
temperature (step_batch.py, rollout.py: sample, judge this host's rows while the old log-probs
run on the device, gather; under DAPO, refill until enough groups differ), the jitted GRPO step
(rl/step.py: every mini-batch update), the scheduler update, the metrics row (metrics.py), and
checkpoints / evaluation on their schedules. A run restarts from the newest complete checkpoint in
its workdir and continues exactly (params, optimizer, data position, scheduler, keys).
Multi-host: every process takes the same global prompt batch; sharding.py holds every device and
process detail. Without --config it runs the demo (a tiny model learning a
synthetic task on a CPU in minutes). `--help` lists every config key with its default and meaning.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import sys
import time

import jax

from microcoder_jax import cli, sharding
from microcoder_jax.trainer import compile_cache, preemption, wandb_writer
from microcoder_jax import config as config_lib
from microcoder_jax.checkpoint import Checkpointer, CheckpointReadError, CheckpointWriteError
from microcoder_jax.config_check import validate
from microcoder_jax.data import loader
from microcoder_jax.rl import packing
from microcoder_jax.trainer.metrics import JudgeCounter, MetricsWriter, progress_postfix, step_record
from microcoder_jax.trainer.replay import RolloutSaver
from microcoder_jax.trainer.resume import record_config
from microcoder_jax.trainer.rollout import probe_temperature
from microcoder_jax.trainer.step_batch import collect_step
from microcoder_jax.trainer.setup import abstract_train_state, key, setup, start_state

log = logging.getLogger("microcoder_jax.trainer.loop")


class NonFiniteLossError(RuntimeError):
    """`train.max_nonfinite_steps` consecutive steps skipped a non-finite update: the run stops;
    every checkpoint holds finite params (the step never applies a non-finite update)."""


def train(config, workdir: str, *, log_fn=print, on_step=None):
    """Run (or resume) training to `config.train.steps`; returns the final TrainState.

    `config` is validated first (nothing is written before). `on_step(step, record)`, if given,
    is called after each step with its metrics record.
    """
    from tqdm import tqdm

    from microcoder_jax.trainer import evaluation as eval_lib
    from microcoder_jax.evaluator.config import open_pool
    from microcoder_jax.rl import step as rl_step
    from microcoder_jax.trainer.setup import problem_files
    from microcoder_jax.sampling.diversity import diversity_metrics
    from microcoder_jax.sampling.temperature import TemperatureScheduler

    train_config = validate(config)["train"]
    workdir = os.path.abspath(workdir)
    compile_cache.enable(train_config.compile_cache, workdir)  # before the first compile
    primary = jax.process_index() == 0
    # before anything is written: a resume with a changed config is checked against config.json,
    # and set-up (tokenizer, problems, model shape) must succeed before config.json is saved
    record_config(workdir, config_lib.to_dict(config), write=False, log_fn=lambda message: None)
    run = setup(config, workdir)
    record_config(workdir, config_lib.to_dict(config), write=primary, log_fn=log_fn)
    rl, G = run.rl_config, run.sampling.group_size
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=run.train.keep_checkpoints,
                        async_save=run.train.async_checkpoint)
    scheduler = TemperatureScheduler(run.temperature)
    begin = start_state(run, ckpt, log_fn)
    state, start = begin.state, begin.step
    if not start:  # committed like a restored state: the same programs, so a restart hits the compile cache
        state = jax.device_put(state, jax.tree.map(lambda a: a.sharding, abstract_train_state(run)))
    if begin.scheduler_state is not None:
        scheduler.load_state_dict(begin.scheduler_state)
    data = loader.prompt_iterator(len(run.prompt_set.problems), run.data.num_prompts, run.seed, begin.data_state)
    wandb_run = wandb_writer.open_writer(config, workdir, resume=bool(start),
                                         extra_config={"rl_resolved": dataclasses.asdict(rl)}) if primary else None
    writer = MetricsWriter(workdir, resume_step=start if start else None, tensorboard=True,
                           extra=wandb_run) if primary else None
    pool = JudgeCounter(open_pool(run.evaluator, hide=problem_files(run)))  # counts tests run
    train_step = rl_step.make_train_step(run.model_config, rl, run.mesh)
    saver = RolloutSaver(run, workdir)  # train.save_rollouts: batches kept for replay.py
    bar = tqdm(total=run.train.steps, initial=start, desc="train", disable=not (run.train.progress and primary),
               dynamic_ncols=True)
    if run.temperature.policy == "diversity" and run.temperature.probe and not scheduler.probed:
        first = loader.prompt_iterator(len(run.prompt_set.problems), run.data.num_prompts, run.seed, begin.data_state)
        decision = probe_temperature(run, scheduler, state.params,
                                     [run.prompt_set.prompts[i] for i in next(first)], key(run.seed, 2))
        log_fn(f"temperature probe: {decision.temperature:g} ({decision.reason})")
        if writer is not None:
            writer.write_text(0, "temperature", json.dumps(decision.to_dict()))

    def next_prompts():  # the next generation batch: (problems, prompts)
        indices = next(data)
        return [run.prompt_set.problems[i] for i in indices], [run.prompt_set.prompts[i] for i in indices]

    nonfinite_streak = 0  # consecutive steps with a skipped non-finite update
    guard = preemption.Guard().install()  # SIGTERM/SIGINT: finish the step, checkpoint, exit
    try:
        for step in range(start, run.train.steps):
            t_step, temperature = time.perf_counter(), scheduler.temperature
            times = {"sample": 0.0, "judge": 0.0, "judge_wait": 0.0}
            pool.take()  # tests an evaluation ran are not this step's
            got = collect_step(run, pool, state.params, begin.ref_params, next_prompts, temperature=temperature,
                               key_for=functools.partial(key, run.seed, 1, step), times=times)
            batch = got.batch
            saver.save_state(step + 1, state)  # before the step donates it
            t0 = time.perf_counter()
            step_in = batch
            if rl.packing:  # rl.packing: the step runs on each mini-batch's rows laid end to end
                step_in = {**batch.as_dict(), "packing": packing.for_step(batch.attention_mask, rl, run.mesh)}
            state, step_metrics = train_step(state, sharding.put_batch(step_in, run.mesh))
            step_metrics = jax.device_get(step_metrics)
            times["train"] = time.perf_counter() - t0
            saver.save_rollout(step + 1, got, times, temperature)  # a non-finite step too
            # the step skipped its non-finite updates (params untouched); a streak of them stops the run
            nonfinite_streak = nonfinite_streak + 1 if int(step_metrics["nonfinite_skipped"]) else 0
            div = diversity_metrics(batch.tokens[:, -run.sampling.max_new_tokens:], batch.response_lengths, G,
                                    entropy=batch.sample_entropy)
            decision = scheduler.update(step, div)
            record = step_record(step_metrics, batch, div, signal=run.temperature.signal,
                                 temperature=temperature, next_temperature=scheduler.temperature,
                                 times=times, verdicts=got.verdicts, ds_stats=got.ds_stats,
                                 generations=got.generations, t_step=t_step, group_size=G,
                                 devices=jax.device_count(), judge_tests=sharding.allgather_counts(
                                     {"tests": pool.take()}, ("tests",)).get("tests", 0))
            record["sampler_logprob_gap"] = sum(got.gaps) / len(got.gaps)
            done = step + 1
            if writer is not None:
                record = writer.write(done, record)
                if decision.changed:
                    writer.write_text(done, "temperature", json.dumps(decision.to_dict()))
            saver.save_record(done, record, scheduler.temperature)
            if decision.changed:
                log_fn(f"temperature {decision.previous:g} -> {decision.temperature:g} at step {done}: "
                       f"{decision.reason}")
            bar.update(1)
            bar.set_postfix(progress_postfix(record))
            if on_step is not None:
                on_step(done, record)
            if nonfinite_streak >= run.train.max_nonfinite_steps:
                ckpt.wait()  # let pending saves finish before naming the newest
                raise NonFiniteLossError(
                    f"{nonfinite_streak} consecutive steps (to step {done}) had non-finite updates, skipped "
                    f"(train.max_nonfinite_steps={run.train.max_nonfinite_steps}); stopping. The newest "
                    f"checkpoint (step {ckpt.latest_step()}) holds finite params; lower rl.learning_rate or "
                    f"check the data before resuming.")
            if run.train.eval_every and done % run.train.eval_every == 0 and run.eval_problems:
                eval_lib.evaluate_at_step(run, pool, state.params, done, writer, key(run.seed, 3, done), log_fn)
            stopping = guard.requested
            if stopping or done == run.train.steps or (run.train.checkpoint_every
                                                       and done % run.train.checkpoint_every == 0):
                ckpt.save(done, state, {"step": done, "data": data.get_state(),
                                        "scheduler": scheduler.state_dict()})
            ckpt.poll()  # a failed background save stops the run here, in one line
            if stopping and done < run.train.steps:
                raise guard.stop(done, ckpt.directory)
    finally:
        try:  # the guard stays up while closing: a second signal during the final save exits at once
            bar.close()
            ckpt.close()
            saver.close()
            pool.close()
            if writer is not None:
                writer.close()
        finally:
            guard.uninstall()
    return state


def _define_flags(fv) -> None:
    from absl import flags

    flags.DEFINE_string("workdir", None, "run directory (default: runs/<config name>)", flag_values=fv)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax", "tensorboardX"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else list(argv)

    def body() -> int:
        args = cli.parse(argv, prog="python -m microcoder_jax.train", doc=__doc__,
                         default_file=config_lib.DEFAULT_FILE, define_flags=_define_flags)
        if args.args:
            raise config_lib.ConfigError(f"unexpected arguments {args.args}; see --help")
        config = args.config
        validate(config)  # every value, before anything is written
        d = config.distributed
        try:
            sharding.initialize_distributed(d.coordinator_address, d.num_processes, d.process_id,
                                            mode=d.initialize)  # before any other JAX call
        except ValueError as e:
            raise config_lib.ConfigError(str(e)) from None
        workdir = args.workdir or os.path.join("runs", cli.run_name(argv, "demo"))
        try:
            train(config, workdir)
        except preemption.Preempted as e:
            print(e, file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:
            print("interrupted before the first RL step: nothing to save", file=sys.stderr)
            return 130
        except (NonFiniteLossError, CheckpointWriteError, CheckpointReadError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"done: {workdir}")
        return 0

    return cli.main_guard(body)
