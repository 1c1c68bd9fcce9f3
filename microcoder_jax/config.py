"""The configuration of a training or evaluation run: every default in one place.

`default_config()` returns an `ml_collections.ConfigDict`; the files in `configs/` start from it and
change what their setting needs. `load_config(path, overrides)` reads a config file and applies
command-line overrides (`--config.rl.rho=0.2`); an unknown key is an error that lists the valid ones.

| key | default | meaning |
|---|---|---|
| seed | 0 | seeds model init, data order, sampling and the rho uniforms |
| model.path | "" | Hugging Face checkpoint directory (config.json + safetensors); empty = random init from `model.preset` |
| model.preset | "tiny" | `models.presets.PRESETS` name used when `model.path` is empty |
| model.vocab_size ... model.head_dim | None | shape overrides on the preset (None = keep); vocab None = tokenizer's size for random inits |
| model.dtype / model.param_dtype | bfloat16 / float32 | compute dtype / master-weight dtype |
| model.remat | full | rematerialisation policy of the layer scan (none, full, dots, dots_saveable) |
| model.attention | auto | attention kernel: auto, xla, cudnn, splash |
| tokenizer.path | "" | tokenizer directory; empty = `model.path` (the demo builds its own) |
| data.task | problems | `problems` (files below) or `demo` (the bundled synthetic task) |
| data.train_files | () | problem files (JSONL/Parquet: LiveCodeBench, APPS/TACO or our rows): paths or glob patterns ("data/train-*.jsonl"): a tuple, or a comma-separated string on the command line |
| data.num_prompts | 64 | prompts per rollout batch (global, over all hosts) |
| data.max_prompt_tokens | 1024 | longer prompts are skipped (counted) instead of truncated |
| data.prompt_buckets | (256, 512, 1024) | static prompt lengths; a prompt is left-padded to the smallest that fits |
| data.enable_thinking | False | Qwen3 chat template thinking switch |
| data.instruction_stdin / data.instruction_call | see below | instruction appended to the statement |
| sampling.group_size | 8 | G: responses per prompt |
| sampling.max_new_tokens | 4096 | response cap in training (static shape) |
| sampling.top_p / top_k | 1.0 / 0 | nucleus / top-k filter (1.0 / 0 = off) |
| sampling.decode_phases | 4 | decode loop stages with growing KV caches (1 = one loop over all slots) |
| temperature.policy | constant | constant, staged (`schedule`) or diversity (`stages`, `signal`, band, window) |
| temperature.temperature | 1.2 | start temperature; the scheduler moves it only in stages |
| rl.preset | microcoder | algorithm preset: microcoder, grpo, dapo (`rl.presets`) |
| rl.learning_rate / warmup_steps / decay | 1e-6 / 10 / constant | AdamW schedule, in rollout steps |
| rl.num_minibatches / micro_batch_size | 4 / 8 | updates per rollout batch / rows per forward-backward |
| rl.* (other) | None | any `RLConfig` field (rho, eps_low, truncation, ...); None = the preset's value |
| evaluator.workers | 0 | judge processes (0 = number of CPU cores) |
| evaluator.timeout | 6.0 | CPU seconds per test |
| evaluator.memory_mb | 1024 | address-space limit per program |
| evaluator.reward | all | `all` (1 iff every test passes) or `fraction` |
| train.steps | 300 | RL steps (rollout batches) |
| train.checkpoint_every / keep_checkpoints | 10 / 3 | checkpoint interval and how many to keep |
| train.async_checkpoint | True | write checkpoints in the background |
| train.eval_every | 50 | evaluate every N steps (0 = never) |
| train.warm_start_steps | 0 | supervised warm-start steps before RL (the demo uses it) |
| train.allow_config_change | False | resume although algorithm keys differ from the run's config.json (logged there; shape changes are always refused) |
| eval.files | () | evaluation problem files (paths or glob patterns, like data.train_files) |
| eval.max_new_tokens | 8192 | response cap in evaluation |
| eval.samples / temperature / top_p | 1 / 0.6 / 0.95 | samples per problem (pass@k needs k <= samples) and sampling |
| eval.max_problems | 0 | cap on evaluated problems (0 = all) |
| eval.date_from / date_to | "" | contest-date window (ISO dates, inclusive) |
| mesh.data / fsdp / tensor | 1 / -1 / 1 | device mesh (-1 = all remaining devices) |
| distributed.initialize | auto | multi-host JAX: `auto` (join a cluster JAX can detect, e.g. a TPU pod slice, or the one the keys below name; skip on a single process / CPU without a coordinator), `always`, `never` |
| distributed.coordinator_address | None | `host:port` of process 0 (None = autodetect) |
| distributed.num_processes / process_id | None / None | process count and this process's index (None = autodetect) |
| demo.* | | the synthetic task: operations, problems, warm start |
"""
from __future__ import annotations

