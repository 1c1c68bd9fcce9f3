"""The configuration of a run: every knob, its default and its meaning in one table (`KEYS`).

`default_config()` builds an `ml_collections.ConfigDict` from the table; `demo_config()` is the
bundled demo; `configs/*.py` files return one from `get_config(arg)`. The `rl` block is made from
`RLConfig`'s fields (its defaults, its types): a key a preset sets is None there (= the preset's
value). The temperature scheduler reads its defaults from the `temperature` block.
`config_check.validate(config)` checks every value (type, range, choices, existing paths) and
raises `ConfigError` naming the key and what is valid; `describe(config)` is what `--help` prints.
Command lines are parsed by `microcoder_jax.cli` (ml_collections `config_flags`).
"""
from __future__ import annotations

import dataclasses
import typing

import ml_collections
from ml_collections import config_dict

from microcoder_jax.rl.config import RLConfig

INSTRUCTION_STDIN = (
    "Write a Python 3 program that solves the problem. It reads from standard input and writes to "
    "standard output. Answer with exactly one fenced code block: ```python ... ```."
)
INSTRUCTION_CALL = (
    "Complete the starter code below in Python 3. Answer with exactly one fenced code block: "
    "```python ... ``` containing the full solution."
)
_INT, _STR = int, str  # a type as the default: None, of that type (a typed placeholder)

