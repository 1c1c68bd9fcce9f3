"""python -m microcoder_jax.data.pipeline STAGE [--config=FILE] [--config.KEY=VALUE ...]
       [--source=NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H] ...] [--workdir=DIR] [--force]

Builds training shards from raw problem dumps on local disk (no downloads).

Reads: the config's `sources` (configs/data_pipeline.py: by default only the bundled sample
problems, microcoder_jax/data/samples/problems.jsonl). Each source is a file, a glob or a
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

import importlib.util
import logging
import os
import re
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
                              "NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H]; repeatable",
                              flag_values=fv)


def add_source(cfg, spec: str) -> None:
    """Add `NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H]` to cfg.sources (--source)."""
    import ml_collections

    name, eq, rest = spec.partition("=")
    path, *options = rest.split(",")
    if not (eq and name.isidentifier() and path):
        raise ValueError(f"--source {spec!r}: expected NAME=PATH[,format=F][,priority=N][,limit=N][,harness=H]")
    source = {"path": os.path.expanduser(path), "format": "auto", "priority": 100, "limit": 0, "harness": ""}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("format", "priority", "limit", "harness") or not value:
            raise ValueError(f"--source {spec!r}: unknown option {option!r} (format=, priority=, limit=, harness=)")
        source[key] = value if key in ("format", "harness") else int(value)
    with cfg.unlocked():
        cfg.sources[name] = ml_collections.ConfigDict(source)


def config_help(path: str) -> str:
    """Every key of the pipeline config file `path`, with its value and the comment beside it."""
    from microcoder_jax.config import flat_keys

    spec = importlib.util.spec_from_file_location("_pipeline_config", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = {"c": ""}  # `f = c.filter = ...` makes f the filter block
    notes = {}
    for line in text.splitlines():
        alias = re.match(r"\s*(\w+) = (\w+)\.(\w+) = ml_collections\.ConfigDict", line)
        if alias and alias.group(2) in blocks:
            blocks[alias.group(1)] = blocks[alias.group(2)] + alias.group(3) + "."
            continue
        knob = re.match(r"\s*(\w+)((?:\.\w+)+) = .*?#\s*(.*)$", line)
        if knob and knob.group(1) in blocks:
            notes[blocks[knob.group(1)] + knob.group(2)[1:]] = knob.group(3)
    lines = []
    for key in flat_keys(cfg):
        node = cfg
        for part in key.split("."):
            node = node[part]
        shown = repr(node) if len(repr(node)) <= 40 else repr(node)[:37] + "..."
        lines.append(f"  --config.{key}={shown}  {notes.get(key, '')}".rstrip())
    return "\n".join(lines)


def _help(argv: list[str]) -> str:
    path = next((a.partition("=")[2].partition(":")[0] for a in argv if a.startswith("--config=")), None)
    if path is None and "--config" in argv[:-1]:
        path = argv[argv.index("--config") + 1]
    path = path or DEFAULT_CONFIG
    try:
        keys = config_help(path)
    except Exception as e:  # noqa: BLE001 - help still prints, with the reason the keys are missing
        keys = f"  (cannot list the config keys of {path}: {type(e).__name__}: {e})"
    from absl import flags

    fv = flags.FlagValues()
    _define_flags(fv)
    own = [f"  --{name}: {fl.help}" for name, fl in sorted(fv._flags().items()) if name == fl.name]
    return "\n".join([f"usage: {(__doc__ or '').strip()}", "", "flags:", "  --config=FILE: a pipeline config file "
                      f"(default {DEFAULT_CONFIG})", *own, "",
                      f"config keys (values from {path}; override with --config.KEY=VALUE):", keys])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help", "-help", "--helpfull") for a in argv):
        print(_help(argv))  # its own: the run config's --help lists the run's keys, not these
        return 0

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