import ast
import importlib.util
import os
from typing import Any, Sequence

import ml_collections

INSTRUCTION_STDIN = (
    "Write a Python 3 program that solves the problem. It reads from standard input and writes to "
    "standard output. Answer with exactly one fenced code block: ```python ... ```."
)
INSTRUCTION_CALL = (
    "Complete the starter code below in Python 3. Answer with exactly one fenced code block: "
    "```python ... ``` containing the full solution."
)


class ConfigError(ValueError):
    """A bad config file or override (the message says what is valid)."""


def default_config() -> ml_collections.ConfigDict:
    """Every knob of the project with its default (the paper's setting where it states one)."""
    c = ml_collections.ConfigDict()
    c.seed = 0  # seeds model init, data order, sampling keys and the truncation-mask uniforms

    c.model = ml_collections.ConfigDict()
    c.model.path = ""  # HF checkpoint dir (config.json + *.safetensors); "" = random init
    c.model.preset = "tiny"  # models.presets.PRESETS name for a random init when path is ""
    c.model.vocab_size = None  # shape overrides (None = preset / checkpoint value) ...
    c.model.hidden_size = None  # ... vocab None on a random init = the tokenizer's vocab size
    c.model.intermediate_size = None
    c.model.num_layers = None
    c.model.num_heads = None
    c.model.num_kv_heads = None
    c.model.head_dim = None
    c.model.dtype = "bfloat16"  # activation / matmul dtype
    c.model.param_dtype = "float32"  # master weights (and optimizer state) dtype
    c.model.remat = "full"  # layer rematerialisation: none | full | dots | dots_saveable
    c.model.attention = "auto"  # auto | xla | cudnn | splash

    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.path = ""  # "" = model.path (the demo builds and saves its own)

    c.data = ml_collections.ConfigDict()
    c.data.task = "problems"  # problems | demo
    c.data.train_files = ()  # problem files (JSONL / JSON / Parquet, any supported row format):
    #   paths or glob patterns ("data/train-*.jsonl"); on the command line also "a.jsonl,b-*.jsonl"
    c.data.num_prompts = 64  # prompts per rollout batch, global over hosts (paper: 64)
    c.data.max_prompt_tokens = 1024  # longer prompts are skipped and counted, never truncated
    c.data.prompt_buckets = (256, 512, 1024)  # static padded prompt lengths (no recompiles)
    c.data.enable_thinking = False  # Qwen3 chat template: thinking block on or off
    c.data.instruction_stdin = INSTRUCTION_STDIN  # appended to stdin problems' statements
    c.data.instruction_call = INSTRUCTION_CALL  # appended to call-based ones (then starter code)

    c.sampling = ml_collections.ConfigDict()
    c.sampling.group_size = 8  # G responses per prompt
    c.sampling.max_new_tokens = 4096  # training response cap (paper: 4K); static shape
    c.sampling.top_p = 1.0  # 1.0 = off
    c.sampling.top_k = 0  # 0 = off
    c.sampling.decode_phases = 4  # decode stages whose caches grow to max_new: steps read ~the filled slots

    # The temperature scheduler (sampling.temperature.TemperatureScheduler) receives this block.
    c.temperature = ml_collections.ConfigDict()
    c.temperature.policy = "constant"  # constant | staged | diversity
    c.temperature.temperature = 1.2  # start temperature (paper: 1.2 is stable for Qwen3)
    c.temperature.schedule = ()  # staged: ((step, temperature), ...), e.g. ((0, 0.6), (140, 1.8))
    c.temperature.stages = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8)  # diversity: the allowed ladder
    c.temperature.signal = "group_distinct_4"  # diversity: the diversity metric that drives it
    c.temperature.target_low = 0.55  # diversity: target band of the signal ...
    c.temperature.target_high = 0.75  # ... up below it on a falling trend, down on swings above
    c.temperature.window = 10  # diversity: steps a trend / swing is measured over
    c.temperature.min_interval = 20  # diversity: fewest steps between two changes
    c.temperature.min_slope = 0.0  # diversity: "up" needs a slope below -min_slope
    c.temperature.swing_std = 0.08  # diversity: "down" needs the window's std above this
    c.temperature.probe = True  # diversity: probe the stages on the first batch's prompts

    c.rl = ml_collections.ConfigDict()
    c.rl.preset = "microcoder"  # microcoder | grpo | dapo (rl.presets.PRESETS)
    # Every other key is an RLConfig field; None keeps the preset's (or RLConfig's) value.
    # group_size, prompts_per_batch and total_steps come from sampling / data / train.
    c.rl.learning_rate = 1e-6  # AdamW peak learning rate
    c.rl.warmup_steps = 10  # linear warmup, in rollout steps
    c.rl.decay = "constant"  # constant | linear | cosine (to end_lr_ratio at train.steps)
    c.rl.end_lr_ratio = None  # final / peak learning rate of the decay
    c.rl.weight_decay = None  # AdamW weight decay (RLConfig: 0.01)
    c.rl.b1 = None  # Adam betas / eps (0.9, 0.999, 1e-8)
    c.rl.b2 = None
    c.rl.adam_eps = None
    c.rl.grad_clip = None  # global-norm clip (1.0)
    c.rl.num_minibatches = 4  # optimizer updates per rollout batch (off-policy degree)
    c.rl.micro_batch_size = 8  # rows per forward/backward pass (gradient accumulation)
    c.rl.logprob_chunk = None  # sequence positions per chunk of the vocab projection (512)
    c.rl.adv_std = None  # group | batch | none (Dr.GRPO)
    c.rl.adv_eps = None  # added to the std
    c.rl.truncation = None  # conditional | none | mask_all | overlong_filter | soft_overlong
    c.rl.non_incorrect = None  # conditional: passed | not_judged_wrong
    c.rl.repeat_m = None  # conditional: repetition window m in tokens (128)
    c.rl.rho = None  # conditional: probability of masking a qualifying truncated response (0.1)
    c.rl.soft_overlong_cache = None  # soft_overlong: L_cache tokens of linear penalty (1024)
    c.rl.eps_low = None  # clip range below 1 (0.2)
    c.rl.eps_high = None  # clip range above 1 (0.28 clip-higher; grpo 0.2)
    c.rl.dual_clip = None  # dual-clip constant c > 1 for negative advantages (None = off)
    c.rl.kl_beta = None  # k3 KL weight; > 0 keeps a frozen reference model (grpo: 0.001)
    c.rl.aggregation = None  # token_mean | seq_mean_token_mean | constant
    c.rl.loss_constant = None  # constant aggregation: the normaliser (None = token width S)
    c.rl.dynamic_sampling = None  # DAPO: drop groups with all-equal rewards and refill
    c.rl.max_refills = None  # DAPO: extra generation batches per step before topping up

    c.evaluator = ml_collections.ConfigDict()
    c.evaluator.workers = 0  # judge processes; 0 = os.cpu_count()
    c.evaluator.timeout = 6.0  # CPU seconds per test
    c.evaluator.memory_mb = 1024  # address-space limit per program
    c.evaluator.reward = "all"  # all (1 iff every test passes) | fraction (tests passed / total)

    c.train = ml_collections.ConfigDict()
    c.train.steps = 300  # RL steps (one rollout batch each)
    c.train.checkpoint_every = 10  # steps between checkpoints (0 = only at the end)
    c.train.keep_checkpoints = 3  # newest N checkpoints kept
    c.train.async_checkpoint = True  # write checkpoints in the background
    c.train.eval_every = 50  # steps between evaluations (0 = never)
    c.train.warm_start_steps = 0  # supervised next-token steps before RL (demo task only)
    c.train.progress = True  # tqdm progress bar
    c.train.allow_config_change = False  # resume with changed algorithm keys (logged; shapes never)

    c.eval = ml_collections.ConfigDict()
    c.eval.files = ()  # evaluation problem files (LiveCodeBench format or ours); globs as above
    c.eval.max_new_tokens = 8192  # evaluation response cap (paper: 8K)
    c.eval.samples = 1  # samples per problem; pass@k for every k <= samples
    c.eval.temperature = 0.6  # Qwen3's recommended evaluation sampling
    c.eval.top_p = 0.95
    c.eval.batch_problems = 16  # problems per sampler call
    c.eval.max_problems = 0  # 0 = all
    c.eval.date_from = ""  # contest-date window, ISO dates, inclusive ("" = open)
    c.eval.date_to = ""

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = 1
    c.mesh.fsdp = -1  # -1 = all remaining devices
    c.mesh.tensor = 1

    # Multi-host JAX (`jax.distributed.initialize`), done first thing by train.main / eval.main.
    c.distributed = ml_collections.ConfigDict()
    c.distributed.initialize = "auto"  # auto: initialize on a cluster JAX detects (TPU pod: no args
    #   needed) or when the keys below are set; skip on one process / CPU without a coordinator.
    #   always: initialize (errors if nothing is found) | never: single process
    c.distributed.coordinator_address = None  # "host:port" of process 0; None = autodetect
    c.distributed.num_processes = None  # None = autodetect; 1 = single process
    c.distributed.process_id = None  # this process's index; None = autodetect

    c.demo = ml_collections.ConfigDict()
    c.demo.ops = ("sum", "difference", "product", "maximum", "minimum")  # the task's operations
    c.demo.problems_per_op = 8  # synthetic problems per operation (different tests each)
    c.demo.phrasings = 1  # statement variants per operation (1: one template, only the op word differs)
    c.demo.tests_per_problem = 3  # stdin tests per problem
    c.demo.vocab_size = 384  # BPE vocabulary trained on the task text
    c.demo.warm_start_lr = 3e-3
    c.demo.warm_start_batch = 32
    return c


