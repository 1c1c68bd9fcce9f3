"""CLI: python -m microcoder_jax.data.pipeline {collect,process,filter,verify,export,all}
       --config configs/data_pipeline.py [--config.key=value ...] [--workdir DIR] [--force]

`all` runs every stage in order, skipping the ones already done with the same config and inputs.
A single stage needs the one before it done. Output: <workdir>/export/train-*.jsonl + report.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from microcoder_jax.config import load_config, set_value
from microcoder_jax.data.pipeline.stages import STAGES, run_pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m microcoder_jax.data.pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=(*STAGES, "all"))
    parser.add_argument("--config", default=os.path.join("configs", "data_pipeline.py"), help="config file")
    parser.add_argument("--workdir", help="overrides config.workdir")
    parser.add_argument("--force", action="store_true", help="rebuild the stage(s) even if done")
    args, rest = parser.parse_known_args(argv)
    overrides = []
    for item in rest:
        if not item.startswith("--config."):
            parser.error(f"unrecognised argument {item!r} (overrides look like --config.key=value)")
        overrides.append(item[len("--config."):])
    try:
        cfg = load_config(args.config, overrides)
        if args.workdir:
            set_value(cfg, "workdir", args.workdir)
    except (KeyError, ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    logging.basicConfig(level=getattr(logging, str(cfg.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    stages = STAGES if args.stage == "all" else (args.stage,)
    records = run_pipeline(cfg, stages, force=args.force)
    for stage, record in records.items():
        counts = {k: v for k, v in record.items() if k not in ("stage", "fingerprint", "per_source", "shards")}
        print(f"{stage:8s} {counts}")
    if "export" in records:
        print(f"shards: {os.path.join(cfg.workdir, 'export')} ({len(records['export']['shards'])} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
