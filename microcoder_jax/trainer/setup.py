"""What a run builds once before its first step: tokenizer, problems and prompts, model shape,
mesh, RL config, and the state to start from (fresh params, or the newest checkpoint restored).

`setup(config, workdir)` returns a `Run`; `start_state(run, ckpt)` the train state, data position
and scheduler state to continue from. Training and evaluation share both.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import Mesh

from microcoder_jax import config as config_lib
from microcoder_jax import models, sharding
from microcoder_jax.models import lora
from microcoder_jax.data import demo_task, loader, truncation_task
from microcoder_jax.data.config import DataConfig, DemoConfig
from microcoder_jax.data.tokenizer import load_tokenizer, pad_token_id, stop_token_ids
from microcoder_jax.envs import Environment, make_env
from microcoder_jax.envs.config import EnvConfig
from microcoder_jax.judge.config import JudgeConfig
from microcoder_jax.models.presets import ModelConfig
from microcoder_jax.data.problems import Problem
from microcoder_jax.rl.config import RLConfig
from microcoder_jax.sampling.config import SamplingConfig
from microcoder_jax.sampling.temperature import TemperatureConfig
from microcoder_jax.trainer import warm_start
from microcoder_jax.trainer.config import EvalConfig, TrainConfig
from microcoder_jax.rl import step as rl_step

log = logging.getLogger("microcoder_jax.trainer.setup")


@dataclasses.dataclass
class Run:
    """Everything a run builds once before its first step: the typed config blocks consumers read,
    the model shape, tokenizer, prompts, environment and meshes."""

    config: ml_collections.ConfigDict  # as given (saved as config.json; the planner re-derives from it)
    workdir: str
    model_config: models.DecoderConfig
    rl_config: RLConfig
    env_config: EnvConfig  # the env.* block; `env` is the Environment built from it
    data: DataConfig
    sampling: SamplingConfig
    temperature: TemperatureConfig
    judge: JudgeConfig
    train: TrainConfig
    eval: EvalConfig
    model: ModelConfig  # the model block (checkpoint path, preset); its shape is `model_config`
    demo: DemoConfig
    tokenizer: Any  # a transformers tokenizer
    env: Environment  # what an episode is: the first prompt, the judging of each answer (envs/)
    prompt_set: loader.PromptSet
    eval_problems: list[Problem]
    # role -> where it runs (sharding.place_roles): "learner" and "rollout", one shared Placement
    # unless mesh.rollout_devices gives the worker devices of its own
    placement: dict[str, sharding.Placement]
    stop_ids: list[int]
    pad_id: int
    seed: int
    role: str = "learner"  # whose placement `mesh` and `sample_mesh` are (`as_role`)

    @property
    def mesh(self) -> Mesh | None:
        """The acting role's mesh (None on one device)."""
        return self.placement[self.role].mesh

    @property
    def sample_mesh(self) -> Mesh | None:
        """The acting role's paged-sampler mesh: the same devices (sampling.decode_tensor)."""
        return self.placement[self.role].sample_mesh

    @property
    def split(self) -> bool:
        """The rollout worker has devices of its own (mesh.rollout_devices)."""
        return self.placement["rollout"] is not self.placement["learner"]

    def as_role(self, role: str) -> "Run":
        """This Run as `role` (sharding.ROLES) sees it: its meshes are that role's."""
        if role not in self.placement:
            raise ValueError(f"unknown role {role!r}; roles: {', '.join(self.placement)}")
        return self if role == self.role else dataclasses.replace(self, role=role)


def key(seed: int, *path: int):
    """A PRNG key determined by the seed and a path (purpose, step, ...): no key state to checkpoint."""
    k = jax.random.PRNGKey(seed)
    for p in path:
        k = jax.random.fold_in(k, p)
    return k