def demo_config() -> ml_collections.ConfigDict:
    """The embedded default: a tiny Qwen3 learning the synthetic task on a CPU in minutes."""
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


def paper_config() -> ml_collections.ConfigDict:
    """The paper's training setting (MICROCODER.md): 64 prompts x G=8 per rollout batch, 4K
    response tokens in training, temperature 1.2, evaluation at 8K; MicroCoder-GRPO. The
    `configs/qwen3_*` files start here and change the model size's memory knob or the rl block."""
    c = default_config()
    # Model: the released checkpoint (config.json + safetensors + tokenizer) in model.path.
    c.model.path = ""  # set on the command line: --config.model.path=DIR
    c.model.dtype = "bfloat16"  # compute dtype; params and Adam moments stay float32
    c.model.remat = "full"  # rematerialise each layer: 4K-token responses fit in memory
    # Data: problem files in LiveCodeBench / APPS / our schema (e.g. the dataset pipeline's shards).
    c.data.train_files = ()  # --config.data.train_files="train-*.jsonl" (globs, commas)
    c.data.num_prompts = 64  # paper: 64 prompts per rollout batch (beat 32 and 128)
    c.data.prompt_buckets = (256, 512, 1024, 2048)
    c.data.max_prompt_tokens = 2048
    c.data.enable_thinking = False  # thinking off: answers fit the 4K training budget
    # Sampling: G responses per prompt, trained at 4K response tokens.
    c.sampling.group_size = 8
    c.sampling.max_new_tokens = 4096
    # Temperature: constant 1.2, the paper's stable setting for Qwen3.
    c.temperature.policy = "constant"
    c.temperature.temperature = 1.2
    # Algorithm: the only block that differs between the _microcoder, _grpo and _dapo files.
    c.rl.preset = "microcoder"  # the _grpo and _dapo files change this block only
    c.rl.learning_rate = 1e-6
    c.rl.warmup_steps = 10
    c.rl.decay = "constant"
    c.rl.num_minibatches = 4  # 4 optimizer updates per rollout batch (16 prompts x 8 each)
    c.rl.micro_batch_size = 8  # rows per forward/backward; lower it if memory runs out
    # Judge and schedule.
    c.evaluator.workers = 0  # all cores
    c.evaluator.timeout = 6.0
    c.train.steps = 300
    c.train.checkpoint_every = 10
    c.train.keep_checkpoints = 3
    c.train.eval_every = 50
    # Evaluation: LiveCodeBench at 8K response tokens.
    c.eval.max_new_tokens = 8192
    c.eval.samples = 1
    c.eval.temperature = 0.6
    c.eval.top_p = 0.95
    c.mesh.fsdp = -1  # FSDP over every device
    return c


