"""`python -m microcoder_jax.data.pipeline STAGE [--config=configs/data_pipeline.py] [--config.KEY=VALUE ...]
       [--workdir=DIR] [--force]`

STAGE: collect, process, filter, verify, export, or all. Reads the dumps named by the
`sources.<name>.path` keys (files, globs or folders; by default the bundled sample problems) and
writes each stage's output to `<workdir>/<stage>/` (`workdir` defaults to `data_pipeline/`,
git-ignored), the training shards to `<workdir>/export/train-*.jsonl` with a report. `all` runs every stage in order, skipping the ones
already done with the same config and inputs; a single stage needs the one before it done.
"""
from __future__ import annotations

import logging
import os
import sys

from microcoder_jax import cli
from microcoder_jax.config import ConfigError
from microcoder_jax.data.pipeline.stages import STAGES, run_pipeline

DEFAULT_CONFIG = os.path.join("configs", "data_pipeline.py")


def _define_flags(fv) -> None:
    from absl import flags

    flags.DEFINE_string("workdir", None, "overrides config.workdir", flag_values=fv)
    flags.DEFINE_boolean("force", False, "rebuild the stage(s) even if done", flag_values=fv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)

    def body() -> int:
        args = cli.parse(argv, prog="python -m microcoder_jax.data.pipeline", doc=__doc__,
                         default_file=DEFAULT_CONFIG, define_flags=_define_flags)
        if len(args.args) != 1 or args.args[0] not in (*STAGES, "all"):
            raise ConfigError(f"expected one STAGE out of {', '.join((*STAGES, 'all'))}, got {args.args}")
        cfg = args.config
        if args.workdir:
            with cfg.unlocked():
                cfg.workdir = args.workdir
        logging.basicConfig(level=getattr(logging, str(cfg.log_level).upper(), logging.INFO),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
        stages = STAGES if args.args[0] == "all" else (args.args[0],)
        records = run_pipeline(cfg, stages, force=args.force)
        for stage, record in records.items():
            counts = {k: v for k, v in record.items() if k not in ("stage", "fingerprint", "per_source", "shards")}
            print(f"{stage:8s} {counts}")
        if "export" in records:
            print(f"shards: {os.path.join(cfg.workdir, 'export')} ({len(records['export']['shards'])} files)")
        return 0

    return cli.main_guard(body)


if __name__ == "__main__":
    sys.exit(main())