def _demo_data(d: DemoConfig, data: DataConfig, seed: int, workdir: str):
    """The demo's problems and tokenizer (trained once, then reloaded from the workdir); with
    demo.votes, the truncation task's (data/truncation_task.py)."""
    problems = _demo_problems(d, seed)
    path = os.path.join(workdir, "tokenizer")
    exists = os.path.exists(os.path.join(path, "tokenizer.json"))
    if jax.process_count() > 1:  # every host looks before process 0 writes (shared or local disks)
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("microcoder_jax demo tokenizer")
    if exists:
        tokenizer = load_tokenizer(path)
    else:
        tokenizer = _demo_tokenizer(d, data, problems)
        if jax.process_index() == 0:
            tokenizer.save_pretrained(path)
    return problems, tokenizer


def _demo_problems(d: DemoConfig, seed: int):
    return demo_task.make_problems(
        d.ops,
        d.problems_per_op,
        d.tests_per_problem,
        seed,
        d.phrasings,
        public_tests=d.public_tests,
        hidden_op=d.hidden_op,
    )


def _demo_tokenizer(d: DemoConfig, data: DataConfig, problems):
    task = truncation_task if d.votes else demo_task
    return task.build_tokenizer(problems, d.ops, data, d.vocab_size)


def model_vocab_size(config) -> int | None:
    """The vocabulary of a run's model without a checkpoint: its tokenizer's size (the demo's BPE,
    trained deterministically from the config, can stop short of demo.vocab_size). None when
    model.path gives it, or no tokenizer is named (the preset's then). What `setup` builds and
    what the planner plans, from one rule."""
    if config.model.path:
        return None
    if config.data.task == "demo":
        return _demo_vocab_size(DemoConfig.from_node(config.demo), DataConfig.from_node(config.data), config.seed)
    if config.tokenizer.path:
        return _tokenizer_size(config.tokenizer.path)
    return None


@functools.lru_cache(maxsize=8)
def _demo_vocab_size(d: DemoConfig, data: DataConfig, seed: int) -> int:
    return len(_demo_tokenizer(d, data, _demo_problems(d, seed)))


@functools.lru_cache(maxsize=8)
def _tokenizer_size(path: str) -> int:
    return len(load_tokenizer(models.resolve_model_path(path)))


def problem_files(config, *extra) -> list[str]:
    """Absolute paths of the problem files (training, evaluation, `extra`): the judge hides them."""
    paths = []
    for files in (config.data.train_files, config.eval.files, *extra):
        if files:
            paths += [os.path.abspath(p) for p in loader.expand_paths(files)]
    return sorted(set(paths))


def block_fields(config, typed: dict | None = None) -> dict:
    """The Run's typed-block fields from a config (`typed`: its `config.blocks`): what consumers read."""
    typed = config_lib.blocks(config) if typed is None else typed
    return dict(
        rl_config=typed["rl"],
        env_config=typed["env"],
        data=typed["data"],
        sampling=typed["sampling"],
        temperature=typed["temperature"],
        judge=typed["judge"],
        train=typed["train"],
        eval=typed["eval"],
        model=typed["model"],
        demo=typed["demo"],
        seed=config.seed,
    )


