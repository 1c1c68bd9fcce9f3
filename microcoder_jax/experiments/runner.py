"""Training an experiment's arms x seeds one after another, each in its own workdir.

Every run is the normal trainer (`train(config, workdir)`) on `configs/truncation_task.py:RULE`
plus the arm's overrides, in `OUT/runs/ARM/seedN`; a run whose metrics already cover every step
is read back instead of run again. All runs share one process (warm starts of one seed are
computed once, compiled programs are reused) and one compilation cache.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

from microcoder_jax.config import config_dir
from microcoder_jax.experiments.rows import training_rows

CONFIG_FILE = os.path.join(config_dir(), "truncation_task.py")
# --short: a few steps of everything, to check the command end to end (not a result)
SHORT = (
    "train.warm_start_steps=10",
    "data.num_prompts=4",
    "demo.problems_per_op=2",
    "demo.held_out_per_op=1",
    "eval.batch_problems=5",  # the 5 held-out problems in one call, no padding rows
    "train.eval_every=3",  # the held-out evaluation before and after the 3 steps
)


@dataclasses.dataclass(frozen=True)
class Arm:
    """One side of the comparison: the config file's RULE argument and extra KEY=VALUE overrides
    (`config_file`: another file of configs/ than the truncation task's)."""

    name: str
    rule: str
    overrides: tuple = ()
    label: str = ""
    config_file: str = ""
    step_share: float = 1.0  # the arm's steps as a share of the experiment's (run_steps)

    def run_steps(self, steps: int) -> int:
        """This arm's RL steps: a multi-turn arm samples more tokens a step than a single-turn one,
        so it runs a share of the steps to compare the two at about the same sampled tokens."""
        return max(1, round(steps * self.step_share))


def run_config(arm: Arm, seed: int, steps: int, short: bool, out: str):
    """The config of one arm's run for one seed (compilation cache shared under `out`)."""
    from microcoder_jax.cli import load_config

    overrides = [
        *arm.overrides,
        f"seed={seed}",
        f"train.steps={arm.run_steps(steps)}",
        "train.progress=False",
        *(SHORT if short else ()),
    ]
    path = os.path.join(config_dir(), arm.config_file) if arm.config_file else CONFIG_FILE
    config = load_config(f"{path}:{arm.rule}", overrides)
    if "compile_cache" in config.train:  # shared by every run of the experiment
        config.train.compile_cache = os.path.join(os.path.abspath(out), "compile_cache")
    return config


def held_out_reports(workdir: str) -> dict:
    """{step: report} of the run's evaluations (WORKDIR/eval/step_N.json)."""
    folder, out = os.path.join(workdir, "eval"), {}
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.startswith("step_") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                out[int(name[5:-5])] = json.load(f)
    return dict(sorted(out.items()))


def _finished(workdir: str, steps: int) -> list[dict] | None:
    from microcoder_jax.trainer.metrics import read_metrics

    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    done = os.path.exists(os.path.join(workdir, "run_done.json"))
    return rows if done and len(training_rows(rows)) == steps else None


def run_all(arms, seeds, steps: int, out: str, *, short: bool = False, log=print) -> dict:
    """Train every arm for every seed (seed-major); returns {arm: {seed: (rows, timing, {step:
    held-out report})}}."""
    from microcoder_jax.trainer import map_limit, warm_start
    from microcoder_jax.trainer.loop import train

    warm_start.reuse_warm_starts(True)
    results = {a.name: {} for a in arms}
    plan = [(s, a) for s in seeds for a in arms]
    total, t_all, trained = len(plan), time.perf_counter(), 0
    for i, (seed, arm) in enumerate(plan):
        n = arm.run_steps(steps)
        workdir = os.path.join(out, "runs", arm.name, f"seed{seed}")
        tag = f"[{i + 1}/{total}] {arm.name} seed {seed}"
        rows = _finished(workdir, n)
        if rows is not None:
            timing = json.load(open(os.path.join(workdir, "run_done.json")))
            log(f"{tag}: done before, read back")
            results[arm.name][seed] = (rows, timing, held_out_reports(workdir))
            continue
        shutil.rmtree(workdir, ignore_errors=True)
        config = run_config(arm, seed, steps, short, out)
        t0, c0 = time.perf_counter(), time.process_time()

        def on_step(step, r, tag=tag, t0=t0, n=n):
            if step % max(1, n // 8) == 0 or step == n:
                log(
                    f"{tag} step {step}/{n}: reward {r['reward_mean']:.3f} length "
                    f"{r['response_length_mean']:.1f} truncated {r['truncation_rate']:.2f} masked "
                    f"{r['masked_fraction']:.2f} diversity {r['diversity']:.3f} T {r['temperature']:g} "
                    f"({time.perf_counter() - t0:.0f} s)"
                )

        train(config, workdir, log_fn=lambda m, tag=tag: log(f"{tag}: {m}"), on_step=on_step)
        timing = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        map_limit.relieve()  # runs share compiled programs until they near the mappings cap
        with open(os.path.join(workdir, "run_done.json"), "w") as f:
            json.dump(timing, f)
        rows = _finished(workdir, n)
        results[arm.name][seed] = (rows, timing, held_out_reports(workdir))
        elapsed, trained = time.perf_counter() - t_all, trained + 1  # ETA from the runs trained here
        log(
            f"{tag}: finished in {timing['wall_s']:.0f} s wall, {timing['cpu_s']:.0f} s CPU; "
            f"experiment {elapsed / 60:.1f} min, about {elapsed / trained * (total - i - 1) / 60:.1f} min left"
        )
    return results
