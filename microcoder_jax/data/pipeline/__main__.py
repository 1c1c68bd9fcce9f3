"""python -m microcoder_jax.data.pipeline STAGE [--config=FILE] [--config.KEY=VALUE ...]
       [--source=NAME=PATH[,format=F][,priority=N][,limit=N] ...] [--workdir=DIR] [--force]

Builds training shards from raw problem dumps on local disk (no downloads).

Reads: the config's `sources` (configs/data_pipeline.py: by default only the bundled sample
problems, microcoder_jax/data/samples/problems.jsonl). Each source is a file, a glob or a
directory of JSONL / JSON / Parquet rows or Hugging Face `datasets` .arrow files, in LiveCodeBench,
APPS/TACO, CodeContests, DeepCoder or our own format (format=auto detects it per row), or, with
format=dir, a folder of problem folders. Add one from the command line with
`--source lcb=/dumps/lcb/*.jsonl,format=lcb,priority=0` (repeatable; lower priority wins when two
sources hold the same problem).

Writes: under --workdir (default ./data_pipeline, git-ignored) one directory per stage, collect/
process/ filter/ verify/ export/, each with its outputs and a report; the training shards are
<workdir>/export/train-0000i-of-0000N.jsonl, for --config.data.train_files of the trainer.

Stages: collect (read the sources), process (normalise rows, tests, solutions), filter (drop bad,
duplicate, contaminated, interactive ... problems), verify (judge reference solutions), export
(shuffle into shards); `all` runs them in order, skipping those already done with the same config
and inputs. A single stage needs the one before it done; --force rebuilds.
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
    flags.DEFINE_multi_string("source", [], "add (or replace) an input source: "
                              "NAME=PATH[,format=F][,priority=N][,limit=N]; repeatable", flag_values=fv)


def add_source(cfg, spec: str) -> None:
    """Add `NAME=PATH[,format=F][,priority=N][,limit=N]` to cfg.sources (the --source flag)."""
    import ml_collections

    name, eq, rest = spec.partition("=")
    path, *options = rest.split(",")
    if not (eq and name.isidentifier() and path):
        raise ValueError(f"--source {spec!r}: expected NAME=PATH[,format=F][,priority=N][,limit=N]")
    source = {"path": os.path.expanduser(path), "format": "auto", "priority": 100, "limit": 0}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("format", "priority", "limit") or not value:
            raise ValueError(f"--source {spec!r}: unknown option {option!r} (format=, priority=, limit=)")
        source[key] = value if key == "format" else int(value)
    with cfg.unlocked():
        cfg.sources[name] = ml_collections.ConfigDict(source)


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
        for spec in args.source:
            try:
                add_source(cfg, spec)
            except ValueError as e:
                raise ConfigError(str(e)) from None
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
