"""The loop's blocks: `TrainConfig` (`train.*`: steps, checkpoints, schedule, and how rollouts are
scheduled against the learner), `EvalConfig` (`eval.*`) and `WandbConfig` (`wandb.*`, used by
trainer/wandb_writer.py). The algorithm's own knobs are `rl.*` (rl/config.py)."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import os

from microcoder_jax.blocks import Block, knob


@dataclasses.dataclass(frozen=True)
class TrainConfig(Block):
    PREFIX = "train"

    steps: int = knob(300, "RL steps (one rollout batch each)", at_least=0)
    checkpoint_every: int = knob(10, "steps between checkpoints (0 = only at the end)", at_least=0)
    keep_checkpoints: int = knob(3, "newest N checkpoints kept", at_least=1)
    async_checkpoint: bool = knob(True, "write checkpoints in the background")
    max_nonfinite_steps: int = knob(
        3,
        "stop after this many consecutive steps with a skipped non-finite "
        "update (loss, gradient or update NaN/Inf; params kept as they were)",
        at_least=1,
    )
    # How rollouts are scheduled against the learner. k = off_policy_steps (trainer/pipeline.py): 0
    # samples each batch with the params that train on it; k >= 1 samples while the learner trains,
    # with weights up to k updates old (rl.is_correction=auto then weighs the stale sampler: tis).
    off_policy_steps: int = knob(
        0,
        "k: batches sampled ahead in a background thread with weights at most k "
        "updates old (0 = synchronous; k >= 1 wants rl.is_correction=tis, which auto picks; multi-host: made "
        "in the learner's thread, no overlap)",
        at_least=0,
    )
    # Partial rollouts (trainer/partial.py): one paged session runs across steps; a batch is the
    # first groups to finish, rows still decoding continue under the next weights (KV recomputed).
    partial_rollouts: bool = knob(
        False,
        "keep the paged sampler's slots full across steps: a batch is the first data.num_prompts "
        "groups to finish; unfinished rows continue with the next weights (needs sampling.engine=paged)",
    )
    partial_recompute: bool = knob(
        True,
        "partial rollouts: after a weight update the rows still decoding prefill their prompt and "
        "tokens again with the new weights (False: they keep the KV the older weights wrote; "
        "docs/experiments.md 'Stale rollouts' compares both)",
    )
    max_staleness: int = knob(
        4,
        "partial rollouts: a group with a token drawn more than this many steps before it trains is dropped",
        at_least=1,
    )
    max_refills: int = knob(
        10, "rl.dynamic_sampling (DAPO): extra generation batches per step before topping up", at_least=0
    )
    eval_every: int = knob(50, "steps between evaluations (0 = never)", at_least=0)
    eval_at_start: bool = knob(False, "also evaluate the starting params before RL step 1 (eval/step_0.json)")
    warm_start_steps: int = knob(0, "supervised next-token steps before RL (demo task only)", at_least=0)
    progress: bool = knob(True, "tqdm progress bar on a terminal")
    log_every: int = knob(
        1,
        "a plain log line (step, reward, pass rate, length, truncation, temperature, seconds) every N steps "
        "instead of the progress bar when stdout or stderr is not a terminal, or progress=False (0 = never)",
        at_least=0,
    )
    tensorboard: bool = knob(
        True,
        "TensorBoard event files in WORKDIR/tensorboard (view: pip install tensorboard; "
        "tensorboard --logdir WORKDIR/tensorboard)",
    )
    ignore_memory_check: bool = knob(
        False,
        "start on a CPU although the memory estimate before the first step (the planner's model of one "
        "step) exceeds the memory available",
    )
    allow_config_change: bool = knob(
        False,
        "resume although algorithm keys differ from the run's config.json "
        "(logged in its history; shape changes are always refused)",
    )
    compile_cache: str = knob(
        "{workdir}/compile_cache",
        "JAX persistent compilation cache: a restart loads "
        "compiled programs instead of compiling ({workdir} = the run's workdir; '' = off; "
        "several hosts: JAX writes from process 0 only, so use a path every host reads)",
    )
    save_rollouts: tuple = knob(
        (),
        "steps (as in metrics.jsonl) whose rollout batch and starting state are saved "
        "under WORKDIR/rollouts for `python -m microcoder_jax.replay`",
    )
    save_rollouts_every: int = knob(
        0, "also save every N-th step's rollout for replay (0 = only save_rollouts)", at_least=0
    )

    def check(self) -> None:
        from microcoder_jax.trainer.compile_cache import template_error

        error = template_error(self.compile_cache)
        if error:
            self.fail("compile_cache", self.compile_cache, error)
        for step in self.save_rollouts:
            if isinstance(step, bool) or not isinstance(step, int) or step < 1:
                self.fail("save_rollouts", self.save_rollouts, "expected steps, ints >= 1, e.g. (1, 120)")
        beyond = sorted(step for step in self.save_rollouts if step > self.steps)
        if beyond:  # accepted, these would save nothing
            self.fail(
                "save_rollouts",
                self.save_rollouts,
                f"step{'s' if len(beyond) > 1 else ''} {', '.join(map(str, beyond))} beyond train.steps={self.steps} "
                f"would never be saved; use steps 1..{self.steps} or raise train.steps",
            )


@dataclasses.dataclass(frozen=True)
class EvalConfig(Block):
    PREFIX = "eval"

    files: tuple = knob((), "evaluation problem files (paths or globs, like data.train_files)", path="files")
    max_new_tokens: int = knob(8192, "evaluation response cap (paper: 8K)", at_least=1)
    samples: int = knob(1, "samples per problem; pass@k for every k <= samples", at_least=1)
    temperature: float = knob(0.6, "evaluation sampling temperature (Qwen3's recommendation)", at_least=0.0)
    top_p: float = knob(0.95, "evaluation nucleus filter", probability=True)
    greedy: bool = knob(False, "also decode one greedy answer (T = 0) per problem: greedy pass@1 (eval_greedy_pass@1)")
    batch_problems: int = knob(16, "problems per sampler call (one compiled shape)", at_least=1)
    max_problems: int = knob(0, "cap on evaluated problems (0 = all)", at_least=0)
    date_from: str = knob("", "contest-date window start, ISO date, inclusive ('' = open)")
    date_to: str = knob("", "contest-date window end, ISO date, inclusive ('' = open)")

    def check(self) -> None:
        for name in ("date_from", "date_to"):
            value = getattr(self, name)
            if value:
                try:
                    datetime.date.fromisoformat(value)
                except ValueError:
                    self.fail(name, value, "expected an ISO date (YYYY-MM-DD) or ''")


MODES = ("disabled", "online", "offline")


@dataclasses.dataclass(frozen=True)
class WandbConfig(Block):
    PREFIX = "wandb"

    mode: str = knob(
        "disabled",
        "Weights & Biases: disabled (never imported), online, or offline (a local "
        "run for `wandb sync`); needs pip install 'microcoder_jax[wandb]'",
        choices=MODES,
    )
    project: str = knob("microcoder_jax", "W&B project")
    entity: str = knob("", "W&B entity, a team or user ('' = your default)")
    name: str = knob("", "W&B run name ('' = the workdir's name)")
    group: str = knob("", "W&B run group, e.g. one sweep ('' = none)")
    tags: tuple = knob((), "W&B run tags")
    notes: str = knob("", "W&B run notes")
    dir: str = knob("", "where wandb keeps its files, under DIR/wandb ('' = the workdir)")

    def check(self) -> None:
        if self.mode != "disabled" and importlib.util.find_spec("wandb") is None:
            self.fail("mode", self.mode, "wandb is not installed: pip install 'microcoder_jax[wandb]'")
        if not self.project.strip():
            self.fail("project", self.project, "a W&B project name is required")
        for tag in self.tags:
            if not isinstance(tag, str) or not tag.strip() or len(tag) > 64:
                self.fail("tags", self.tags, "every tag must be a non-empty string of at most 64 characters")
        if self.dir and not os.path.isdir(self.dir):
            self.fail("dir", self.dir, "no such directory")
