"""The configuration of a run: the typed blocks' keys as one `ml_collections.ConfigDict`.

Each block is a frozen dataclass owned by its package (`block_types()`: `SamplingConfig` in
sampling/, `JudgeConfig` in judge/, `RLConfig` in rl/, ...); its fields give the keys,
defaults and meanings. `default_config()` builds the ConfigDict (what `--config.KEY=VALUE`
overrides), `demo_config()` is the bundled demo, `configs/*.py` files return one from
`get_config(arg)`. In the `rl` block a key a preset sets is None (= the preset's value).
`validate(config)` (at the end) builds every typed block (`blocks(config)`), which checks each
value, then the rules across blocks, and raises `ConfigError` naming the key and what is valid;
`describe(config)` is what `--help` prints. Command lines are parsed by `microcoder_jax.cli`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import typing

import ml_collections
from ml_collections import config_dict

from microcoder_jax.blocks import ConfigError
from microcoder_jax.rl.config import RLConfig

__all__ = ["ConfigError"]  # re-exported: every CLI catches it from here

SEED_KEY = ("seed", 0, "seeds model init, data order, sampling keys and the truncation-mask uniforms")


def block_types() -> dict:
    """Block key -> its typed block class, in the order `--help` lists them (`rl` is `RLConfig`)."""
    from microcoder_jax.data.config import DataConfig, DemoConfig, TokenizerConfig
    from microcoder_jax.envs.config import EnvConfig
    from microcoder_jax.judge.config import JudgeConfig
    from microcoder_jax.models.lora import LoRAConfig
    from microcoder_jax.models.presets import ModelConfig
    from microcoder_jax.sampling.config import SamplingConfig
    from microcoder_jax.sampling.temperature import TemperatureConfig
    from microcoder_jax.sharding import DistributedConfig, MeshConfig
    from microcoder_jax.trainer.config import EvalConfig, TrainConfig, WandbConfig

    return {
        "model": ModelConfig,
        "lora": LoRAConfig,
        "tokenizer": TokenizerConfig,
        "data": DataConfig,
        "sampling": SamplingConfig,
        "temperature": TemperatureConfig,
        "rl": RLConfig,
        "judge": JudgeConfig,
        "env": EnvConfig,
        "train": TrainConfig,
        "eval": EvalConfig,
        "wandb": WandbConfig,
        "mesh": MeshConfig,
        "distributed": DistributedConfig,
        "demo": DemoConfig,
    }


def rl_from_run() -> dict[str, str]:
    """RLConfig fields the run fills in from other blocks' keys (their `from_run`)."""
    return {f.name: f.metadata["from_run"] for f in dataclasses.fields(RLConfig) if f.metadata.get("from_run")}


def _rl_keys() -> list[tuple[str, object, str]]:
    """The `rl` block from RLConfig: its defaults, except a None placeholder where a preset sets it."""
    from microcoder_jax.rl.presets import PRESETS

    preset_set = {k for overrides in PRESETS.values() for k in overrides}
    hints = typing.get_type_hints(RLConfig)
    out = []
    for f in dataclasses.fields(RLConfig):
        if f.metadata.get("from_run") or f.name == "preset":
            continue
        kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
        meaning = f.metadata["meaning"]
        if f.name in preset_set:
            out.append((f"rl.{f.name}", kind, f"{meaning} (None = the preset's)"))
        elif f.default is None:
            out.append((f"rl.{f.name}", kind, meaning))
        else:
            out.append((f"rl.{f.name}", f.default, meaning))
    return out


def all_keys() -> list[tuple[str, object, str]]:
    """Every (key, default, meaning), in the order `--help` shows them, from the typed blocks."""
    from microcoder_jax.blocks import block_keys

    keys: list[tuple[str, object, str]] = [SEED_KEY]
    for cls in block_types().values():
        if cls is RLConfig:
            keys.append(("rl.preset", "microcoder", "algorithm preset: microcoder, grpo, dapo (rl.presets.PRESETS)"))
            keys += _rl_keys()
        else:
            keys += block_keys(cls)
    return keys


def blocks(config: ml_collections.ConfigDict) -> dict:
    """Block key -> the typed block built from `config`; bad values raise one ConfigError naming
    each (one line per block that failed, so a config's problems are reported at once)."""
    typed, errors = {}, []
    for name, cls in block_types().items():
        try:
            typed[name] = rl_config_of(config) if cls is RLConfig else cls.from_node(config[name])
        except (ValueError, TypeError) as e:
            errors.append(str(e) if isinstance(e, ValueError) else f"{name}: {e}")
    if errors:
        raise ConfigError("\n".join(errors))
    return typed