def setup(config, workdir: str, typed: dict | None = None) -> Run:
    """Tokenizer, problems and prompts, model shape, typed blocks and meshes (config already
    validated; `typed`: the blocks `config.validate` returned, built again when None)."""
    typed = config_lib.blocks(config) if typed is None else typed
    fields = block_fields(config, typed)
    # A GGUF model.path (a .gguf file, 'smollm2') is converted once into a cached HF folder: from
    # here on the run reads that folder, the tokenizer too when tokenizer.path is ''.
    fields["model"] = dataclasses.replace(fields["model"], path=models.resolve_model_path(fields["model"].path))
    data, sampling, model, m = fields["data"], fields["sampling"], fields["model"], typed["mesh"]
    shape = models.model_config_from(model, None, typed["lora"])  # the vocabulary may come from the tokenizer below
    try:  # before anything is written: the devices split, the KV heads split over the sampler's chips
        placement = sharding.place_roles(m, sampling.decode_tensor, shape.num_kv_heads)
    except ValueError as e:
        raise config_lib.ConfigError(str(e)) from None
    if data.task == "demo":
        os.makedirs(workdir, exist_ok=True)  # the demo's tokenizer is saved there
        d = fields["demo"]
        problems, tokenizer = _demo_data(d, data, fields["seed"], workdir)
        skipped = 0
        eval_problems = (
            demo_task.held_out_problems(
                d.ops, d.held_out_per_op, d.tests_per_problem, d.phrasings, d.public_tests, d.hidden_op
            )
            if d.held_out_per_op
            else problems
        )
    else:
        tokenizer = load_tokenizer(models.resolve_model_path(typed["tokenizer"].path) or model.path)
        problems, skipped = loader.read_problems(data.train_files)
        eval_files = fields["eval"].files
        eval_problems = loader.read_problems(eval_files)[0] if eval_files else []
    env = make_env(data, fields["judge"].reward, fields["env_config"])
    # none usable: nothing written
    prompt_set = loader.make_prompt_set(problems, tokenizer, data, skipped, env.messages)
    log.info("training prompts: %s", prompt_set.report())
    os.makedirs(workdir, exist_ok=True)
    vocab = None if model.path else len(tokenizer)  # the rule of model_vocab_size
    model_config = shape if vocab is None else models.model_config_from(model, vocab, typed["lora"])
    return Run(
        config=config,
        workdir=workdir,
        model_config=model_config,
        tokenizer=tokenizer,
        env=env,
        prompt_set=prompt_set,
        eval_problems=eval_problems,
        placement=placement,
        stop_ids=stop_token_ids(tokenizer),
        pad_id=pad_token_id(tokenizer),
        **fields,
    )


def initial_params(run: Run, log_fn=print, record: bool = True):
    """Fresh params: a HF checkpoint, or a seeded random init (+ the demo's warm start); under
    LoRA (lora.rank > 0) that base, stored as lora.base_dtype says, with fresh adapters (B = 0).
    `record`: write the warm start's curve (False when the base is only rebuilt for a resume)."""
    mc = run.model_config
    if run.model.path:
        params = models.load_hf_params(run.model.path, lora.base_config(mc), mesh=run.mesh)
        return lora.attach(params, mc, key(run.seed, 7)) if mc.lora_rank else params
    params = models.init_params(lora.base_config(mc), jax.random.PRNGKey(run.seed))
    if run.train.warm_start_steps:
        curve_file = os.path.join(run.workdir, "warm_start.jsonl") if record else os.devnull  # plotted by plot.py
        with open(curve_file, "w") as curve:
            params = warm_start.warm_start(
                params,
                lora.base_config(mc),
                run.tokenizer,
                run.prompt_set.problems,
                run.demo,
                run.data,
                env_config=run.env_config,
                steps=run.train.warm_start_steps,
                max_new_tokens=run.sampling.max_new_tokens,
                seed=run.seed,
                progress=run.train.progress,
                log=log_fn,
                on_loss=lambda i, loss: curve.write(json.dumps({"step": i, "loss": loss}) + "\n"),
            )
    return lora.attach(params, mc, key(run.seed, 7)) if mc.lora_rank else params


def abstract_train_state(run: Run):
    """Shapes, dtypes and shardings of what a checkpoint holds, for restoring without building
    one: the TrainState, or under LoRA its adapters and their optimizer state (`saved_part`)."""
    return saved_part(train_state_shapes(run.model_config, run.rl_config, run.mesh))


def state_layout(run: Run):
    """Shapes, dtypes and shardings of the whole TrainState the step runs on (the base included)."""
    return train_state_shapes(run.model_config, run.rl_config, run.mesh)


