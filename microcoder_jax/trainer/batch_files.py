"""One judged batch on disk: its `Rollout` as BASE.npz and what came with it as BASE.json.

The one format for the batches a checkpoint keeps in flight (pipeline.save_inflight) and the steps
`train.save_rollouts` keeps for replay (replay.RolloutSaver). The JSON holds the StepRollout's
fields (StepRollout.meta) and whatever the caller adds (the worker's Produced fields, the step's
times); reading gives them back by name, so a field added later reads old files with its default.
"""

from __future__ import annotations

import json
import os

import numpy as np

from microcoder_jax import sharding
from microcoder_jax.rl.batch import Rollout


def host_arrays(batch: Rollout) -> dict[str, np.ndarray]:
    """The batch's fields on the host (all-gathered: every process must call this)."""
    return {name: sharding.to_host(v) for name, v in batch.as_dict().items()}


def write(base: str, arrays: dict, meta: dict) -> None:
    """BASE.npz (the arrays) and BASE.json (`meta`), each written whole or not at all."""
    np.savez(base + ".tmp.npz", **arrays)
    os.replace(base + ".tmp.npz", base + ".npz")
    write_meta(base, meta)


def write_meta(base: str, meta: dict) -> None:
    """BASE.json, replaced whole (numpy scalars and arrays as plain JSON)."""
    with open(base + ".json.tmp", "w") as f:
        json.dump(meta, f, indent=1, default=_plain)
    os.replace(base + ".json.tmp", base + ".json")


def read_meta(base: str) -> dict:
    with open(base + ".json") as f:
        return json.load(f)


def read(base: str) -> tuple[Rollout, dict]:
    """(the Rollout of BASE.npz, BASE.json's dict)."""
    with np.load(base + ".npz") as data:
        batch = Rollout(**{k: data[k] for k in data.files})
    return batch, read_meta(base)


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot save {type(value).__name__} with a batch")