def default_config() -> ml_collections.ConfigDict:
    """Every knob of the project with its default (the paper's setting where it states one)."""
    c = ml_collections.ConfigDict()
    for key, default, _ in all_keys():
        node = c
        *groups, name = key.split(".")
        for g in groups:
            if g not in node:
                node[g] = ml_collections.ConfigDict()
            node = node[g]
        node[name] = config_dict.placeholder(default) if isinstance(default, type) else default
    return c


def meanings() -> dict[str, str]:
    return {k: m for k, _, m in all_keys()}


def demo_config() -> ml_collections.ConfigDict:
    """The bundled default: a tiny Qwen3 learning the synthetic task on a CPU in minutes."""
    c = default_config()
    c.data.task = "demo"  # synthetic "read a b, print a OP b" problems (data/demo_task.py)
    c.data.num_prompts = 16  # 16 prompts x G=8 = 128 responses per step
    c.data.max_prompt_tokens = 64  # demo prompts are ~40 tokens
    c.data.prompt_buckets = (64,)  # one static prompt length
    c.data.instruction_stdin = "Answer with one ```python``` block."  # short: tiny context
    c.model.preset = "tiny"  # random init; vocab = the demo BPE's size
    c.model.hidden_size = 64  # 2 layers x 64 wide, GQA 4:2 heads of 16: ~80K params
    c.model.intermediate_size = 128
    c.model.num_layers = 2
    c.model.num_heads = 4
    c.model.num_kv_heads = 2
    c.model.head_dim = 16
    c.model.dtype = "float32"  # CPU: no bf16 speed-up, and exact resume checks are simpler
    c.model.remat = "none"  # tiny activations: nothing to rematerialise
    c.model.attention = "xla"
    c.sampling.group_size = 8  # G
    c.sampling.max_new_tokens = 40  # answers are ~26 tokens
    c.temperature.temperature = 1.0  # constant
    c.rl.learning_rate = 7e-4  # 1e-3 and above break the warm-started format on some steps
    c.rl.warmup_steps = 0
    c.rl.decay = "constant"
    c.rl.num_minibatches = 2  # two updates per rollout batch (the second one is off-policy)
    c.rl.micro_batch_size = 32
    c.rl.repeat_m = 8  # responses are short; keep the repetition test meaningful
    c.judge.workers = 2  # the 2-core target machine
    c.judge.timeout = 2.0
    c.judge.memory_mb = 512
    c.train.steps = 50  # RL steps
    c.train.checkpoint_every = 10
    c.train.eval_every = 0  # `python -m microcoder_jax.eval --checkpoint WORKDIR` afterwards
    c.train.warm_start_steps = 150  # supervised steps teaching the format (random operations)
    c.eval.max_new_tokens = 40
    c.eval.temperature = 0.0  # greedy
    c.eval.top_p = 1.0
    c.mesh.fsdp = 1  # one device
    return c


def problems_config() -> ml_collections.ConfigDict:
    """Your model (model.path, required) on your problems (data.train_files, required), sized for a
    CPU; `configs/problems.py` and `api.train` start from it (the file's docstring explains it)."""
    c = default_config()
    c.data.task = "problems"
    c.data.num_prompts = 4  # 4 prompts x G=4 = 16 responses per step
    c.sampling.group_size = 4
    c.sampling.max_new_tokens = 512  # training response cap
    c.data.max_prompt_tokens = 1024  # longer prompts are skipped (the run says so)
    c.data.prompt_buckets = (256, 512, 1024)
    c.model.dtype = "float32"  # CPU: no bfloat16 speed-up
    c.rl.micro_batch_size = 2  # rows per forward/backward: the train step's memory
    c.rl.num_minibatches = 1
    c.rl.learning_rate = 1e-6
    c.temperature.temperature = 1.0
    c.train.steps = 50
    c.train.checkpoint_every = 10
    c.train.eval_every = 25  # only when eval.files is set
    c.train.warm_start_steps = 0  # the supervised warm start is the demo task's
    c.eval.max_new_tokens = 512
    c.eval.batch_problems = 4
    c.mesh.fsdp = 1  # one device; on a GPU/TPU slice -1 (every chip) is the default
    return c


# A config file's RULE argument (configs/truncation_task.py:RULE, configs/smollm2.py:RULE) -> rl.truncation
TRUNCATION_RULES = {
    "grpo": "none",  # truncated answers judged like any other (reward 0)
    "overlong_filter": "overlong_filter",  # every truncated answer leaves the loss
    "mask_all": "mask_all",  # every truncated answer gets advantage 0 (kept in the token count)
    "soft_overlong": "soft_overlong",  # DAPO's length penalty over the last quarter of the cap
    "conditional": "conditional",  # MicroCoder's conditional mask, as conditional_RHO
}


