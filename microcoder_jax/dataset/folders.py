"""Problems laid out one per folder (source format `dir`), three layouts detected per folder:

- Kattis problem packages: `problem.yaml`, `problem_statement/problem.<lang>.tex` (or
  `statement/`) as the statement, `data/sample` and `data/secret` `.in`/`.ans` tests,
  `submissions/accepted/*.py` as references, `limits.time_limit` of problem.yaml (or a
  `.timelimit` file) as metadata["time_limit"]. A README.md is never the statement.
- Raw APPS folders: `question.txt`, `input_output.json`, `solutions.json`, `metadata.json`,
  `starter_code.py` (read as an APPS row, so with the APPS harness).
- Ours: a statement file, `*.in` tests with `.out` (or `.ans`) answers anywhere below, optional
  `solution*.py` / `solutions/*.py`, `checker.py`, and a `meta.json` whose keys (difficulty,
  func_name, starter_code, platform, contest_date...) are copied into the row.

A folder that is none of these is searched for problem folders one level down (an APPS checkout's
train/ and test/), else ignored.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Iterator

from microcoder_jax.dataset.drops import RowError

STATEMENT_FILES = ("statement.md", "statement.txt", "problem.md", "problem.txt")
MAX_DEPTH = 2


def read_problem_dir(root: str, drop) -> Iterator[tuple[str, dict, str]]:
    """(folder, row, row format) of every problem folder under `root`; a folder that cannot be
    read is passed to `drop(folder, error)` and skipped."""
    yield from _walk(root, drop, 0)


def _walk(root: str, drop, depth: int):
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path) or name.startswith("."):
            continue
        kind = folder_kind(path)
        if kind is None:
            if depth < MAX_DEPTH:
                yield from _walk(path, drop, depth + 1)
            continue
        try:
            row = {"kattis": _kattis_folder, "apps": _apps_folder, "tests": _tests_folder}[kind](path)
        except RowError as e:
            drop(path, e)
            continue
        except (OSError, ValueError, UnicodeDecodeError) as e:
            drop(path, RowError("bad_folder", f"{type(e).__name__}: {e}"))
            continue
        yield path, row, "apps" if kind == "apps" else "dir"


def folder_kind(path: str) -> str | None:
    """'kattis', 'apps', 'tests' (ours) or None (not a problem folder)."""
    if os.path.isfile(os.path.join(path, "problem.yaml")) or _statement_tex(path):
        return "kattis"
    if any(os.path.isfile(os.path.join(path, f)) for f in ("input_output.json", "question.txt")):
        return "apps"
    for _, _, files in os.walk(path):
        if any(f.endswith(".in") for f in files):
            return "tests"
    return None


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _tests(path: str, answers=(".out", ".ans")) -> list[dict]:
    inputs = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        inputs += [os.path.join(root, f) for f in sorted(files) if f.endswith(".in")]
    tests = []
    for inp in inputs:
        stem = inp[: -len(".in")]
        answer = next((stem + s for s in answers if os.path.isfile(stem + s)), None)
        if answer is None:
            raise RowError("test_without_answer", f"{os.path.relpath(inp, path)} has no {'/'.join(answers)} file")
        tests.append({"input": _read(inp), "output": _read(answer), "name": os.path.relpath(stem, path)})
    return tests


def _tests_folder(path: str) -> dict:
    row: dict[str, Any] = {"question_id": os.path.basename(path), "tests": _tests(path)}
    for name in STATEMENT_FILES:
        if os.path.isfile(os.path.join(path, name)):
            row["statement"] = _read(os.path.join(path, name))
            break
    solutions = sorted(glob.glob(os.path.join(path, "solution*.py")))
    solutions += sorted(glob.glob(os.path.join(path, "solutions", "*.py")))
    row["solutions"] = [_read(s) for s in solutions]
    if os.path.isfile(os.path.join(path, "checker.py")):
        row["checker"] = _read(os.path.join(path, "checker.py"))
    if os.path.isfile(os.path.join(path, "meta.json")):
        meta = json.loads(_read(os.path.join(path, "meta.json")))
        if not isinstance(meta, dict):
            raise ValueError("meta.json is not an object")
        row.update({k: v for k, v in meta.items() if k not in row})
    return row


def _apps_folder(path: str) -> dict:
    """An APPS row from its folder (codeparrot/apps' train/NNNN and test/NNNN)."""

    def text(name):
        full = os.path.join(path, name)
        return _read(full) if os.path.isfile(full) else None

    io_spec = text("input_output.json")
    if not io_spec or not io_spec.strip():
        raise RowError("no_tests", "no input_output.json")
    meta = json.loads(text("metadata.json") or "{}")
    row = {
        "problem_id": os.path.basename(path),
        "question": text("question.txt") or "",
        "input_output": io_spec,
        "solutions": text("solutions.json"),
        "starter_code": text("starter_code.py") or "",
    }
    if isinstance(meta, dict):
        row.update({k: meta[k] for k in ("difficulty", "url", "name", "source") if meta.get(k) is not None})
    return row


def _statement_tex(path: str) -> str | None:
    for sub in ("problem_statement", "statement"):
        found = sorted(glob.glob(os.path.join(path, sub, "problem*.tex")))
        for preferred in ("problem.en.tex", "problem.tex"):
            if os.path.join(path, sub, preferred) in found:
                return os.path.join(path, sub, preferred)
        if found:
            return found[0]
    return None


def _kattis_folder(path: str) -> dict:
    import yaml

    config = {}
    if os.path.isfile(os.path.join(path, "problem.yaml")):
        try:
            config = yaml.safe_load(_read(os.path.join(path, "problem.yaml"))) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"problem.yaml: {e}") from None
        if not isinstance(config, dict):
            raise ValueError("problem.yaml is not a mapping")
    tests = _tests(os.path.join(path, "data"), answers=(".ans",)) if os.path.isdir(os.path.join(path, "data")) else []
    tex = _statement_tex(path)
    row: dict[str, Any] = {
        "question_id": os.path.basename(path),
        "tests": tests,
        "statement": tex_to_text(_read(tex)) if tex else "",
        "kattis_package": True,
    }
    accepted = sorted(glob.glob(os.path.join(path, "submissions", "accepted", "*.py")))
    row["solutions"] = [_read(s) for s in accepted]
    limits = config.get("limits")
    if not isinstance(limits, dict):
        limits = {}
    if isinstance(limits.get("time_limit"), (int, float)):
        row["time_limit"] = float(limits["time_limit"])
    elif os.path.isfile(os.path.join(path, ".timelimit")):
        row["time_limit"] = float(_read(os.path.join(path, ".timelimit")).split()[0])
    validation = str(config.get("validation") or "default")
    if "interactive" in validation:
        row["tags"] = ["interactive"]
    elif validation.startswith("custom"):
        row["custom_validation"] = True  # an output validator decides: exact comparison cannot
    for key in ("name", "source", "author"):
        if isinstance(config.get(key), str):
            row[f"kattis_{key}"] = config[key]
    return row


