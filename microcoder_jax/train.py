"""`python -m microcoder_jax.train --config configs/NAME.py [--config.KEY=VALUE ...] [--workdir DIR]`

The RL loop. Each step: take a batch of prompts, sample G responses each at the scheduler's
temperature, submit them to the evaluator pool and, while it judges, compute the old log-probs on
the device; then rewards, the jitted GRPO step (every mini-batch update), the scheduler update,
metrics, and checkpoints / evaluation on their schedules. A run restarts from the newest complete
checkpoint in its workdir and continues exactly (params, optimizer, data position, scheduler, keys).
Multi-host (`config.distributed`): every process takes the same global prompt batch and samples it on
the global mesh; each judges its own contiguous share of the rows and the verdicts are all-gathered;
the step gets global arrays; process 0 writes metrics; Orbax checkpoints from all processes.
Without --config it runs the demo (a tiny model learning a synthetic task on a CPU in minutes).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import config as config_lib
from microcoder_jax import models, preemption, sharding
from microcoder_jax.checkpoint import Checkpointer, CheckpointWriteError
from microcoder_jax.data import demo_task, loader
from microcoder_jax.data.tokenizer import load_tokenizer, pad_token_id, stop_token_ids
from microcoder_jax.metrics import MetricsWriter, progress_postfix
from microcoder_jax.resume import record_config

log = logging.getLogger("microcoder_jax.train")


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf: the run stops; the last good checkpoint stays the newest."""


@dataclasses.dataclass
class Run:
    """Everything a run builds once before its first step."""

    config: Any
    workdir: str
    model_config: models.Qwen3Config
    rl_config: Any
    tokenizer: Any
    prompt_set: loader.PromptSet
    eval_problems: list
    mesh: Any
    stop_ids: list[int]
    pad_id: int


# --------------------------------------------------------------------------------------- set-up


def initialize_distributed(config) -> None:
    """Join a multi-host run per `config.distributed` (call before any other JAX call; see config.py).

    `auto` initializes when coordinator / process keys are set, or lets JAX detect a cluster (TPU pod
    slices, SLURM, Open MPI, ...; no arguments needed there); it does nothing on a single process,
    on a CPU-only platform without a coordinator, or when JAX is already initialized.
    """
    d = config.distributed
    mode = str(d.initialize).lower()
    if mode not in ("auto", "always", "never"):
        raise config_lib.ConfigError(f"distributed.initialize must be auto, always or never, got {d.initialize!r}")
    if mode == "never" or jax.distributed.is_initialized():
        return
    explicit = (d.coordinator_address, d.num_processes, d.process_id) != (None, None, None)
    if explicit:
        sharding.initialize_distributed(d.coordinator_address, d.num_processes, d.process_id)
    elif mode == "always":
        jax.distributed.initialize()  # autodetect; errors if there is nothing to join
    elif str(jax.config.jax_platforms or "").strip().lower() != "cpu":
        sharding.initialize_distributed()  # autodetect; a no-op when nothing is found


