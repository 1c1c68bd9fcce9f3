"""Checkpoints of everything a run needs to continue exactly: an Orbax CheckpointManager wrapper.

Two items per step: `state` (the TrainState pytree: params, optimizer state, step, PRNG key) and
`meta` (JSON: data-iterator position, temperature-scheduler state, host-side counters). Saves are
asynchronous; Orbax writes each step into a temporary directory and renames it when every item is
complete, so a run killed mid-save leaves no directory that `latest_step` would pick.
"""
from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    """Saves and restores (state, meta) pairs under `directory`, keeping the newest `keep`."""

    def __init__(self, directory: str, *, keep: int = 3, async_save: bool = True):
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.LatestN(keep),
            enable_async_checkpointing=async_save,
            create=True,
            cleanup_tmp_directories=True,  # leftovers of a killed save are removed, never read
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options,
                                             item_names=("state", "meta"))

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None."""
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Start saving (returns once the arrays are copied; the write continues in the background)."""
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)

    def restore(self, target_state: Any, step: int | None = None) -> tuple[Any, dict, int]:
        """(state, meta, step) of `step` (default: the newest), shaped and sharded like `target_state`."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_state)
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
        return restored["state"], dict(restored["meta"]), step

    def read_meta(self, step: int | None = None) -> dict:
        step = self.latest_step() if step is None else step
        restored = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored["meta"])

    def wait(self) -> None:
        """Block until every started save is on disk."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def load_params(directory: str, target_params: Any, step: int | None = None) -> tuple[Any, int]:
    """(params, step) of a training checkpoint, without reading the optimizer state (evaluation)."""
    manager = ocp.CheckpointManager(os.path.abspath(directory), item_names=("state", "meta"),
                                    options=ocp.CheckpointManagerOptions(read_only=True))
    step = manager.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_params)
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        item={"params": abstract}, restore_args={"params": jax.tree.map(_restore_arg, abstract)},
        partial_restore=True)))
    manager.close()
    return restored["state"]["params"], step


def _restore_arg(x):
    sharding = getattr(x, "sharding", None)
    return ocp.ArrayRestoreArgs(sharding=sharding, global_shape=x.shape, dtype=x.dtype)
