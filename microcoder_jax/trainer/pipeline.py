"""Rollouts ahead of the learner: `train.off_policy_steps` = k.

k = 0: the worker makes step t's batch when the learner asks, with the learner's own params, and
hands it over once its rows are sampled (`Sampled`), so the learner's old log-probs run while the
judge works (the synchronous loop). k >= 1: a background thread produces the batches while the
learner trains. Batch t is sampled with the weights of version max(t - k, start) (the learner's
params after that many updates; `start`: the version the run began or resumed at), waited for if
the learner has not published them yet, so a batch is never more than k updates staler than the
policy that trains on it, and what it holds depends only on (seed, t) and that version: thread
timing cannot change a result. The learner computes the old log-probs at its params when it
trains on the batch; rl.is_correction=tis weighs the stale sampler's log-probs against them.

Multi-host (`inline`): every process must launch its collectives in the same order, which two
threads per process cannot promise, so the worker runs in the learner's thread and makes batch t
when the learner asks for it, from the same weights version: the same batches as one process
with the thread, without the overlap.

Checkpoints (`drain`, `save_inflight`, `load_inflight`): before the learner saves step s it waits
for the batches the worker can already make (s .. s + k - 1: they need versions it has) and
writes them beside the checkpoint (`WORKDIR/inflight/step_s/`); the checkpoint holds the
worker's data position and scheduler after the last of them. A resume trains on those first, so a
batch in flight is never lost and never trained on twice.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import Any, Optional

import jax
import jax.numpy as jnp

from microcoder_jax.trainer import batch_files
from microcoder_jax.trainer.worker import Produced, RolloutWorker, Sampled

INFLIGHT_DIR = "inflight"


class Pipeline:
    """The worker's batches in step order (see the module doc); `ready`: batches restored from a
    checkpoint."""

    def __init__(
        self,
        worker: RolloutWorker,
        *,
        k: int,
        start: int,
        steps: int,
        params,
        ready: tuple[Produced, ...] = (),
        inline: bool = False,
    ):
        self.worker, self.k, self.start, self.steps = worker, k, start, steps
        self.inline = inline
        self.ready = {p.step: p for p in ready}
        self.next = start + len(self.ready)  # the next step the worker produces
        self.weights = {start: self._copy(params)} if k else {}
        self.error: Optional[BaseException] = None
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = None
        if k and not inline:
            self.thread = threading.Thread(target=self._run, name="rollout-worker", daemon=True)
            self.thread.start()

    def version_for(self, step: int) -> int:
        """The weights version step `step`'s batch is sampled with (k >= 1)."""
        return max(step - self.k, self.start)

    def _copy(self, params):
        return jax.tree.map(jnp.copy, params)  # the learner's state is donated by its next step

    def _blocked(self) -> bool:  # the worker thread has nothing it may produce now
        return self.next >= self.steps or self.version_for(self.next) not in self.weights

    def _run(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.stopping and self._blocked():
                        if self.next >= self.steps:
                            return
                        self.cond.wait()
                    if self.stopping:
                        return
                    step, version, params = self._take_weights()
                self._produce(step, version, params)
        except BaseException as e:  # noqa: BLE001 - handed to the learner's thread, which raises it
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def _take_weights(self):
        """The next step, its weights version and params (older versions are dropped)."""
        step, version = self.next, self.version_for(self.next)
        params = self.weights[version]
        for old in [v for v in self.weights if v < version]:
            del self.weights[old]
        return step, version, params

    def _produce(self, step: int, version: int, params) -> None:
        self.worker.update_weights(params, version)
        produced = self.worker.produce(step)
        with self.cond:
            self.ready[step] = produced
            self.next = step + 1
            self.cond.notify_all()

    def _produce_inline(self, until: Optional[int]) -> None:
        """Inline mode: make the batches the weights in hand allow, up to step `until` (None: all)."""
        while not self._blocked() and (until is None or self.next <= until):
            self._produce(*self._take_weights())

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the rollout worker failed: {self.error!r}") from self.error

    def get(self, step: int, params, version: int) -> Sampled:
        """Step `step`'s batch; synchronous (k = 0): begun now with `params` (version `version`) and
        handed over once sampled (its `wait()` gives the judged batch)."""
        if not self.k and step not in self.ready:
            self.worker.update_weights(params, version)
            return self.worker.begin(step)
        if self.inline:
            self._produce_inline(step)
            if step not in self.ready:
                raise RuntimeError(
                    f"step {step}'s batch needs weights version {self.version_for(step)}, not published (a bug)"
                )
        with self.cond:
            while step not in self.ready and self.error is None:
                self.cond.wait()
            self._raise()
            return Sampled.made(self.ready.pop(step))

    def publish(self, params, version: int) -> None:
        """The learner's params after `version` updates, for the batches that wait for them."""
        if not self.k or version + self.k >= self.steps:
            return  # no batch left to sample with them
        copy = self._copy(params)
        with self.cond:
            self.weights[version] = copy
            self.cond.notify_all()

    def drain(self) -> list[Produced]:
        """Wait until the worker has made every batch it can with the weights it has; those batches
        (not yet trained on), oldest first. The worker is idle when this returns."""
        if not self.k:
            self.worker.settle()  # partial rollouts: the rows in flight finish (the worker is idle)
        if self.inline and self.k:
            self._produce_inline(None)
        with self.cond:
            while self.k and not self._blocked() and self.error is None:
                self.cond.wait()
            self._raise()
            return [self.ready[s] for s in sorted(self.ready)]

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()


def _inflight_root(root: str) -> str:
    """This process's in-flight folder: each process keeps its own copy (hosts need not share a disk)."""
    index = jax.process_index()
    return os.path.join(root, INFLIGHT_DIR if index == 0 else f"{INFLIGHT_DIR}.p{index}")


def inflight_dir(root: str, step: int) -> str:
    """This process's folder of what was in flight at checkpoint `step`."""
    return os.path.join(_inflight_root(root), f"step_{step:08d}")


def save_inflight(root: str, step: int, produced: list[Produced]) -> None:
    """The batches in flight at checkpoint `step`, written before the checkpoint by every process
    (the arrays are all-gathered: every process must call this)."""
    host = [batch_files.host_arrays(p.batch) for p in produced]
    final = inflight_dir(root, step)
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for p, arrays in zip(produced, host):
        batch_files.write(os.path.join(tmp, f"batch_{p.step:08d}"), arrays, p.meta())
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def load_inflight(root: str, step: int) -> list[Produced]:
    """The batches saved in flight with checkpoint `step`, oldest first ([] when none)."""
    folder = inflight_dir(root, step)
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if n.startswith("batch_") and n.endswith(".json"))
    return [Produced.from_meta(*batch_files.read(os.path.join(folder, name[:-5]))) for name in names]


def prune_inflight(root: str, keep: Any) -> None:
    """Remove the in-flight folders of checkpoints no longer kept (`keep`: their steps)."""
    folder = _inflight_root(root)
    if not os.path.isdir(folder):
        return
    keep = set(keep)
    for name in os.listdir(folder):
        if name.startswith("step_") and not name.endswith(".tmp") and int(name[5:]) not in keep:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
