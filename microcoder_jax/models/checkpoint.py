"""Checkpoints of everything a run needs to continue exactly: an Orbax CheckpointManager wrapper.

Two items per step: `state` (the TrainState pytree: params, optimizer state, step, PRNG key) and
`meta` (JSON: data-iterator position, temperature-scheduler state, host-side counters). Saves are
asynchronous; Orbax writes each step into a temporary directory and renames it when every item is
complete, so a run killed mid-save leaves no directory that `latest_step` would pick.
A save that fails (disk full, quota, permissions) raises `CheckpointWriteError`, one line naming
the step, the cause and the newest complete checkpoint, as soon as the loop next polls.
A resume (`restore_readable`) falls back from a checkpoint that cannot be read (a truncated or
missing file) to the next older one, logging one line for each; the unreadable ones are moved
aside (`<step>.unreadable`) so the run can write those steps again. None readable:
`CheckpointReadError`, one line. A killed save's temporary directories are never read.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import sys
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written; the message is one line (cause, newest good step, fix)."""


class CheckpointReadError(RuntimeError):
    """No checkpoint of a run can be read; the message is one line (steps, causes, fix)."""


UNREADABLE_SUFFIX = ".unreadable"  # a checkpoint that failed to restore, moved aside (kept for a look)


def _cause(error: BaseException) -> str:
    """The OS reason of a failed write ("No space left on device"), else the error's first line."""
    text = str(error)
    code = re.search(r"os_error_code='?(\d+)", text)
    if code:
        return os.strerror(int(code.group(1)))
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return text.strip().splitlines()[0][:200] if text.strip() else type(error).__name__


def _read_cause(error: BaseException) -> str:
    """Why a checkpoint did not read: the storage layer's own status line (TensorStore's
    'OUT_OF_RANGE: Error reading ...') from the exception chain when there is one."""
    seen, e = set(), error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).strip()
        if re.match(r"[A-Z][A-Z_]+: ", text):
            return text.splitlines()[0][:300]
        e = e.__cause__ or e.__context__
    return _cause(error)


def _from_orbax(unraisable) -> bool:
    """An unraisable exception of one of Orbax's abandoned read coroutines."""
    code = getattr(unraisable.object, "cr_code", None) or getattr(unraisable.object, "__code__", None)
    return f"{os.sep}orbax{os.sep}" in getattr(code, "co_filename", "")


def _collect_quietly() -> None:
    """Drop the 'Exception ignored' tracebacks of the reads a failed restore left unawaited (Orbax
    abandons the sibling reads of the one that failed; it is reported in one line), now and
    whenever they are finalised later (its event-loop thread may still hold some): from then on
    the process's unraisable hook drops Orbax's coroutines and passes everything else on."""
    global _hook_installed
    if not _hook_installed:
        previous = sys.unraisablehook
        sys.unraisablehook = lambda u: None if _from_orbax(u) else previous(u)
        _hook_installed = True
    gc.collect()


_hook_installed = False


def _drop_background_save_tracebacks(record: logging.LogRecord) -> bool:
    """Orbax logs a failed background save as tracebacks from several threads; the error is
    raised again (as one line) by `Checkpointer.poll`/`wait`, so those records are dropped."""
    return not (record.levelno >= logging.ERROR and f"{os.sep}orbax{os.sep}" in record.pathname)