def apply_truncation_rule(c: ml_collections.ConfigDict, arg: str, file: str) -> None:
    """Set the rl block's truncation rule from a config file's RULE argument: `grpo`,
    `overlong_filter`, `mask_all`, `soft_overlong` (penalty over the last quarter of
    sampling.max_new_tokens) or `conditional_RHO` (e.g. conditional_0.3; bare `conditional` is rho
    0.1). A bad RULE raises ValueError naming `file` and the valid rules."""
    name, _, rho = arg.partition("_") if arg.startswith("conditional") else (arg, "", "")
    if name not in TRUNCATION_RULES or (rho and name != "conditional"):
        raise ValueError(
            f"{file}:{arg}: expected one of {sorted(TRUNCATION_RULES)} "
            "(conditional as conditional_RHO, e.g. conditional_0.1)"
        )
    c.rl.truncation = TRUNCATION_RULES[name]
    c.rl.soft_overlong_cache = c.sampling.max_new_tokens // 4  # the paper's 1024 of 4096 tokens, scaled
    if name == "conditional":
        try:
            c.rl.rho = float(rho or 0.1)
        except ValueError:
            raise ValueError(f"{file}:{arg}: rho {rho!r} is not a number") from None


def get_config(arg=None) -> ml_collections.ConfigDict:
    """This file as a config file: the demo, what every CLI runs without --config."""
    return demo_config()


DEFAULT_FILE = __file__  # the CLIs' config file when none is given (its get_config: the demo)