_TEX_DROP = re.compile(r"\\(?:illustration|includegraphics)(?:\[[^\]]*\])?(?:\{[^}]*\}){1,3}")
_TEX_SECTION = re.compile(r"\\(?:sub)*section\*?\{([^}]*)\}")
_TEX_STYLE = re.compile(r"\\(?:textbf|textit|emph|texttt|textsc|underline|url)\{([^}]*)\}")
_TEX_ENV = re.compile(r"\\(?:begin|end)\{[^}]*\}(?:\[[^\]]*\])?")


def tex_to_text(tex: str) -> str:
    """A Kattis statement's LaTeX as plain text: title, section headings, lists and styling made
    plain, figures dropped; math ($...$) kept as it is (as Codeforces-derived statements have it)."""
    tex = re.sub(r"(?<!\\)%.*", "", tex)
    tex = re.sub(r"\\problemname\{([^}]*)\}", r"\1\n", tex)
    tex = _TEX_DROP.sub("", tex)
    tex = _TEX_SECTION.sub(r"\n\1\n", tex)
    tex = _TEX_STYLE.sub(r"\1", tex)
    tex = _TEX_ENV.sub("", tex)
    tex = tex.replace("\\item", "- ").replace("\\\\", "\n").replace("~", " ")
    return re.sub(r"\n{3,}", "\n\n", tex).strip()
