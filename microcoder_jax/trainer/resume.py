"""Resuming with a changed config: compare it with the run's saved `config.json` before writing.

Three kinds of change. *Fatal* ones change what the checkpoint holds (model shapes, the
vocabulary, the dtype of the master weights, the task the tokenizer was built for): a restore
could only fail or mix two runs, so they are refused with the differing keys listed. *Algorithm*
changes (learning rate, rho, batch sizes, sampling, rewards, data) resume fine but make the run
something else; they need `--config.train.allow_config_change=True` and are logged. *Free*
changes (steps, checkpoint and eval schedules, workers, mesh, evaluation) do not touch the saved
state and are just logged. Every change is appended to the history in `config.json`, whose
entries keep the old values, so the original config can always be rebuilt (`original_config`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any, Callable

from microcoder_jax.config import ConfigError

CONFIG_FILE = "config.json"
HISTORY_KEY = "_history"
ALLOW_KEY = "train.allow_config_change"
_ABSENT = "<absent>"

# Keys whose change makes the saved state unusable: shapes, vocabulary, state dtype.
FATAL_KEYS = frozenset(
    {
        "model.preset",
        "model.vocab_size",
        "model.hidden_size",
        "model.intermediate_size",
        "model.num_layers",
        "model.num_heads",
        "model.num_kv_heads",
        "model.head_dim",
        "model.param_dtype",
        "lora.rank",
        "lora.targets",
        "lora.base_dtype",
        "tokenizer.path",
        "data.task",
        "demo.vocab_size",
    }
)
# Keys (or whole groups, ending in ".") that leave the saved state and the algorithm alone.
FREE_KEYS = (
    "train.steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.async_checkpoint",
    "train.max_nonfinite_steps",
    "train.eval_every",
    "train.progress",
    "train.ignore_memory_check",
    "train.log_every",
    "train.tensorboard",
    ALLOW_KEY,
    "judge.workers",
    "judge.server_retries",
    "model.attention",
    "model.remat",
    "mesh.",
    "distributed.",
    "eval.",
    "train.compile_cache",
    "train.save_rollouts",
    "train.save_rollouts_every",
    "wandb.",
)


class ConfigChangeError(ConfigError):
    """The new config cannot resume the run in its workdir (the message lists the keys)."""


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """{'a.b': value} for every leaf of a nested config dict (the history is left out)."""
    out = {}
    for key, value in config.items():
        if key == HISTORY_KEY:
            continue
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def kind_of(key: str, new: dict[str, Any]) -> str:
    """'fatal', 'algorithm' or 'free' for a changed dotted key (`new`: the flat new config)."""
    if key in FATAL_KEYS:
        return "fatal"
    if key == "train.steps" and new.get("rl.decay", "constant") not in ("constant", None):
        return "algorithm"  # the learning-rate decay is stretched to the new step count
    if any(key == k or (k.endswith(".") and key.startswith(k)) for k in FREE_KEYS):
        return "free"
    return "algorithm"


def check_config(saved: dict, new: dict, allow_change: bool) -> list[dict]:
    """The changes from `saved` to `new` (nested dicts) as [{key, from, to, kind}], sorted by key.

    Raises ConfigChangeError when a fatal key differs, or an algorithm key differs and
    `allow_change` is False; the message lists every such key with both values and the fix.
    """
    import copy

    from microcoder_jax.config import default_config, migrate, to_dict

    saved = copy.deepcopy(saved)
    migrate(saved)  # a run saved before a key moved blocks: its values under today's names
    old_flat, new_flat = flatten(saved), flatten(new)
    defaults = flatten(to_dict(default_config()))
    old_rl, new_rl = effective_rl(saved), effective_rl(new)
    changes = []
    for key in sorted(set(old_flat) | set(new_flat)):
        before, after = old_flat.get(key, _ABSENT), new_flat.get(key, _ABSENT)
        if before is _ABSENT and key in defaults and after == defaults[key]:
            continue  # a knob newer than the run, at its default: the run ran as it says
        if before != after:
            change = {"key": key, "from": before, "to": after, "kind": kind_of(key, new_flat)}
            if key in old_rl and key in new_rl and (before is None or after is None):
                change["effective"] = [old_rl[key], new_rl[key]]  # None: the preset's value, shown
                if old_rl[key] == new_rl[key]:
                    change["kind"] = "free"  # None -> the preset's own value: the run is unchanged
            changes.append(change)
    fatal = [c for c in changes if c["kind"] == "fatal"]
    if fatal:
        raise ConfigChangeError(
            "this config cannot resume the run: the checkpoint was written with other model shapes, "
            f"vocabulary or state dtype:\n{_lines(fatal)}\nUse the run's values, or start a new run "
            "with another --workdir."
        )
    algorithm = [c for c in changes if c["kind"] == "algorithm"]
    if algorithm and not allow_change:
        raise ConfigChangeError(
            f"the config differs from the run's saved config.json in:\n{_lines(algorithm)}\n"
            f"Resume with the saved values, or pass --config.{ALLOW_KEY}=True to continue the run "
            "with the new ones (the change is logged in config.json)."
        )
    return changes


def effective_rl(config: dict) -> dict[str, Any]:
    """{'rl.rho': 0.1, ...}: the run's RL values with the preset resolved (a None key takes the
    preset's value); {} when the config cannot be resolved (a config from another version)."""
    import ml_collections

    from microcoder_jax.config import rl_config_of

    try:
        rl = rl_config_of(ml_collections.ConfigDict({k: v for k, v in config.items() if k != HISTORY_KEY}))
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
    return {f"rl.{k}": list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(rl).items()}