def make_mesh(config):
    """The device mesh, or None when the run uses a single device (no sharding machinery)."""
    sizes = [config.mesh.data, config.mesh.fsdp, config.mesh.tensor]
    n = len(jax.devices())
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = max(n // known, 1)
    total = math.prod(sizes)
    if total == 1:
        return None
    return sharding.make_mesh(*sizes, devices=jax.devices()[:total])


def model_config_from(config, vocab_size: int | None) -> models.Qwen3Config:
    """The model shape: a HF checkpoint's config.json, or a preset, with the config's overrides."""
    m = config.model
    runtime = dict(dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat, attention=m.attention)
    shape = {k: m[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                               "num_heads", "num_kv_heads", "head_dim") if m[k] is not None}
    if m.path:
        return models.Qwen3Config.from_hf(m.path, **runtime, **shape)
    if vocab_size is not None and "vocab_size" not in shape:
        shape["vocab_size"] = vocab_size
    return models.get_preset(m.preset, **runtime, **shape)


def _demo_data(config, workdir):
    """The demo's problems and tokenizer (trained once, then reloaded from the workdir)."""
    d = config.demo
    problems = demo_task.make_problems(d.ops, d.problems_per_op, d.tests_per_problem, config.seed,
                                       d.phrasings)
    path = os.path.join(workdir, "tokenizer")
    exists = os.path.exists(os.path.join(path, "tokenizer.json"))
    if jax.process_count() > 1:  # every host looks before process 0 writes (shared or local disks)
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("microcoder_jax demo tokenizer")
    if exists:
        tokenizer = load_tokenizer(path)
    else:
        tokenizer = demo_task.build_tokenizer(problems, d.ops, config.data, d.vocab_size)
        if jax.process_index() == 0:
            tokenizer.save_pretrained(path)
    return problems, tokenizer


def problem_files(config, *extra) -> list[str]:
    """Absolute paths of the problem files (training, evaluation, `extra`): the judge hides them."""
    paths = []
    for files in (config.data.train_files, config.eval.files, *extra):
        if files:
            paths += [os.path.abspath(p) for p in loader.expand_paths(files)]
    return sorted(set(paths))


def setup(config, workdir: str) -> Run:
    """Tokenizer, problems and prompts, model shape, RL config and mesh."""
    os.makedirs(workdir, exist_ok=True)
    if config.data.task == "demo":
        problems, tokenizer = _demo_data(config, workdir)
        skipped, eval_problems = 0, problems
    elif config.data.task == "problems":
        tok_path = config.tokenizer.path or config.model.path
        if not tok_path:
            raise config_lib.ConfigError("set model.path (or tokenizer.path) to load a tokenizer")
        tokenizer = load_tokenizer(tok_path)
        if not config.data.train_files:
            raise config_lib.ConfigError("data.train_files is empty")
        problems, skipped = loader.read_problems(config.data.train_files)
        eval_problems = loader.read_problems(config.eval.files)[0] if config.eval.files else []
    else:
        raise config_lib.ConfigError(f"data.task must be 'problems' or 'demo', got {config.data.task!r}")
    prompt_set = loader.make_prompt_set(problems, tokenizer, config.data, skipped)
    log.info("training prompts: %s", prompt_set.report())
    vocab = None if config.model.path else len(tokenizer)
    model_config = model_config_from(config, vocab)
    rl_config = config_lib.make_rl_config(config)
    return Run(config, workdir, model_config, rl_config, tokenizer, prompt_set, eval_problems,
               make_mesh(config), stop_token_ids(tokenizer), pad_token_id(tokenizer))


def initial_params(run: Run, log_fn=print):
    """Fresh params: a HF checkpoint, or a seeded random init (+ the demo's warm start)."""
    config = run.config
    if config.model.path:
        from microcoder_jax.models import hf

        return hf.load_hf_params(config.model.path, run.model_config, mesh=run.mesh)
    params = models.init_params(run.model_config, jax.random.PRNGKey(config.seed))
    if config.train.warm_start_steps:
        if config.data.task != "demo":
            raise config_lib.ConfigError("train.warm_start_steps is only for the demo task")
        with open(os.path.join(run.workdir, "warm_start.jsonl"), "w") as curve:  # plotted by plot.py
            params = demo_task.warm_start(
                params, run.model_config, run.tokenizer, run.prompt_set.problems, config.demo.ops,
                config.data, steps=config.train.warm_start_steps, batch_size=config.demo.warm_start_batch,
                learning_rate=config.demo.warm_start_lr, max_new_tokens=config.sampling.max_new_tokens,
                seed=config.seed, progress=config.train.progress, log=log_fn,
                on_loss=lambda i, loss: curve.write(json.dumps({"step": i, "loss": loss}) + "\n"))
    return params


def abstract_train_state(run: Run):
    """Shapes, dtypes and shardings of the TrainState, for restoring without building one."""
    from microcoder_jax.rl import step as rl_step

    shapes = jax.eval_shape(lambda: rl_step.init_train_state(
        models.init_params(run.model_config, jax.random.PRNGKey(0)), run.rl_config))
    if run.mesh is None:
        one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=one), shapes)
    shardings = rl_step.state_shardings(run.model_config, run.rl_config, run.mesh)
    return jax.tree.map(lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h),
                        shapes, shardings)


