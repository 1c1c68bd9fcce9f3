"""Weights & Biases: a writer that mirrors the metrics rows to a W&B run (its block, `wandb.*`, is
`trainer.config.WandbConfig`).

Off by default (`wandb.mode=disabled`: wandb is never imported). `online` streams to W&B,
`offline` writes the run under `<dir>/wandb/` for `wandb sync` later (and for tests). Only the
process that writes metrics.jsonl (process 0) opens a run. The run id is saved in
`<workdir>/wandb_run_id`: a run resumed from its checkpoint continues the same W&B run; a fresh
start in the workdir gets a new one. W&B takes only increasing steps, so after a resume the steps
the previous process logged past its last checkpoint are not sent again (trainer/metrics.py) and
keep their first values there; metrics.jsonl and TensorBoard hold the re-run ones. (W&B's rewind,
which could replace them, is a private preview.)
"""

from __future__ import annotations

import html
import json
import os
import secrets
from typing import Literal, cast

from microcoder_jax.trainer.config import MODES, WandbConfig  # noqa: F401  (MODES: the modes it takes)

RUN_ID_FILE = "wandb_run_id"


class WandbWriter:
    """One W&B run: numbers of each metrics row at its step, text events as HTML, the config once."""

    def __init__(self, cfg: WandbConfig, workdir: str, config: dict, *, resume: bool):
        import wandb

        self._wandb = wandb
        path = os.path.join(workdir, RUN_ID_FILE)
        run_id = None
        if resume and os.path.exists(path):
            with open(path) as f:
                run_id = f.read().strip() or None
        run_id = run_id or secrets.token_hex(6)  # W&B ids: lowercase letters and digits
        with open(path + ".tmp", "w") as f:
            f.write(run_id + "\n")
        os.replace(path + ".tmp", path)
        self.run_id = run_id
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity or None,
            name=cfg.name or os.path.basename(workdir),
            group=cfg.group or None,
            tags=list(cfg.tags) or None,
            notes=cfg.notes or None,
            mode=cast(Literal["online", "offline", "disabled"], cfg.mode),  # one of MODES (checked)
            dir=cfg.dir or workdir,
            id=run_id,
            resume="allow",
            config=config,
            settings=wandb.Settings(console="off"),
        )  # metrics only: stdout stays untouched

    def write(self, step: int, record: dict) -> None:
        numbers = {
            k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self.run.log(numbers, step=int(step))

    def write_text(self, step: int, tag: str, text: str) -> None:
        self.run.log({tag: self._wandb.Html(f"<pre>{html.escape(text)}</pre>")}, step=int(step))

    def close(self) -> None:
        self.run.finish()


def open_writer(config, workdir: str, *, resume: bool, extra_config: dict | None = None) -> WandbWriter | None:
    """The run's W&B writer from `config.wandb` (a ConfigDict), or None when it is disabled.
    The full config is logged, with `extra_config` (resolved values) beside it."""
    cfg = WandbConfig.from_node(config.wandb)
    if cfg.mode == "disabled":
        return None
    plain = json.loads(json.dumps(config.to_dict()))  # JSON-ready: tuples become lists
    return WandbWriter(cfg, workdir, {**plain, **(extra_config or {})}, resume=resume)