def saved_part(state):
    """What a checkpoint stores of a TrainState: all of it, or under LoRA all but the frozen base
    (stored once, where model.path points; each checkpoint's meta keeps its `base_fingerprint`)."""
    return state._replace(params=rl_step.trainable_part(state.params))


def frozen_base(run: Run, log_fn=print):
    """The frozen base of a LoRA run as the step stores it (None without adapters): loaded or initialised again."""
    return lora.split(initial_params(run, log_fn, record=False))[1] if run.model_config.lora_rank else None


def base_meta(frozen) -> dict:
    """Checkpoint meta naming the base a LoRA run trains (empty without one)."""
    return {} if frozen is None else {"base_fingerprint": lora.fingerprint(frozen)}


def with_base(run: Run, saved_params, frozen, meta: dict, where: str):
    """Params restored from a checkpoint joined with the frozen base; a base other than the one
    the checkpoint was trained on is refused in one line (before anything is written)."""
    if frozen is None:
        return saved_params
    stored = meta.get("base_fingerprint")
    if stored is not None and not lora.same_base(stored, lora.fingerprint(frozen)):
        raise config_lib.ConfigError(
            f"{where} holds adapters trained on another base model than this run's "
            f"(model.path={run.model.path or 'random init, seed ' + str(run.seed)!s}, lora.base_dtype="
            f"{run.model_config.base_dtype or 'compute dtype'!s}): use the base it was trained on, or a new workdir"
        )
    return lora.join(saved_params, frozen)


def train_state_shapes(model_config: models.DecoderConfig, rl_config: RLConfig, mesh):
    """The TrainState's shapes (with shardings) from its parts; `mesh` may be an AbstractMesh (the planner's)."""
    shapes = jax.eval_shape(
        lambda: rl_step.init_train_state(models.init_params(model_config, jax.random.PRNGKey(0)), rl_config)
    )
    if mesh is None:
        one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=one), shapes)
    shardings = rl_step.state_shardings(model_config, rl_config, mesh)
    return jax.tree.map(lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h), shapes, shardings)


@dataclasses.dataclass
class Start:
    """Where the loop starts: the train state, the frozen KL reference (or None), the data
    iterator's state and the scheduler's (None when fresh), and the first step."""

    state: Any
    ref_params: Any
    data_state: Any
    scheduler_state: Any
    step: int
    meta: dict = dataclasses.field(default_factory=dict)  # every checkpoint's meta carries it (base_meta)


def start_state(run: Run, ckpt, log_fn=print) -> Start:
    """Fresh params and optimizer, or the newest readable checkpoint restored exactly (older
    ones are tried when the newest cannot be read; none readable: CheckpointReadError)."""
    rl = run.rl_config
    restored = ckpt.restore_readable(abstract_train_state(run), log_fn)
    if restored is None:
        params = initial_params(run, log_fn)
        # the KL reference: a copy (the state's is donated), or under LoRA none: the learner reads
        # the state's frozen base with zero adapters (Learner.reference_params)
        ref = jax.tree.map(jnp.copy, params) if rl.uses_reference and not run.model_config.lora_rank else None
        state = rl_step.init_train_state(params, rl, run.mesh, model_config=run.model_config, seed=run.config.seed)
        return Start(state, ref, None, None, 0, base_meta(lora.split(params)[1]))
    state, meta, _ = restored
    rebuild = rl.uses_reference or run.model_config.lora_rank
    base = initial_params(run, log_fn, record=False) if rebuild else None
    frozen = lora.split(base)[1] if base is not None and run.model_config.lora_rank else None
    where = f"checkpoint step {int(meta['step'])} in {ckpt.directory}"
    state = state._replace(params=with_base(run, state.params, frozen, meta, where))
    ref = base if rl.uses_reference and not run.model_config.lora_rank else None  # deterministic: rebuilt
    log_fn(f"resumed from step {int(meta['step'])} ({ckpt.directory})")
    return Start(state, ref, meta["data"], meta["scheduler"], int(meta["step"]), base_meta(frozen))