# --------------------------------------------------------------------------------------- rollout


def decode_responses(tokenizer, tokens: np.ndarray, lengths: np.ndarray) -> list[str]:
    """Response texts (special tokens dropped: the end-of-turn token is not part of the program)."""
    return tokenizer.batch_decode([row[:n].tolist() for row, n in zip(tokens, lengths)],
                                  skip_special_tokens=True)


def rollout_batch(sample, rewards, passed, no_code, temperature: float) -> dict:
    """The rl.step batch from sampler output and verdicts: tokens = [left-padded prompt | response]."""
    prompt_tokens = np.asarray(sample.prompt_tokens, np.int32)
    prompt_mask = np.asarray(sample.prompt_mask, np.int32)
    lengths = np.asarray(sample.lengths, np.int32)
    n, max_new = sample.tokens.shape
    response_mask = (np.arange(max_new)[None, :] < lengths[:, None]).astype(np.int32)
    return {
        "tokens": np.concatenate([prompt_tokens, np.asarray(sample.tokens, np.int32)], 1),
        "attention_mask": np.concatenate([prompt_mask, response_mask], 1),
        "response_mask": np.concatenate([np.zeros_like(prompt_mask), response_mask], 1),
        "rewards": np.asarray(rewards, np.float32),
        "passed": np.asarray(passed, bool),
        "no_code": np.asarray(no_code, bool),
        "truncated": np.asarray(sample.truncated, bool),
        "response_lengths": lengths,
        "temperature": np.full((n,), temperature, np.float32),
    }