class Checkpointer:
    """Saves and restores (state, meta) pairs under `directory`, keeping the newest `keep`."""

    def __init__(self, directory: str, *, keep: int = 3, async_save: bool = True):
        self.directory = os.path.abspath(directory)
        self._saving: int | None = None  # the step of the save in flight
        self._failed = False
        logging.getLogger("absl").addFilter(_drop_background_save_tracebacks)
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.LatestN(keep),
            enable_async_checkpointing=async_save,
            create=True,
            cleanup_tmp_directories=True,  # leftovers of a killed save are removed, never read
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None."""
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Start saving (returns once the arrays are copied; the write continues in the background).

        Raises CheckpointWriteError if this save, or the previous one, could not be written.
        """
        self.poll()
        self._saving = step
        try:
            self.manager.save(
                step,
                args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
                force=True,
            )
        except Exception as e:  # noqa: BLE001 - any write failure ends the run the same way
            raise self._write_error(e) from e
        if not self.manager.is_saving_in_progress():
            self.wait()  # synchronous saves: report a failure now

    def poll(self) -> None:
        """Raise CheckpointWriteError if a background save has finished and failed (cheap)."""
        if self._saving is not None and not self.manager.is_saving_in_progress():
            self.wait()

    def _write_error(self, error: BaseException) -> CheckpointWriteError:
        step, self._saving, self._failed = self._saving, None, True
        good = self.latest_step()
        kept = (
            f"the newest complete checkpoint is step {good} (intact)"
            if good is not None
            else "there is no complete checkpoint yet"
        )
        return CheckpointWriteError(
            f"could not write the checkpoint of step {step} to {self.directory}: {_cause(error)}; "
            f"{kept}. Free space there (or use another --workdir) and rerun the same command to resume."
        )

    def restore(self, target_state: Any, step: int | None = None) -> tuple[Any, dict, int]:
        """(state, meta, step) of `step` (default: the newest), shaped and sharded like `target_state`."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_state)
        restored = self.manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
        )
        return restored["state"], dict(restored["meta"]), step

    def restore_readable(self, target_state: Any, log_fn=print) -> tuple[Any, dict, int] | None:
        """`restore` of the newest checkpoint that reads, trying older ones (one line logged for
        each that fails); None when there is no checkpoint. The unreadable newer ones are moved
        aside. Raises CheckpointReadError when step directories exist but none can be read."""
        steps = sorted(self.all_steps(), reverse=True)
        failed: list[tuple[int, str]] = []
        for step in steps:
            try:
                restored = self.restore(target_state, step)
            except Exception as e:  # noqa: BLE001 - any damage (truncated, missing, garbled) reads the same
                failed.append((step, _read_cause(e)))
            else:
                self._set_aside([s for s, _ in failed])
                return restored
            _collect_quietly()
            older = [s for s in steps if s < step]
            then = f"trying step {older[0]}" if older else "no older checkpoint"
            log_fn(f"checkpoint of step {step} in {self.directory} cannot be read ({failed[-1][1]}); {then}")
        on_disk = (
            sorted(int(n) for n in os.listdir(self.directory) if n.isdigit()) if os.path.isdir(self.directory) else []
        )
        if not failed and not on_disk:
            return None
        causes = (
            f"steps {', '.join(str(s) for s, _ in failed)}; the newest: {failed[0][1]}"
            if failed
            else f"step directories {on_disk} are not complete checkpoints"
        )
        raise CheckpointReadError(
            f"no checkpoint in {self.directory} can be read ({causes}). Restore the directory from a copy, "
            "or start a new run with another --workdir; the checkpoints were left as they are."
        )

    def _set_aside(self, steps: list[int]) -> None:
        """Rename unreadable step directories to `<step>.unreadable` (process 0; every host waits)."""
        if not steps:
            return
        if jax.process_index() == 0:
            for step in steps:
                path = os.path.join(self.directory, str(step))
                target, n = path + UNREADABLE_SUFFIX, 1
                while os.path.exists(target):
                    target, n = f"{path}{UNREADABLE_SUFFIX}.{n}", n + 1
                os.rename(path, target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("microcoder_jax unreadable checkpoints set aside")
        self.manager.reload()

    def read_meta(self, step: int | None = None) -> dict:
        step = self.latest_step() if step is None else step
        restored = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored["meta"])

    def wait(self) -> None:
        """Block until every started save is on disk (CheckpointWriteError if one failed)."""
        try:
            self.manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            raise self._write_error(e) from e
        self._saving = None

    def close(self) -> None:
        """Finish pending saves and release the manager (a failure already raised is not repeated)."""
        try:
            if not self._failed:
                self.wait()
        finally:
            try:
                self.manager.close()
            except Exception:  # noqa: BLE001 - the failed save was reported once already
                if not self._failed:
                    raise


def load_params(directory: str, target_params: Any, step: int | None = None) -> tuple[Any, int]:
    """(params, step) of a training checkpoint, without reading the optimizer state (evaluation)."""
    # create=False and no save: nothing is written. Not read_only=True: Orbax logs three warnings for it
    # (it resets save_interval_steps and create, and announces the read-only directory) on every eval.
    manager = ocp.CheckpointManager(
        os.path.abspath(directory),
        item_names=("state", "meta"),
        options=ocp.CheckpointManagerOptions(create=False, save_interval_steps=0),
    )
    kept = sorted(manager.all_steps())
    step = manager.latest_step() if step is None else step
    if step is None:
        manager.close()
        raise FileNotFoundError(f"no checkpoint in {directory}")
    if step not in kept:
        manager.close()
        raise FileNotFoundError(
            f"no checkpoint of step {step} in {directory}; kept steps: {', '.join(map(str, kept))} "
            "(train.keep_checkpoints prunes the older ones)"
        )
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_params)
    restored = manager.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                item={"params": abstract},
                restore_args={"params": jax.tree.map(_restore_arg, abstract)},
                partial_restore=True,
            )
        ),
    )
    manager.close()
    return restored["state"]["params"], step


def _restore_arg(x):
    sharding = getattr(x, "sharding", None)
    return ocp.ArrayRestoreArgs(sharding=sharding, global_shape=x.shape, dtype=x.dtype)


def read_checkpoint_meta(directory: str, step: int | None = None) -> dict:
    """The JSON meta of one training checkpoint (default: the newest), read without creating or
    cleaning anything (a live run may be saving there)."""
    manager = ocp.CheckpointManager(
        os.path.abspath(directory),
        item_names=("state", "meta"),
        options=ocp.CheckpointManagerOptions(create=False, save_interval_steps=0),
    )
    try:
        step = manager.latest_step() if step is None else step
        if step is None:
            return {}
        return dict(manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"] or {})
    finally:
        manager.close()
