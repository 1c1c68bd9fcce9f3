"""Stopping cleanly on SIGTERM (TPU preemption, `kill`) and SIGINT (Ctrl-C).

Before the loop starts (imports, weights, compiles, the warm start: `exit_at_once`), a signal
ends the process at once with one line and status 128 + signal number: there is nothing to save.
Once the loop runs (`Guard`), the first signal only sets a flag: the training loop finishes the
step it is in, writes a checkpoint and raises `Preempted`, so the pool and the checkpointer close
normally and the run exits with the conventional status 128 + signal number. A second signal
exits at once (status 128 + signal number) without waiting for anything: the newest complete
checkpoint stays usable.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable

SIGNALS = (signal.SIGTERM, signal.SIGINT)


SETUP_MESSAGE = "{name} received during set-up, before the first RL step: nothing to save; exiting"


def exit_at_once(message: str = SETUP_MESSAGE, signals=SIGNALS) -> dict:
    """From now until a `Guard` takes over: SIGTERM / SIGINT print `message` (`{name}`: the
    signal's) and end the process with status 128 + signum, no traceback (main thread only).

    It exits with os._exit, not an exception: a KeyboardInterrupt cancels JAX's wait for a
    compile but not the compile, whose thread then crashed into the interpreter's shutdown (a
    SIGSEGV and a core dump); and a SIGTERM nobody took over printed absl's stack trace.
    Returns the handlers it replaced, for `restore`."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handle(signum, frame) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or broken: nothing more to show there
                pass
        bars = getattr(sys.modules.get("tqdm"), "tqdm", None)  # a progress bar's line ends first
        newline = "\n" if getattr(bars, "_instances", None) else ""
        try:
            print(newline + message.format(name=signal.Signals(signum).name), file=sys.stderr, flush=True)
        finally:
            os._exit(128 + signum)

    return {s: signal.signal(s, handle) for s in signals}


def restore(previous: dict) -> None:
    """Put back the handlers `exit_at_once` returned."""
    for s, handler in previous.items():
        signal.signal(s, handler)


class Preempted(Exception):
    """The run stopped on a signal after checkpointing `step`; `exit_code` is 128 + signum."""

    def __init__(self, signum: int, step: int, checkpoint_dir: str = ""):
        self.signum, self.step, self.checkpoint_dir = signum, step, checkpoint_dir
        self.exit_code = 128 + signum
        where = f" in {checkpoint_dir}" if checkpoint_dir else ""
        super().__init__(
            f"stopped by {signal.Signals(signum).name} after step {step}; checkpoint of "
            f"step {step} written{where}; rerun the same command to resume"
        )


class Guard:
    """Catches SIGTERM/SIGINT between `install()` and `uninstall()`; the loop polls `requested`."""

    def __init__(self, log_fn: Callable[[str], Any] | None = None, signals=SIGNALS):
        self.signum: int | None = None
        self._signals = tuple(signals)
        self._previous: dict = {}
        self._log = log_fn or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def install(self) -> "Guard":
        """Take over the signals (only possible in the main thread; elsewhere a no-op)."""
        if threading.current_thread() is threading.main_thread():
            for s in self._signals:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def uninstall(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def __enter__(self) -> "Guard":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()

    @property
    def requested(self) -> bool:
        """Whether a signal arrived (on any host of a multi-host run: they must stop together)."""
        import jax

        if jax.process_count() == 1:
            return self.signum is not None
        import numpy as np
        from jax.experimental import multihost_utils

        flags = np.asarray(multihost_utils.process_allgather(np.int32(self.signum or 0)))
        if self.signum is None and flags.any():
            self.signum = int(flags[flags > 0][0])
        return bool(flags.any())

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            self._log(
                f"second {signal.Signals(signum).name}: exiting now without a checkpoint "
                "(the newest complete one stays usable)"
            )
            os._exit(128 + signum)
        self.signum = signum
        self._log(
            f"{signal.Signals(signum).name} received: finishing this step, then writing a "
            "checkpoint and exiting (send it again to exit at once)"
        )

    def stop(self, step: int, checkpoint_dir: str = "") -> Preempted:
        """The exception the loop raises once its checkpoint of `step` is started."""
        return Preempted(self.signum or signal.SIGTERM, step, checkpoint_dir)