def load_config(path: str | None = None, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """Read `get_config()` from a config file (None = the demo) and apply `key=value` overrides."""
    if path:
        spec = importlib.util.spec_from_file_location("_microcoder_config", path)
        if spec is None or spec.loader is None:
            raise FileNotFoundError(f"cannot read config file {path!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = module.get_config()
    else:
        config = demo_config()
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"config override {item!r} must look like key=value")
        set_value(config, key, value)
    return config


def set_value(config: ml_collections.ConfigDict, key: str, text: str) -> None:
    """Set `config.<key>` from its command-line text; unknown keys list every valid key."""
    node, parts = config, key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            valid = "\n  ".join(flat_keys(config))
            raise ConfigError(f"unknown config key {key!r}. Valid keys:\n  {valid}")
        if depth < len(parts) - 1:
            node = node[part]
    old = node[parts[-1]]
    if isinstance(old, ml_collections.ConfigDict):
        raise ConfigError(f"config key {key!r} is a group; set one of its keys")
    with node.unlocked():
        node[parts[-1]] = parse_value(text, old)


def parse_value(text: str, old: Any) -> Any:
    """Parse command-line text as the type of the value it replaces (literals for None)."""
    if isinstance(old, bool):
        lowered = text.strip().lower()
        if lowered not in ("true", "false", "1", "0"):
            raise ValueError(f"expected a boolean, got {text!r}")
        return lowered in ("true", "1")
    if isinstance(old, str):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if old is None:
            return text  # a bare word for a None-default key (e.g. --config.rl.decay=cosine)
        if isinstance(old, (tuple, list)):  # bare comma-separated words: --config.data.train_files=a*.jsonl,b
            return tuple(part.strip() for part in text.split(",") if part.strip())
        raise ValueError(f"cannot parse {text!r} as {type(old).__name__}") from None
    if isinstance(old, float) and isinstance(value, int):
        return float(value)
    if isinstance(old, (tuple, list)):
        value = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if old is not None and not isinstance(value, type(old)):
        raise ValueError(f"expected {type(old).__name__}, got {text!r}")
    return value


def flat_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """All leaf keys as dotted paths, sorted."""
    keys = []
    for name, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            keys += flat_keys(value, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return sorted(keys)


def rl_overrides(config: ml_collections.ConfigDict) -> dict:
    """The `rl` block as make_rl_config overrides (set keys except the preset), plus the batch shape."""
    out = {k: v for k, v in config.rl.items() if k != "preset" and v is not None}
    out.update(group_size=config.sampling.group_size, prompts_per_batch=config.data.num_prompts,
               total_steps=config.train.steps)
    return out


def make_rl_config(config: ml_collections.ConfigDict):
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


def config_dir() -> str:
    """The repository's `configs/` directory (for tests and docs; not installed with the package)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
