"""python -m microcoder_jax.dataset STAGE [--config=FILE] [--config.KEY=VALUE ...]
       [--source=NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H] ...] [--workdir=DIR] [--force]

Builds training shards from raw problem dumps on local disk (no downloads).

Reads: the config's `sources` (without --config only the bundled sample problems,
microcoder_jax/data/samples/problems.jsonl; add yours in a copy of
configs/data_pipeline.py). Each source is a file, a glob or a
directory of JSONL / JSON / Parquet rows or Hugging Face `datasets` .arrow files, in LiveCodeBench,
APPS/TACO, CodeContests, DeepCoder/rllm, LeetCode (assert tests) or our own format (format=auto
detects it per row), or, with format=dir, a folder of problem folders (ours, raw APPS, Kattis
packages); docs/datasets.md lists every layout and drop reason. Add one from the command line with
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
from microcoder_jax.dataset import config as pipeline_config
from microcoder_jax.dataset.stages import STAGES, run_pipeline, stage_done

DEFAULT_CONFIG = pipeline_config.DEFAULT_FILE  # the defaults; configs/data_pipeline.py starts from them
HELPS = ("-h", "--help", "-help", "--helpfull")


def _define_flags(fv) -> None:
    from absl import flags

    flags.DEFINE_string("workdir", None, "overrides config.workdir", flag_values=fv)
    flags.DEFINE_boolean("force", False, "rebuild the stage(s) even if done", flag_values=fv)
    flags.DEFINE_multi_string(
        "source",
        [],
        "add (or replace) an input source: NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H]; repeatable",
        flag_values=fv,
    )


def add_source(cfg, spec: str) -> None:
    """Add `NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H]` to cfg.sources (--source)."""
    name, eq, rest = spec.partition("=")
    path, *options = rest.split(",")
    if not (eq and name.isidentifier() and path):
        raise ValueError(f"--source {spec!r}: expected NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H]")
    fields = {}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("format", "priority", "limit", "harness") or not value:
            raise ValueError(f"--source {spec!r}: unknown option {option!r} (format=, priority=, limit=, harness=)")
        try:
            fields[key] = value if key in ("format", "harness") else int(value)
        except ValueError:
            raise ValueError(f"--source {spec!r}: {key}={value!r} is not an integer") from None
    with cfg.unlocked():
        cfg.sources[name] = pipeline_config.source(os.path.expanduser(path), **fields)


def _help(argv: list[str]) -> str:
    """The doc, the flags, then every key of the config file argv names (or the defaults)."""
    value = cli.config_value(argv)
    problem = cli.config_file_problem(value) if value is not None else None
    if problem:
        keys = f"  (cannot list the config keys: {problem})"
    else:
        try:
            parsed = cli.parse(
                [a for a in argv if a not in HELPS],
                prog="",
                doc="",
                default_file=DEFAULT_CONFIG,
                define_flags=_define_flags,
            )
            keys = pipeline_config.describe(parsed.config)
        except ConfigError as e:
            keys = f"  (cannot list the config keys: {e})"
    from absl import flags

    fv = flags.FlagValues()
    _define_flags(fv)
    own = [f"  --{name}: {fl.help}" for name, fl in sorted(fv._flags().items()) if name == fl.name]
    source = value or "the defaults, microcoder_jax/dataset/config.py"
    return "\n".join(
        [
            f"usage: {(__doc__ or '').strip()}",
            "",
            "flags:",
            "  --config=FILE: a pipeline config file "
            "(default: the defaults; configs/data_pipeline.py starts from them)",
            *own,
            "",
            f"config keys (values from {source}; override with --config.KEY=VALUE):",
            keys,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in HELPS for a in argv):
        print(_help(argv))  # its own: the run config's --help lists the run's keys, not these
        return 0

    def body() -> int:
        args = cli.parse(
            argv,
            prog="python -m microcoder_jax.dataset",
            doc=__doc__,
            default_file=DEFAULT_CONFIG,
            define_flags=_define_flags,
        )
        if len(args.args) != 1 or args.args[0] not in (*STAGES, "all"):
            raise ConfigError(f"expected one STAGE out of {', '.join((*STAGES, 'all'))}, got {args.args}")
        stages = STAGES if args.args[0] == "all" else (args.args[0],)
        cfg = args.config
        if args.workdir:
            with cfg.unlocked():
                cfg.workdir = args.workdir
        for spec in args.source:
            try:
                add_source(cfg, spec)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        try:
            pipeline_config.check(cfg)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        first = STAGES.index(stages[0])
        if first and stage_done(cfg.workdir, STAGES[first - 1]) is None:
            raise ConfigError(
                f"{stages[0]}: needs stage {STAGES[first - 1]} done in {cfg.workdir} first; "
                f"run `{STAGES[first - 1]}` (or `all`)"
            )
        logging.basicConfig(
            level=getattr(logging, str(cfg.log_level).upper(), logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        records = run_pipeline(cfg, stages, force=args.force)
        for stage, record in records.items():
            counts = {k: v for k, v in record.items() if k not in ("stage", "fingerprint", "per_source", "shards")}
            print(f"{stage:8s} {counts}")
        if "export" in records:
            export = os.path.join(cfg.workdir, "export")
            print(
                f"shards: {export} ({len(records['export']['shards'])} files); "
                f"report: {os.path.join(export, 'report.md')}"
            )
        return 0

    return cli.main_guard(body)


if __name__ == "__main__":
    sys.exit(main())