# (key, default, meaning). A type as the default means None of that type.
KEYS: tuple[tuple[str, object, str], ...] = (
    ("seed", 0, "seeds model init, data order, sampling keys and the truncation-mask uniforms"),
    ("model.path", "", "HF checkpoint dir (config.json + *.safetensors); '' = random init from model.preset"),
    ("model.preset", "tiny", "shape when model.path is '': qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-4b-instruct-2507, qwen3-8b, qwen3-14b, qwen3-32b, tiny"),
    ("model.vocab_size", _INT, "shape override (None = preset/checkpoint; a random init takes the tokenizer's)"),
    ("model.hidden_size", _INT, "shape override (None = preset / checkpoint value)"),
    ("model.intermediate_size", _INT, "shape override (None = preset / checkpoint value)"),
    ("model.num_layers", _INT, "shape override (None = preset / checkpoint value)"),
    ("model.num_heads", _INT, "shape override (None = preset / checkpoint value)"),
    ("model.num_kv_heads", _INT, "shape override (None = preset / checkpoint value)"),
    ("model.head_dim", _INT, "shape override (None = preset / checkpoint value)"),
    ("model.dtype", "bfloat16", "compute dtype: bfloat16, float32, float16 (softmax and norms always float32)"),
    ("model.param_dtype", "float32", "master weights and optimizer state dtype"),
    ("model.remat", "full", "layer rematerialisation: none, full, dots, dots_saveable"),
    ("model.attention", "auto", "attention: auto (TPU: Pallas flash, GPU: cuDNN for bf16, else XLA), xla, cudnn, splash"),
    ("tokenizer.path", "", "tokenizer dir; '' = model.path (the demo builds and saves its own)"),
    ("data.task", "problems", "problems (data.train_files) or demo (the bundled synthetic task)"),
    ("data.train_files", (), "problem files (JSONL/JSON/Parquet: LiveCodeBench, APPS/TACO or ours): "
                             "paths or globs; 'a.jsonl,b-*.jsonl' on the command line"),
    ("data.num_prompts", 64, "prompts per rollout batch, global over hosts (paper: 64)"),
    ("data.max_prompt_tokens", 1024, "longer prompts are skipped and counted, never truncated"),
    ("data.prompt_buckets", (256, 512, 1024), "static padded prompt lengths, the smallest that fits (a new length never compiles a new program)"),
    ("data.enable_thinking", False, "Qwen3 chat template thinking switch"),
    ("data.instruction_stdin", INSTRUCTION_STDIN, "appended to stdin problems' statements"),
    ("data.instruction_call", INSTRUCTION_CALL, "appended to call-based ones (then the starter code)"),
    ("sampling.group_size", 8, "G: responses per prompt"),
    ("sampling.max_new_tokens", 4096, "training response cap (paper: 4K); static shape"),
    ("sampling.top_p", 1.0, "nucleus filter (1.0 = off)"),
    ("sampling.top_k", 0, "top-k filter (0 = off)"),
    ("sampling.engine", "static", "static: one batch of all rows over a dense cache (the default); paged: "
     "continuous batching of sampling.slots sequences over a paged KV cache, refilled as rows finish"),
    ("sampling.slots", 0, "paged: sequences decoded at once (0 = every row, up to 256)"),
    ("sampling.page_size", 16, "paged: KV-cache slots per page (prompt buckets must be multiples of it)"),
    ("sampling.refill_every", 4, "paged: decode steps between refills of finished slots"),
    ("sampling.decode_tensor", 0, "paged: chips the sampler splits KV heads and weights over (the rest split "
     "the slots); 0 = the training mesh, -1 = as many as the KV heads allow"),
    ("sampling.decode_phases", 4, "decode stages whose KV caches grow to max_new_tokens, so a step reads about the filled slots (1 = one loop; each stage compiles its own body)"),
    ("temperature.policy", "constant", "constant, staged (schedule) or diversity (stages, signal, band)"),
    ("temperature.temperature", 1.2, "start temperature (paper: 1.2 is stable for Qwen3)"),
    ("temperature.schedule", (), "staged: ((step, temperature), ...), e.g. ((0, 0.6), (140, 1.8))"),
    ("temperature.stages", (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8), "diversity: the allowed ladder, ascending"),
    ("temperature.signal", "group_distinct_4", "diversity: the metric that drives it (any key of sampling.diversity.diversity_metrics)"),
    ("temperature.target_low", 0.55, "diversity: up a stage below this on a falling trend"),
    ("temperature.target_high", 0.75, "diversity: down a stage on swings above this"),
    ("temperature.window", 10, "diversity: steps a trend / swing is measured over"),
    ("temperature.min_interval", 20, "diversity: fewest steps between two changes"),
    ("temperature.min_slope", 0.0, "diversity: 'up' needs a slope below -min_slope"),
    ("temperature.swing_std", 0.08, "diversity: 'down' needs the window's std above this"),
    ("temperature.probe", True, "diversity: probe the ladder on the first batch's prompts and start at the lowest stage in the band"),
    ("rl.preset", "microcoder", "algorithm preset: microcoder, grpo, dapo (rl.presets.PRESETS)"),
    ("evaluator.workers", 0, "judge processes (0 = number of CPU cores)"),
    ("evaluator.timeout", 6.0, "CPU seconds per test (wall-clock backstop 3x)"),
    ("evaluator.memory_mb", 1024, "address-space limit per program, MiB"),
    ("evaluator.reward", "all", "all (1 iff every test passes) or fraction (tests passed / total)"),
    ("train.steps", 300, "RL steps (one rollout batch each)"),
    ("train.checkpoint_every", 10, "steps between checkpoints (0 = only at the end)"),
    ("train.keep_checkpoints", 3, "newest N checkpoints kept"),
    ("train.async_checkpoint", True, "write checkpoints in the background"),
    ("train.eval_every", 50, "steps between evaluations (0 = never)"),
    ("train.warm_start_steps", 0, "supervised next-token steps before RL (demo task only)"),
    ("train.progress", True, "tqdm progress bar"),
    ("train.allow_config_change", False, "resume although algorithm keys differ from the run's "
     "config.json (logged in its history; shape changes are always refused)"),
    ("eval.files", (), "evaluation problem files (paths or globs, like data.train_files)"),
    ("eval.max_new_tokens", 8192, "evaluation response cap (paper: 8K)"),
    ("eval.samples", 1, "samples per problem; pass@k for every k <= samples"),
    ("eval.temperature", 0.6, "evaluation sampling temperature (Qwen3's recommendation)"),
    ("eval.top_p", 0.95, "evaluation nucleus filter"),
    ("eval.batch_problems", 16, "problems per sampler call (one compiled shape)"),
    ("eval.max_problems", 0, "cap on evaluated problems (0 = all)"),
    ("eval.date_from", "", "contest-date window start, ISO date, inclusive ('' = open)"),
    ("eval.date_to", "", "contest-date window end, ISO date, inclusive ('' = open)"),
    ("mesh.data", 1, "pure data-parallel axis (-1 = all remaining devices)"),
    ("mesh.fsdp", -1, "FSDP axis: params, grads, optimizer state sharded (-1 = the rest)"),
    ("mesh.tensor", 1, "tensor-parallel axis over heads / MLP / vocab"),
    ("distributed.initialize", "auto", "multi-host JAX: auto (a cluster JAX detects, or the keys below), "
                                       "always, never"),
    ("distributed.coordinator_address", _STR, "host:port of process 0 (None = autodetect)"),
    ("distributed.num_processes", _INT, "process count (None = autodetect; 1 = single process)"),
    ("distributed.process_id", _INT, "this process's index (None = autodetect)"),
    ("demo.ops", ("sum", "difference", "product", "maximum", "minimum"), "the synthetic task's operations"),
    ("demo.problems_per_op", 8, "synthetic problems per operation"),
    ("demo.phrasings", 1, "statement variants per operation"),
    ("demo.tests_per_problem", 3, "stdin tests per problem"),
    ("demo.vocab_size", 384, "BPE vocabulary trained on the task text"),
    ("demo.warm_start_lr", 3e-3, "warm-start learning rate"),
    ("demo.warm_start_batch", 32, "warm-start rows per step"),
)

# RLConfig fields the run fills in from other blocks, and what each remaining field means.
RL_FROM_RUN = {"group_size": "sampling.group_size", "prompts_per_batch": "data.num_prompts",
               "total_steps": "train.steps"}
