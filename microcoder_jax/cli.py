"""Command lines: `--config=FILE[:ARG] --config.KEY=VALUE` through ml_collections `config_flags`.

Every CLI of the project (train, eval, the data pipeline) parses its arguments with `parse`: the
config file (or the built-in default when `--config` is absent), typed overrides, the CLI's own
absl flags, and `--help` listing every config key with its value and meaning. A bad argument or
value becomes one `ConfigError`; `main_guard` turns it into `error: ...` and exit code 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
from typing import Any, Callable, Sequence

import ml_collections
from absl import flags
from ml_collections import config_flags

from microcoder_jax.config import ConfigError, default_config, describe, flat_keys, migrate
from microcoder_jax.sharding import describe_host_without_tpu

FILE_LIST_KEYS = ("data.train_files", "eval.files")  # "a.jsonl,b-*.jsonl" on the command line


@dataclasses.dataclass
class Parsed:
    config: ml_collections.ConfigDict
    flags: flags.FlagValues
    args: list[str]  # positional arguments

    def __getattr__(self, name: str) -> Any:  # the CLI's own flags, by name
        return self.flags[name].value


def _has_config_file(argv: Sequence[str]) -> bool:
    return any(a == "--config" or a.startswith("--config=") for a in argv)


def _with_default(argv: Sequence[str], default_file: str | None) -> list[str]:
    """`--config=default_file` first when argv names no config file."""
    if _has_config_file(argv) or default_file is None:
        return list(argv)
    return [f"--config={default_file}", *argv]


def _flag_values(define_flags, argv: Sequence[str]) -> flags.FlagValues:
    """Fresh flags (the CLIs can share a process, e.g. in tests); the overrides are read from argv."""
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "config file, FILE or FILE:ARG", flag_values=fv, sys_argv=["prog", *argv]
    )
    if define_flags is not None:
        define_flags(fv)
    return fv


def _override_keys(argv) -> list[str]:
    return [a[len("--config.") :].partition("=")[0] for a in argv if a.startswith("--config.")]


def _explain(argv, define_flags, error: Exception) -> str:
    """The clearest message for a failed parse: an unknown key lists the valid ones."""
    base = [a for a in argv if not a.startswith("--config.")]
    try:
        fv = _flag_values(define_flags, base)
        fv(["prog", *base])
        config = fv.config
        keys = flat_keys(config)
    except Exception:  # noqa: BLE001 — the config itself is what failed: report the original error
        keys = None
    if keys is not None:
        for key in _override_keys(argv):
            if key not in keys:
                near = difflib.get_close_matches(key, keys, n=4, cutoff=0.6)
                if not near:  # no close spelling: the keys of the same block, if the block exists
                    near = [k for k in keys if k.partition(".")[0] == key.partition(".")[0]][:4]
                hint = f" (did you mean {near[0]}?)" if near else ""
                others = f"; close keys: {', '.join(near)}" if len(near) > 1 else ""
                return f"unknown config key {key!r}{hint}{others}; --help lists every key"
    value = config_value(argv)
    problem = config_file_problem(value) if value is not None else None
    if problem:
        return problem
    lines = [ln.strip() for ln in str(error).replace("\\n", "\n").splitlines() if ln.strip()]
    if any(ln.startswith("Traceback") for ln in lines):  # get_config raised: its own message
        lines = [lines[-1].partition(": ")[2] or lines[-1]]
    text = " ".join(lines)
    if text[:1] in "'\"" and text[-1:] == text[:1]:
        text = text[1:-1]
    return text or type(error).__name__


def config_value(argv: Sequence[str]) -> str | None:
    """The `--config` argument (FILE or FILE:ARG) in argv, or None."""
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            return a.partition("=")[2]
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def config_file_problem(value: str) -> str | None:
    """What is wrong with the config file `value` (FILE or FILE:ARG), as one line naming it, or None.

    Loads it as config_flags does (the file, then get_config(ARG)) but catches each failure where it
    happens, so the user sees the file and its error instead of ml_collections' wrapped trace."""
    import importlib.machinery
    import importlib.util

    path, colon, arg = value.partition(":")
    head = f"--config={value}"
    if not path:
        return f"{head}: names no file; pass --config=FILE, a python file with get_config(arg)"
    if not os.path.exists(path):
        return f"{head}: no such config file"
    if not os.path.isfile(path):
        return f"{head}: not a file; pass --config=FILE, a python file with get_config(arg)"
    try:
        loader = importlib.machinery.SourceFileLoader("_config_file_check", path)
        spec = importlib.util.spec_from_loader(loader.name, loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except SyntaxError as e:
        return f"{head}: {type(e).__name__}: {e.msg} (line {e.lineno})"
    except Exception as e:  # noqa: BLE001 — whatever the file raises while it loads, named
        return f"{head}: loading it raised {type(e).__name__}: {e}"
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        return f"{head}: defines no get_config(); a config file's get_config(arg) returns a ConfigDict"
    try:
        config = get_config(*([arg] if colon else []))
    except Exception as e:  # noqa: BLE001 — get_config's own error, named
        if isinstance(e, ValueError):  # the file's own check of its argument: its message, naming the file
            return str(e) if os.path.basename(path) in str(e) else f"{head}: {e}"
        call = f"get_config({arg!r})" if colon else "get_config()"
        return f"{head}: {call} raised {type(e).__name__}: {e}{_renamed_block_hint(e)}"
    if not isinstance(config, ml_collections.ConfigDict):
        return f"{head}: get_config() returned {type(config).__name__}, not an ml_collections.ConfigDict"
    return None


def _renamed_block_hint(e: Exception) -> str:
    """For a config file that writes a block by its old name (`c.evaluator.X`): the new name."""
    from microcoder_jax.config import MOVED_BLOCKS

    for old, new in MOVED_BLOCKS.items():
        if isinstance(e, AttributeError) and f"'{old}'" in str(e):
            return f" (the `{old}` block is now `{new}`: write c.{new}.X where the file writes c.{old}.X)"
    return ""


def _moved_keys(argv: Sequence[str]) -> list[str]:
    """`--config.rl.off_policy_steps=1` as `--config.train.off_policy_steps=1` (config.moved_keys),
    with a note on stderr naming the new key."""
    from microcoder_jax.config import moved_keys

    moved, out = moved_keys(), []
    for a in argv:
        name, eq, value = a.partition("=")
        key = name[len("--config.") :] if name.startswith("--config.") else ""
        if key in moved:
            print(f"note: --config.{key} is now --config.{moved[key]} (read as that)", file=sys.stderr)
            a = f"--config.{moved[key]}{eq}{value}"
        out.append(a)
    return out


def _file_lists(argv: Sequence[str]) -> list[str]:
    """`--config.data.train_files=a.jsonl,b-*.jsonl` as the tuple literal config_flags parses."""
    out = []
    for a in argv:
        name, eq, value = a.partition("=")
        if eq and name[len("--config.") :] in FILE_LIST_KEYS and not value.lstrip().startswith(("(", "[")):
            a = f"{name}={tuple(p.strip() for p in value.split(',') if p.strip())!r}"
        out.append(a)
    return out


def parse(
    argv: Sequence[str] | None,
    *,
    prog: str,
    doc: str | None,
    default_file: str | None,
    define_flags: Callable[[flags.FlagValues], None] | None = None,
) -> Parsed:
    """Parse `argv` (without the program name); raises ConfigError, or prints --help and exits 0.

    `default_file`: the config file used when argv names none (a python file with get_config).
    """
    describe_host_without_tpu()  # before any backend loads libtpu: no metadata-server noise off a TPU VM
    argv = _file_lists(_moved_keys(_with_default(sys.argv[1:] if argv is None else argv, default_file)))
    helps = ("-h", "--help", "-help", "--helpfull")
    if any(a in helps for a in argv):
        print(help_text([a for a in argv if a not in helps], prog=prog, doc=doc, define_flags=define_flags))
        raise SystemExit(0)
    fv = _flag_values(define_flags, argv)
    try:
        positional = fv([prog, *argv])[1:]
        config = fv.config
        if config is None:
            raise ConfigError("no config: pass --config=FILE")
        config.keys()  # a file that failed to load raises here
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 — absl / ml_collections raise many types for one bad value
        raise ConfigError(_explain(argv, define_flags, e)) from None
    for note in migrate(config):  # a config file that sets a key by its old name
        print(f"note: {note}", file=sys.stderr)
    return Parsed(config, fv, positional)


def _usage(prog: str, doc: str | None) -> tuple[str, str]:
    """One usage line: the doc's own opening `python -m ...` synopsis when it has one, else the prog."""
    lines = (doc or "").strip().splitlines()
    if lines and lines[0].startswith("`python -m"):
        end = next((i for i, ln in enumerate(lines) if ln.rstrip().endswith("`")), 0)
        synopsis = " ".join(ln.strip() for ln in lines[: end + 1]).strip("`")
        return f"usage: {synopsis}", "\n".join(lines[end + 1 :]).strip()
    return f"usage: {prog}", "\n".join(lines)


def help_text(argv, *, prog, doc, define_flags) -> str:
    """The CLI's doc, its own flags, then every config key with its value and meaning."""
    fv = _flag_values(define_flags, argv)
    try:
        fv(["prog", *argv])
        keys = describe(fv.config if fv.config is not None else default_config())
    except Exception as e:  # noqa: BLE001 — help still prints, with the reason the keys are missing
        keys = f"  (cannot list the config keys: {_explain(argv, define_flags, e)})"
    own = [
        f"  --{name}: {fl.help}" + (f" (default: {fl.default!r})" if fl.default is not None else "")
        for name, fl in sorted(fv._flags().items())
        if name != "config" and name == fl.name
    ]
    source = next((a.partition("=")[2] for a in argv if a.startswith("--config=")), "the defaults")
    usage, text = _usage(prog, doc)
    return "\n".join(
        [
            usage,
            "",
            text,
            "",
            "flags:",
            "  --config=FILE[:ARG]: a config file (a python file with get_config(arg))",
            *own,
            "",
            f"config keys (values from {source}; override with --config.KEY=VALUE):",
            keys,
        ]
    )


def load_config(path: str | None = None, overrides: Sequence[str] = ()):
    """A config from Python as from the command line: `path` (None = the demo) and `KEY=VALUE`s."""
    from microcoder_jax.config import DEFAULT_FILE

    argv = ([f"--config={path}"] if path else []) + [f"--config.{o}" for o in overrides]
    return parse(argv, prog="load_config", doc="", default_file=DEFAULT_FILE).config


def main_guard(fn: Callable[[], int]) -> int:
    """Run a CLI body: a ConfigError is `error: ...` on stderr (one line per problem) and exit status 2."""
    try:
        return fn()
    except ConfigError as e:
        for line in str(e).splitlines() or [type(e).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return 2


def run_name(argv: Sequence[str], default: str) -> str:
    """A run's default name from its config argument: configs/paper.py:qwen3-4b,dapo -> paper_qwen3-4b_dapo."""
    for i, a in enumerate(argv):
        value = (
            a.partition("=")[2]
            if a.startswith("--config=")
            else (argv[i + 1] if a == "--config" and i + 1 < len(argv) else None)
        )
        if value:
            path, _, arg = value.partition(":")
            name = os.path.splitext(os.path.basename(path))[0]
            return "_".join([name, *[p for p in arg.split(",") if p]])
    return default