def flat_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """All leaf keys as dotted paths, sorted."""
    keys = []
    for name, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            keys += flat_keys(value, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return sorted(keys)


def get(config: ml_collections.ConfigDict, key: str):
    node = config
    for part in key.split("."):
        node = node[part]
    return node


# Keys that moved to another block: old name -> new name. A command line, config file or saved
# run (config.json) that sets the old name is read as the new one (`migrate`).
MOVED_BLOCKS = {"evaluator": "judge"}  # a block renamed whole (the judge's, beside `eval`): old -> new


@functools.cache
def moved_keys() -> dict[str, str]:
    """Every moved key, old name -> new name: the loop's schedule out of the algorithm's static
    block, and each key of a renamed block (MOVED_BLOCKS)."""
    out = {
        f"rl.{name}": f"train.{name}"
        for name in ("off_policy_steps", "partial_rollouts", "partial_recompute", "max_staleness", "max_refills")
    }
    blocks = block_types()
    for old, new in MOVED_BLOCKS.items():
        out.update({f"{old}.{f.name}": f"{new}.{f.name}" for f in dataclasses.fields(blocks[new])})
    return out


def migrate(config) -> list[str]:
    """Move each value set under an old key name (moved_keys()) to its new name, in place (a
    ConfigDict or a nested dict); returns one note per key moved. Both names set is a ConfigError."""
    notes = []
    for old, new in moved_keys().items():
        (old_block, old_name), (new_block, new_name) = old.split("."), new.split(".")
        if old_block not in config or old_name not in config[old_block]:
            continue
        value = config[old_block][old_name]
        if new_block not in config:
            config[new_block] = {}
        if new_name in config[new_block] and config[new_block][new_name] != value and _is_set(config, new):
            raise ConfigError(
                f"{old}={value!r} and {new}={config[new_block][new_name]!r}: {old} is now {new}; set only {new}"
            )
        with config.unlocked() if isinstance(config, ml_collections.ConfigDict) else contextlib.nullcontext():
            del config[old_block][old_name]  # config_flags locks a file's ConfigDict
        config[new_block][new_name] = value
        notes.append(f"{old} is now {new} (read as {new}={value!r})")
    for old in MOVED_BLOCKS:  # a renamed block left empty by the moves above
        if old in config and not len(config[old]):
            with config.unlocked() if isinstance(config, ml_collections.ConfigDict) else contextlib.nullcontext():
                del config[old]
    return notes


def _is_set(config, key: str) -> bool:
    """True when `key` differs from its default (a value someone set)."""
    defaults = {k: d for k, d, _ in all_keys()}
    return key not in defaults or get(config, key) != defaults[key]


def rl_overrides(config: ml_collections.ConfigDict) -> dict:
    """The `rl` block as rl.presets.make_rl_config overrides (set keys except the preset), plus the batch shape."""
    out = {k: v for k, v in config.rl.items() if k != "preset" and v is not None}
    out.update({field: get(config, key) for field, key in rl_from_run().items()})
    if "max_turns" in out and "env" in config:  # a code episode has one turn whatever env.max_turns says
        from microcoder_jax.envs.config import EnvConfig

        out["max_turns"] = EnvConfig.from_node(config.env).turns
    return out


def rl_config_of(config: ml_collections.ConfigDict) -> RLConfig:
    """The run's RLConfig, read off a run config: its `rl.preset` with the config's overrides
    (`rl.presets.make_rl_config` builds one from a preset name and keyword overrides)."""
    from microcoder_jax.rl.presets import make_rl_config as make

    train = config["train"] if "train" in config else {}
    stale = bool(train.get("off_policy_steps", 0) or train.get("partial_rollouts", False))
    return make(config.rl.preset, stale=stale, **rl_overrides(config))


def to_dict(config: ml_collections.ConfigDict) -> dict:
    """A JSON-ready plain dict of the config (saved beside checkpoints and metrics)."""

    def plain(v) -> typing.Any:
        if isinstance(v, ml_collections.ConfigDict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v

    return plain(config)


def describe(config: ml_collections.ConfigDict) -> str:
    """One line per key: `key = value  meaning` (what `--help` lists); None rl keys show the preset's."""
    try:
        resolved = dataclasses.asdict(rl_config_of(config))
    except (ValueError, TypeError):
        resolved = {}
    notes = meanings()
    lines = []
    for key in flat_keys(config):
        value = get(config, key)
        shown = repr(value)
        if value is None and key.startswith("rl.") and resolved.get(key[3:]) is not None:
            shown = f"None (-> {resolved[key[3:]]!r})"
        if len(shown) > 40:
            shown = shown[:37] + "..."
        lines.append(f"  --config.{key}={shown}  {notes.get(key, '')}".rstrip())
    return "\n".join(lines)


def config_dir() -> str:
    """The repository's `configs/` directory (for tests and docs; not installed with the package)."""
    import os

    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


# Checks before anything is written: every typed block checks its own fields (`blocks.Block`,
# `RLConfig`); the rules below are the ones that join two blocks (the task and its files, the paged
# engine and the prompt buckets). `validate` raises ConfigError with the key, the bad value and what is valid.


def _fail(key: str, value, what: str):
    raise ConfigError(f"{key}={value!r}: {what}")


def _check_known_keys(config) -> None:
    """A key no block declares (a typo in a config file) is an error, not silently ignored."""
    known = {k for k, _, _ in all_keys()}
    unknown = sorted(set(flat_keys(config)) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; `--help` lists every key")


def _check_across(config, typed: dict) -> list[str]:
    """The rules joining two blocks: every broken one, as `KEY=VALUE: what is wrong` lines."""
    data, sampling, train = typed["data"], typed["sampling"], typed["train"]
    errors = []

    def fail(key, value, what):
        errors.append(f"{key}={value!r}: {what}")

    if sampling.engine == "paged" and any(b % sampling.page_size for b in data.prompt_buckets):
        fail(
            "data.prompt_buckets",
            data.prompt_buckets,
            f"with sampling.engine=paged every bucket must be a "
            f"multiple of sampling.page_size={sampling.page_size} (or change the page size)",
        )
    if train.partial_rollouts and sampling.engine != "paged":
        fail(
            "train.partial_rollouts",
            True,
            f"needs the paged sampler (a session whose rows outlive a step), not sampling.engine="
            f"{sampling.engine}: set --config.sampling.engine=paged",
        )
    if train.partial_rollouts and train.off_policy_steps:
        fail(
            "train.off_policy_steps",
            train.off_policy_steps,
            "train.partial_rollouts runs in the synchronous loop for now (its carried rows are already "
            "up to train.max_staleness steps old): set --config.train.off_policy_steps=0",
        )
    turns = typed["env"].turns
    if turns > 1 and train.partial_rollouts:
        fail(
            "env.max_turns",
            turns,
            "multi-turn episodes do not run with train.partial_rollouts yet: set env.max_turns=1",
        )
    if data.task == "problems":
        if not data.train_files:
            fail("data.train_files", (), "data.task=problems needs problem files: --config.data.train_files=FILE.jsonl")
        if not (typed["tokenizer"].path or typed["model"].path):
            fail(
                "tokenizer.path",
                "",
                "set --config.model.path=DIR (a Hugging Face checkpoint folder; its tokenizer is used) "
                "or --config.tokenizer.path",
            )
        if train.warm_start_steps:
            fail(
                "train.warm_start_steps",
                train.warm_start_steps,
                "only for data.task=demo: set --config.train.warm_start_steps=0 "
                "(configs/problems.py, the config for your own model and problems, has it off)",
            )
    return errors


def validate(config) -> dict:
    """Raise ConfigError on bad values (every bad block value, or every broken rule across
    blocks, one line each); returns the typed blocks (`config.blocks`)."""
    seed = get(config, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        _fail("seed", seed, "must be an int >= 0")
    migrate(config)
    _check_known_keys(config)
    typed = blocks(config)
    errors = _check_across(config, typed)
    if errors:
        raise ConfigError("\n".join(errors))
    return typed