RL_MEANINGS = {
    "learning_rate": "AdamW peak learning rate", "warmup_steps": "linear warmup, in rollout steps",
    "decay": "constant, linear or cosine (to end_lr_ratio at train.steps)",
    "end_lr_ratio": "final / peak learning rate of the decay", "weight_decay": "AdamW weight decay",
    "b1": "Adam beta1", "b2": "Adam beta2", "adam_eps": "Adam epsilon", "grad_clip": "global-norm clip",
    "num_minibatches": "optimizer updates per rollout batch (off-policy degree)",
    "micro_batch_size": "rows per forward/backward (gradient accumulation); lower it if memory runs out",
    "logprob_chunk": "sequence positions per chunk of the vocab projection",
    "adv_std": "advantage std: group, batch or none (Dr.GRPO)", "adv_eps": "added to the std",
    "adv_std_ddof": "1: sample std of the G rewards (verl, TRL); 0: population std",
    "truncation": "conditional, none, mask_all, overlong_filter or soft_overlong",
    "non_incorrect": "conditional: passed or not_judged_wrong",
    "repeat_m": "conditional: repetition window m, tokens",
    "rho": "conditional: probability of masking a qualifying truncated response",
    "soft_overlong_cache": "soft_overlong: L_cache tokens of linear penalty",
    "eps_low": "clip range below 1", "eps_high": "clip range above 1 (clip-higher)",
    "dual_clip": "dual-clip constant c > 1 for negative advantages (None = off)",
    "kl_beta": "k3 KL weight; > 0 keeps a frozen reference model",
    "aggregation": "token_mean, seq_mean_token_mean or constant",
    "loss_constant": "constant aggregation: the normaliser (None = the generation budget max_new_tokens)",
    "dynamic_sampling": "DAPO: drop groups with all-equal rewards and refill",
    "max_refills": "DAPO: extra generation batches per step before topping up",
}


class ConfigError(ValueError):
    """A bad config file, key or value (the message names the key and what is valid)."""


def _rl_keys() -> list[tuple[str, object, str]]:
    """The `rl` block from RLConfig: its defaults, except a None placeholder where a preset sets it."""
    from microcoder_jax.rl.presets import PRESETS

    preset_set = {k for overrides in PRESETS.values() for k in overrides}
    hints = typing.get_type_hints(RLConfig)
    out = []
    for f in dataclasses.fields(RLConfig):
        if f.name in RL_FROM_RUN or f.name == "preset":
            continue
        kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
        meaning = RL_MEANINGS.get(f.name, f"RLConfig.{f.name}")
        if f.name in preset_set:
            out.append((f"rl.{f.name}", kind, f"{meaning} (None = the preset's)"))
        elif f.default is None:
            out.append((f"rl.{f.name}", kind, meaning))
        else:
            out.append((f"rl.{f.name}", f.default, meaning))
    return out


def all_keys() -> list[tuple[str, object, str]]:
    """Every (key, default, meaning), in the order `--help` shows them."""
    keys = list(KEYS)
    at = next(i for i, (k, _, _) in enumerate(keys) if k == "rl.preset") + 1
    return keys[:at] + _rl_keys() + keys[at:]


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
    c.evaluator.workers = 2  # the 2-core target machine
    c.evaluator.timeout = 2.0
    c.evaluator.memory_mb = 512
    c.train.steps = 50  # RL steps
    c.train.checkpoint_every = 10
    c.train.eval_every = 0  # `python -m microcoder_jax.eval --checkpoint WORKDIR` afterwards
    c.train.warm_start_steps = 150  # supervised steps teaching the format (random operations)
    c.eval.max_new_tokens = 40
    c.eval.temperature = 0.0  # greedy
    c.eval.top_p = 1.0
    c.mesh.fsdp = 1  # one device
    return c


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


def rl_overrides(config: ml_collections.ConfigDict) -> dict:
    """The `rl` block as make_rl_config overrides (set keys except the preset), plus the batch shape."""
    out = {k: v for k, v in config.rl.items() if k != "preset" and v is not None}
    out.update({field: get(config, key) for field, key in RL_FROM_RUN.items()})
    return out


def make_rl_config(config: ml_collections.ConfigDict) -> RLConfig:
    """The run's RLConfig: the preset with the config's overrides."""
    from microcoder_jax.rl.presets import make_rl_config as make

    return make(config.rl.preset, **rl_overrides(config))


def to_dict(config: ml_collections.ConfigDict) -> dict:
    """A JSON-ready plain dict of the config (saved beside checkpoints and metrics)."""
    def plain(v):
        if isinstance(v, ml_collections.ConfigDict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v
    return plain(config)


def describe(config: ml_collections.ConfigDict) -> str:
    """One line per key: `key = value  meaning` (what `--help` lists); None rl keys show the preset's."""
    try:
        resolved = dataclasses.asdict(make_rl_config(config))
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
