"""Collect: read raw problem rows from local dumps, tagged with their source and format.

A source is a file, a glob, or a directory searched recursively for JSONL/JSON/Parquet files and
the Arrow files of a local Hugging Face `datasets` cache (read with pyarrow; `datasets` is not
needed). Format `dir` instead reads a directory of problems with `.in`/`.out` test files.
Rows stay raw here; `process` turns them into `Problem`s. A row that cannot be read is logged and
counted, never fatal.
"""
from __future__ import annotations

import base64
import datetime
import glob
import json
import logging
import os
from typing import Any, Iterator

from microcoder_jax.data.jsonl import BadLine, read_jsonl

log = logging.getLogger(__name__)

FORMATS = ("auto", "lcb", "apps", "codecontests", "deepcoder", "ours", "dir")
ROW_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")
STATEMENT_FILES = ("statement.md", "statement.txt", "problem.md", "problem.txt", "README.md")


def detect_format(row: dict) -> str:
    """The row format from its keys; raises ValueError for an unknown shape."""
    if "public_test_cases" in row or "private_test_cases" in row:
        return "lcb"
    if "description" in row and any(k in row for k in ("public_tests", "private_tests", "generated_tests")):
        return "codecontests"
    if "input_output" in row:
        return "apps"
    if "question_id" in row and isinstance(row.get("tests"), list):
        return "ours"
    if "problem" in row and "tests" in row:
        return "deepcoder"
    raise ValueError(f"unknown row format (keys: {sorted(row)[:12]})")


def row_files(path: str) -> list[str]:
    """The row files a source path names: itself, a glob's matches, or a directory's (recursive)."""
    if os.path.isdir(path):
        found = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(root, f) for f in sorted(files) if _is_row_file(f)]
        return found
    if any(c in path for c in "*?["):
        return sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
    if os.path.isfile(path):
        return [path]
    raise FileNotFoundError(f"source path does not exist: {path}")


def _is_row_file(name: str) -> bool:
    # A datasets cache also holds `cache-*.arrow` files of mapped copies: skip those.
    return name.endswith(ROW_FILE_SUFFIXES) and not name.startswith(("cache-", "state.json", "dataset_info"))


def iter_file_rows(path: str, stats: dict) -> Iterator[tuple[int, dict]]:
    """(row index, row dict) of one file; unreadable rows bump stats['malformed'] and are skipped."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        index = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=64):
            for row in batch.to_pylist():
                yield index, row
                index += 1
    elif path.endswith(".arrow"):
        yield from enumerate(_arrow_rows(path))
    elif path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
        for index, row in enumerate(rows if isinstance(rows, list) else [rows]):
            if isinstance(row, dict):
                yield index, row
            else:
                _malformed(stats, path, index, f"row is a {type(row).__name__}")
    else:
        for index, row in read_jsonl(path, errors="replace"):
            if isinstance(row, BadLine):
                _malformed(stats, path, index, f"invalid JSON: {row.error}")
            elif isinstance(row, dict):
                yield index, row
            else:
                _malformed(stats, path, index, f"row is a {type(row).__name__}")


def _guarded(path: str, stats: dict) -> Iterator[tuple[int, dict]]:
    """The rows of one file; a file that cannot be read (corrupt, truncated, not UTF-8) is logged
    and counted in stats['unreadable_files'], keeping the rows read before the damage."""
    try:
        yield from iter_file_rows(path, stats)
    except (OSError, ValueError, UnicodeDecodeError) as e:  # pyarrow errors subclass these
        stats["unreadable_files"] = stats.get("unreadable_files", 0) + 1
        log.error("%s: unreadable, skipped: %s: %s", path, type(e).__name__, e)


def _arrow_rows(path: str) -> Iterator[dict]:
    """Rows of an Arrow IPC file: `datasets` caches use the stream format; accept the file one too."""
    import pyarrow as pa

    with pa.memory_map(path) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield from reader.get_batch(i).to_pylist()
            return
        for batch in reader:
            yield from batch.to_pylist()


def _malformed(stats: dict, path: str, index: int, why: str) -> None:
    stats["malformed"] = stats.get("malformed", 0) + 1
    log.warning("%s: row %d skipped: %s", path, index, why)


def read_problem_dir(root: str, stats: dict) -> Iterator[tuple[int, dict]]:
    """Problems laid out one per folder: a statement file, `*.in` tests with `.out` (or `.ans`)
    answers anywhere below, optional `solution*.py` / `solutions/*.py`, `checker.py`, and a
    `meta.json` whose keys (difficulty, func_name, starter_code, platform, contest_date...) are
    copied into the row. A folder without `.in` files is not a problem; one with a `.in` missing its
    answer is malformed."""
    index = 0
    for folder in sorted(os.listdir(root)):
        path = os.path.join(root, folder)
        if not os.path.isdir(path) or folder.startswith("."):
            continue
        try:
            row = _problem_folder(path)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            _malformed(stats, path, index, str(e))
            index += 1
            continue
        if row is not None:
            yield index, row
        index += 1


def _problem_folder(path: str) -> dict | None:
    inputs = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        inputs += [os.path.join(root, f) for f in sorted(files) if f.endswith(".in")]
    if not inputs:
        return None
    tests = []
    for inp in inputs:
        stem = inp[: -len(".in")]
        answer = next((stem + s for s in (".out", ".ans") if os.path.isfile(stem + s)), None)
        if answer is None:
            raise ValueError(f"{os.path.relpath(inp, path)} has no .out/.ans file")
        tests.append({"input": _read(inp), "output": _read(answer), "name": os.path.relpath(stem, path)})
    row: dict[str, Any] = {"question_id": os.path.basename(path), "tests": tests}
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


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def iter_source(source: dict, stats: dict) -> Iterator[dict]:
    """Raw records of one configured source: {"source", "format", "origin", "row"}.

    `source` has `name`, `path`, `format` (one of FORMATS; `auto` detects it per row) and `limit`
    (max rows, 0 = all). Rows of an unknown format are counted as malformed and skipped.
    """
    name, fmt, limit = source["name"], source.get("format", "auto"), int(source.get("limit", 0) or 0)
    if fmt not in FORMATS:
        raise ValueError(f"source {name}: unknown format {fmt!r}; expected one of {FORMATS}")
    if fmt == "dir":
        if not os.path.isdir(source["path"]):
            raise FileNotFoundError(f"source {name}: not a directory: {source['path']}")
        rows = ((source["path"], i, row) for i, row in read_problem_dir(source["path"], stats))
    else:
        rows = ((f, i, row) for f in row_files(source["path"]) for i, row in _guarded(f, stats))
    count = 0
    for path, index, row in rows:
        if limit and count >= limit:
            break
        origin = f"{path}:{index}"
        try:
            row_format = fmt if fmt != "auto" else detect_format(row)
        except ValueError as e:
            _malformed(stats, path, index, str(e))
            continue
        count += 1
        yield {"source": name, "format": row_format, "origin": origin, "row": jsonable(row)}
    stats["rows"] = stats.get("rows", 0) + count


def jsonable(value: Any) -> Any:
    """Parquet/Arrow values made JSON-ready: bytes as text (or base64), dates as ISO strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN from pandas-written Parquet
        return None
    return value