def describe_change(c: dict) -> str:
    """`rl.rho: 0.1 (None: the preset's) -> 0.3`: a None rl key shows the value it resolved to."""

    def side(raw, effective):
        return f"{effective!r} (None: the preset's)" if raw is None and effective is not None else repr(raw)

    before, after = c.get("effective", (c["from"], c["to"]))
    return f"{c['key']}: {side(c['from'], before)} -> {side(c['to'], after)}"


def _lines(changes: list[dict]) -> str:
    return "\n".join(f"  {describe_change(c)}" for c in changes)


def has_checkpoint(directory: str) -> bool:
    """Whether `directory` holds a complete Orbax step (a directory named by its step number)."""
    return os.path.isdir(directory) and any(
        name.isdigit() and os.path.isdir(os.path.join(directory, name)) for name in os.listdir(directory)
    )


def record_config(
    workdir: str,
    config: dict,
    *,
    checkpoint_dir: str | None = None,
    write: bool = True,
    log_fn: Callable[[str], Any] = print,
) -> list[dict]:
    """Check `config` against the workdir's saved one when a checkpoint exists, then save it.

    Call before anything else is written to the workdir. A fresh run (no checkpoint) writes
    `config.json` as is; a resume appends its changes to the history, keeping the old values.
    `write=False` (hosts other than process 0) only checks. Returns the changes.
    """
    path = os.path.join(workdir, CONFIG_FILE)
    checkpoint_dir = checkpoint_dir or os.path.join(workdir, "checkpoints")
    history: list = []
    changes: list[dict] = []
    if has_checkpoint(checkpoint_dir) and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        history = list(saved.get(HISTORY_KEY, []))
        allow = bool(flatten(config).get(ALLOW_KEY, False))
        changes = check_config(saved, config, allow)
        for c in changes:
            log_fn(f"config change on resume ({c['kind']}): {describe_change(c)}")
        if changes:
            history.append(
                {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "changes": changes}
            )
    if write:
        os.makedirs(workdir, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({**config, HISTORY_KEY: history}, f, indent=1)
        os.replace(tmp, path)  # a crash mid-write never leaves half a config.json
    return changes


def original_config(saved: dict) -> dict[str, Any]:
    """The flat config the run started with: the saved one with its history undone, newest first."""
    flat = flatten(saved)
    for entry in reversed(saved.get(HISTORY_KEY, [])):
        for c in entry["changes"]:
            if c["from"] == _ABSENT:
                flat.pop(c["key"], None)
            else:
                flat[c["key"]] = c["from"]
    return flat