def host_rows(n: int) -> slice:
    """This process's contiguous share of `n` rows: every host judges only its own rows."""
    per = -(-n // jax.process_count())
    lo = min(jax.process_index() * per, n)
    return slice(lo, min(lo + per, n))


def allgather_rows(arrays, n: int) -> list[np.ndarray]:
    """The global [n, ...] arrays on every host from each host's `host_rows(n)` share."""
    if jax.process_count() == 1:
        return [np.asarray(a) for a in arrays]
    from jax.experimental import multihost_utils

    per = -(-n // jax.process_count())
    padded = [np.concatenate([np.asarray(a), np.zeros((per - len(a),) + np.shape(a)[1:], np.asarray(a).dtype)])
              for a in arrays]
    dtypes = [a.dtype for a in padded]
    gathered = multihost_utils.process_allgather(
        [a.astype(np.int32) if a.dtype == bool else a for a in padded], tiled=True)
    return [np.asarray(g)[:n].astype(d) for g, d in zip(gathered, dtypes)]


def allgather_counts(counts: dict[str, int]) -> dict[str, int]:
    """Verdict counts summed over hosts."""
    if jax.process_count() == 1:
        return counts
    from jax.experimental import multihost_utils

    from microcoder_jax.evaluator.judge import VERDICTS

    names = list(VERDICTS) + sorted(set(counts) - set(VERDICTS))
    local = np.array([counts.get(k, 0) for k in names], np.int32)
    total = np.asarray(multihost_utils.process_allgather(local)).reshape(-1, len(names)).sum(0)
    return {k: int(v) for k, v in zip(names, total) if v}


def to_device(batch: dict, mesh) -> dict:
    """Host arrays as global arrays with rows over the mesh's data axes (identical on every host).

    Under several processes a jit spanning all of them needs global arrays, not host numpy; a
    row count the data axes do not divide is replicated. Arrays already on devices pass through.
    """
    if mesh is None:
        return batch
    shards = mesh.shape["data"] * mesh.shape["fsdp"]

    def put(x):
        if isinstance(x, jax.Array):
            return x
        x = np.asarray(x)
        rows = x.ndim and x.shape[0] % shards == 0
        return jax.device_put(x, sharding.batch_sharding(mesh, x.ndim) if rows else sharding.replicated(mesh))

    return {k: put(v) for k, v in batch.items()}


def to_host(x) -> np.ndarray:
    """A (possibly multi-host) array as numpy on every host."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


class Roller:
    """Samples and judges one generation batch; holds the compiled sampler and the judge pool."""

    def __init__(self, run: Run, pool):
        self.run = run
        self.pool = pool

    def generate(self, params, prompts, *, num_samples, temperature, max_new_tokens, top_p, top_k,
                 rng):
        from microcoder_jax.sampling import sampler

        n = len(prompts) * num_samples
        return sampler.generate(
            params, self.run.model_config, prompts, num_samples=num_samples,
            temperature=np.full((n,), temperature, np.float32),
            top_p=np.full((n,), top_p, np.float32), top_k=np.full((n,), top_k, np.int32),
            max_new_tokens=max_new_tokens, stop_token_ids=self.run.stop_ids, pad_id=self.run.pad_id,
            rng=rng, mesh=self.run.mesh, prompt_buckets=tuple(self.run.config.data.prompt_buckets),
            decode_phases=self.run.config.sampling.decode_phases)

    def submit(self, problems, sample, rows: slice | None = None):
        """Extract programs and start judging them (non-blocking); `rows`: only those (this host's)."""
        from microcoder_jax.evaluator.extract import extract_code

        tokens, lengths = sample.tokens, sample.lengths
        if rows is not None:
            problems, tokens, lengths = problems[rows], tokens[rows], lengths[rows]
        texts = decode_responses(self.run.tokenizer, tokens, lengths)
        codes = [extract_code(t) for t in texts]
        return self.pool.submit(problems, codes, mode=self.run.config.evaluator.reward), codes, texts


def judge_arrays(results, codes, reward_mode: str):
    """(rewards, passed, no_code) arrays and verdict counts from JudgeResults."""
    from microcoder_jax.evaluator import reward

    rewards = np.array([reward(r, mode=reward_mode) for r in results], np.float32)
    passed = np.array([bool(r.passed) for r in results])
    no_code = np.array([c is None or r.verdict == "no_code" for r, c in zip(results, codes)])
    verdicts: dict[str, int] = {}
    for r in results:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    return rewards, passed, no_code, verdicts


# --------------------------------------------------------------------------------------- loop


def _key(seed: int, *path: int):
    """A PRNG key determined by the seed and the step: no sampling-key state to checkpoint."""
    key = jax.random.PRNGKey(seed)
    for p in path:
        key = jax.random.fold_in(key, p)
    return key


def train(config, workdir: str, *, log_fn=print, on_step=None):
    """Run (or resume) training to `config.train.steps`; returns the final TrainState.

    `on_step(step, record)`, if given, is called after each step with its metrics record.
    """
    from tqdm import tqdm

    from microcoder_jax.evaluator.pool import EvaluatorPool
    from microcoder_jax.rl import step as rl_step
    from microcoder_jax.rl.dynamic_sampling import GroupBuffer, add_rollouts
    from microcoder_jax.rl.logprobs import compute_logprobs
    from microcoder_jax.sampling.diversity import diversity_metrics
    from microcoder_jax.sampling.temperature import TemperatureScheduler

    workdir = os.path.abspath(workdir)
    primary = jax.process_index() == 0
    # before anything is written: a resume with a changed config is checked against config.json
    record_config(workdir, config_lib.to_dict(config), write=primary, log_fn=log_fn)
    run = setup(config, workdir)
    c, rl = config, run.rl_config
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=c.train.keep_checkpoints,
                        async_save=c.train.async_checkpoint)
    scheduler = TemperatureScheduler(c.temperature.to_dict())
    resume = ckpt.latest_step()
    ref_params = None  # the frozen reference of the KL term: only when kl_beta > 0
    if resume is None:
        params = initial_params(run, log_fn)
        if rl.uses_reference:
            ref_params = jax.tree.map(jnp.copy, params)  # the train state's copy is donated
        state = rl_step.init_train_state(params, rl, run.mesh, model_config=run.model_config,
                                         seed=c.seed)
        data_state, start = None, 0
    else:
        state, meta, _ = ckpt.restore(abstract_train_state(run), resume)
        data_state, start = meta["data"], int(meta["step"])
        scheduler.load_state_dict(meta["scheduler"])
        if rl.uses_reference:
            ref_params = initial_params(run, log_fn)  # deterministic: rebuilt, not checkpointed
        log_fn(f"resumed from step {start} ({ckpt.directory})")
    data = loader.prompt_iterator(len(run.prompt_set.problems), c.data.num_prompts, c.seed, data_state)
    writer = MetricsWriter(workdir, resume_step=start if resume is not None else None,
                           tensorboard=primary) if primary else None
    pool = EvaluatorPool(workers=c.evaluator.workers or None, timeout=c.evaluator.timeout,
                         memory_mb=c.evaluator.memory_mb, hide=problem_files(c))
    roller = Roller(run, pool)
    train_step = rl_step.make_train_step(run.model_config, rl, run.mesh)
    G = c.sampling.group_size
    micro = min(rl.micro_batch_size, c.data.num_prompts * G)
    bar = tqdm(total=c.train.steps, initial=start, desc="train", disable=not (c.train.progress and primary),
               dynamic_ncols=True)
    if scheduler.cfg["policy"] == "diversity" and scheduler.cfg["probe"] and not scheduler.probed:
        _probe_temperature(run, roller, scheduler, state.params, data_state, writer, log_fn)

    guard = preemption.Guard().install()  # SIGTERM/SIGINT: finish the step, checkpoint, exit
    try:
        for step in range(start, c.train.steps):
            t_step = time.perf_counter()
            temperature = scheduler.temperature
            times = {"sample": 0.0, "judge": 0.0, "judge_wait": 0.0}
            buffer, batch, ds_stats, generation = GroupBuffer(), None, {}, 0
            all_verdicts: dict[str, int] = {}
            while batch is None:
                indices = next(data)
                problems = [run.prompt_set.problems[i] for i in indices]
                prompts = [run.prompt_set.prompts[i] for i in indices]
                t0 = time.perf_counter()
                sample = roller.generate(state.params, prompts, num_samples=G, temperature=temperature,
                                         max_new_tokens=c.sampling.max_new_tokens, top_p=c.sampling.top_p,
                                         top_k=c.sampling.top_k, rng=_key(c.seed, 1, step, generation))
                times["sample"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                n = len(sample.lengths)
                rows = host_rows(n)  # each host judges its share; the verdicts are all-gathered
                handle, codes, _ = roller.submit([p for p in problems for _ in range(G)], sample, rows)
                # Overlap: the old log-probs run on the device while the pool judges.
                gen = rollout_batch(sample, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), temperature)
                gen["sample_entropy"] = np.asarray(sample.entropy, np.float32)
                lp_in = to_device({k: gen[k] for k in ("tokens", "attention_mask", "temperature")}, run.mesh)
                logprobs = functools.partial(
                    compute_logprobs, model_config=run.model_config, tokens=lp_in["tokens"],
                    attention_mask=lp_in["attention_mask"], temperature=lp_in["temperature"],
                    chunk=rl.logprob_chunk, micro_batch=micro if n % micro == 0 else None)
                # dynamic sampling regroups rows on the host: it needs them there
                keep = to_host if rl.dynamic_sampling else (lambda x: x)
                gen["old_logprobs"] = keep(logprobs(state.params))
                if ref_params is not None:
                    gen["ref_logprobs"] = keep(logprobs(ref_params))
                t1 = time.perf_counter()
                results = handle.result()
                times["judge_wait"] += time.perf_counter() - t1
                times["judge"] += time.perf_counter() - t0
                rewards, passed, no_code, verdicts = judge_arrays(results, codes, c.evaluator.reward)
                rewards, passed, no_code = allgather_rows((rewards, passed, no_code), n)
                verdicts = allgather_counts(verdicts)
                for k, v in verdicts.items():
                    all_verdicts[k] = all_verdicts.get(k, 0) + v
                gen.update(rewards=rewards, passed=passed, no_code=no_code)
                generation += 1
                if rl.dynamic_sampling:
                    buffer, batch, ds_stats = add_rollouts(buffer, gen, group_size=G,
                                                           num_prompts=len(indices), max_refills=rl.max_refills)
                else:
                    batch = gen
            t0 = time.perf_counter()
            state, step_metrics = train_step(state, to_device(batch, run.mesh))
            step_metrics = jax.device_get(step_metrics)
            times["train"] = time.perf_counter() - t0
            loss = float(step_metrics["loss"])
            if not math.isfinite(loss):
                ckpt.wait()  # let pending saves of good states finish before naming the newest
                raise NonFiniteLossError(
                    f"non-finite loss ({loss}) at step {step + 1}; stopping. The newest checkpoint "
                    f"(step {ckpt.latest_step()}) holds the last good state; lower rl.learning_rate "
                    f"or check the data before resuming.")
            div = diversity_metrics(batch["tokens"][:, -c.sampling.max_new_tokens:],
                                    batch["response_lengths"], G, entropy=batch["sample_entropy"])
            decision = scheduler.update(step, div)
            record = _record(step_metrics, batch, div, scheduler, temperature, times, all_verdicts,
                             ds_stats, generation, t_step)
            done = step + 1
            if writer is not None:
                record = writer.write(done, record)
                if decision.changed:
                    writer.write_text(done, "temperature", json.dumps(decision.to_dict()))
            if decision.changed:
                log_fn(f"temperature {decision.previous:g} -> {decision.temperature:g} at step {done}: "
                       f"{decision.reason}")
            bar.update(1)
            bar.set_postfix(progress_postfix(record))
            if on_step is not None:
                on_step(done, record)
            if c.train.eval_every and done % c.train.eval_every == 0 and run.eval_problems:
                _evaluate(run, roller, state.params, done, writer, log_fn)
            stopping = guard.requested
            if stopping or done == c.train.steps or (c.train.checkpoint_every and done % c.train.checkpoint_every == 0):
                ckpt.save(done, state, {"step": done, "data": data.get_state(),
                                        "scheduler": scheduler.state_dict()})
            ckpt.poll()  # a failed background save stops the run here, in one line
            if stopping and done < c.train.steps:
                raise guard.stop(done, ckpt.directory)
    finally:
        guard.uninstall()
        bar.close()
        ckpt.close()
        pool.close()
        if writer is not None:
            writer.close()
    return state


def _record(m, batch, div, scheduler, temperature, times, verdicts, ds_stats, generations, t_step):
    """The metrics.jsonl row of one step."""
    n = len(batch["rewards"])
    record = {
        "reward_mean": float(np.mean(batch["rewards"])),
        "pass_rate": float(np.mean(batch["passed"])),
        "response_length_mean": float(np.mean(batch["response_lengths"])),
        "truncation_rate": float(np.mean(batch["truncated"])),
        "masked_fraction": float(m.get("frac_masked", 0.0)) + float(m.get("frac_removed", 0.0)),
        "repetition_rate": float(m.get("frac_repeating", 0.0)),
        "diversity": div.get(scheduler.cfg["signal"], float("nan")),
        "temperature": temperature,
        "next_temperature": scheduler.temperature,
        "entropy": div["entropy"],
        "policy_entropy": m.get("entropy"),
        "clip_fraction": m.get("clip_frac"),
        "grad_norm": m.get("grad_norm"),
        "learning_rate": m.get("learning_rate"),
        "no_code_rate": float(np.mean(batch["no_code"])),
        "time_sample_s": times["sample"],
        "time_judge_s": times["judge"],
        "time_judge_wait_s": times["judge_wait"],
        "time_train_s": times["train"],
        "time_step_s": time.perf_counter() - t_step,
        "generations": generations,
    }
    for k, v in m.items():
        if k not in ("entropy",):
            record.setdefault(k, v)
    for k, v in div.items():
        record[f"div/{k}"] = v
    total = max(sum(verdicts.values()), 1)
    for k, v in verdicts.items():
        record[f"verdict/{k}"] = v / total
    record.update(ds_stats)
    record["rows"] = n
    return record


def _probe_temperature(run, roller, scheduler, params, data_state, writer, log_fn):
    """The diversity policy's start-up probe, on the first batch's prompts (the stream is not advanced)."""
    c = run.config
    it = loader.prompt_iterator(len(run.prompt_set.problems), c.data.num_prompts, c.seed, data_state)
    prompts = [run.prompt_set.prompts[i] for i in next(it)]

    def sample_fn(temperature):
        out = roller.generate(params, prompts, num_samples=c.sampling.group_size,
                              temperature=temperature, max_new_tokens=c.sampling.max_new_tokens,
                              top_p=c.sampling.top_p, top_k=c.sampling.top_k,
                              rng=_key(c.seed, 2, int(temperature * 1000)))
        return out.tokens, out.lengths, out.entropy

    decision = scheduler.probe(sample_fn, c.sampling.group_size)
    log_fn(f"temperature probe: {decision.temperature:g} ({decision.reason})")
    if writer is not None:
        writer.write_text(0, "temperature", json.dumps(decision.to_dict()))


def _evaluate(run, roller, params, step, writer, log_fn):
    """The eval schedule: the same code as `python -m microcoder_jax.eval`."""
    from microcoder_jax import eval as eval_lib

    report = eval_lib.evaluate_problems(run, roller, params, run.eval_problems, rng=_key(run.config.seed, 3, step))
    if jax.process_index() == 0:
        path = os.path.join(run.workdir, "eval", f"step_{step}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
    log_fn(eval_lib.format_table(report))
    if writer is not None:
        writer.write(step, {f"eval_{k}": v for k, v in report["overall"].items()
                            if isinstance(v, (int, float))})
        writer.write_text(step, "eval", eval_lib.format_table(report))


# --------------------------------------------------------------------------------------- CLI


def parse_args(argv: list[str]) -> tuple[str | None, list[str], str | None]:
    """(--config path, ['key=value' overrides], --workdir) from argv."""
    path, overrides, workdir = None, [], None
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        needs_value = name in ("--config", "--workdir") and not eq
        if needs_value:
            if i + 1 >= len(argv):
                raise SystemExit(f"{name} needs a value")
            value = argv[i + 1]
            i += 1
        if name == "--config":
            path = value
        elif name == "--workdir":
            workdir = value
        elif name.startswith("--config."):
            if not eq:
                raise SystemExit(f"{arg}: overrides look like --config.KEY=VALUE")
            overrides.append(f"{name[len('--config.'):]}={value}")
        elif name in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        else:
            raise SystemExit(f"unknown argument {arg!r}; see --help")
        i += 1
    return path, overrides, workdir


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax", "tensorboardX"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    path, overrides, workdir = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        config = config_lib.load_config(path, overrides)
        initialize_distributed(config)  # before any other JAX call
    except config_lib.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    workdir = workdir or os.path.join("runs", os.path.splitext(os.path.basename(path or "demo"))[0])
    try:
        train(config, workdir)
    except preemption.Preempted as e:
        print(e, file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted before the first RL step: nothing to save", file=sys.stderr)
        return 130
    except config_lib.ConfigError as e:  # e.g. resume.ConfigChangeError
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (NonFiniteLossError, CheckpointWriteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"done: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
