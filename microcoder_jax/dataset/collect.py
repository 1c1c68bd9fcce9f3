"""Collect: read raw problem rows from local dumps, tagged with their source and format.

A source is a file, a glob, or a directory searched recursively for JSONL/JSON/Parquet files and
the Arrow files of a local Hugging Face `datasets` cache (read with pyarrow; `datasets` is not
needed). Format `dir` instead reads a directory of problem folders (folders.py: ours, raw APPS,
Kattis packages). Rows stay raw here; `process` turns them into `Problem`s. A row that cannot be
read is counted by reason (drops.py) and logged once per source and reason, never fatal.
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
from microcoder_jax.dataset.drops import Drops, RowError
from microcoder_jax.dataset.folders import read_problem_dir

log = logging.getLogger(__name__)

FORMATS = ("auto", "lcb", "apps", "codecontests", "deepcoder", "leetcode", "ours", "dir")
ROW_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")
_CC_TESTS = ("public_tests", "private_tests", "generated_tests")


def detect_format(row: dict) -> str:
    """The row format from its keys; raises RowError("unknown_format") for an unknown shape."""
    if "public_test_cases" in row or "private_test_cases" in row:
        return "lcb"
    if ("description" in row or "problem" in row) and any(k in row for k in _CC_TESTS):
        return "codecontests"
    if "test" in row and ("entry_point" in row or "completion" in row):
        return "leetcode"  # LeetCodeDataset / human-eval: check(candidate) assert tests
    if "input_output" in row:
        return "apps"
    if "question_id" in row and isinstance(row.get("tests"), list):
        return "ours"
    if "problem" in row and ("tests" in row or "test_cases" in row):
        return "deepcoder"
    raise RowError("unknown_format", f"unknown row format (keys: {sorted(row)[:12]})")


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


def iter_file_rows(path: str, drop) -> Iterator[tuple[int, dict | None]]:
    """(row index, row dict) of one file; a row that is not an object is passed to
    `drop(index, RowError)` and yielded as None (it still counts toward a source's limit)."""
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
            yield index, _object(row, index, drop)
    else:
        for index, row in read_jsonl(path, errors="replace"):
            if isinstance(row, BadLine):
                drop(index, RowError("invalid_json", f"invalid JSON: {row.error}"))
                yield index, None
            else:
                yield index, _object(row, index, drop)


def _object(row, index: int, drop) -> dict | None:
    if isinstance(row, dict):
        return row
    drop(index, RowError("not_an_object", f"row is a {type(row).__name__}"))
    return None


def _guarded(path: str, stats: dict, drop) -> Iterator[tuple[int, dict | None]]:
    """The rows of one file; a file that cannot be read (corrupt, truncated, not UTF-8) is logged
    and counted in stats['unreadable_files'], keeping the rows read before the damage."""
    try:
        yield from iter_file_rows(path, drop)
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


def iter_source(source: dict, stats: dict, drops: Drops | None = None) -> Iterator[dict]:
    """Raw records of one configured source: {"source", "format", "origin", "row"} (+ "harness").

    `source` has `name`, `path`, `format` (one of FORMATS; `auto` detects it per row), `limit`
    (max rows read, dropped ones included; 0 = all; reading stops there) and `harness` (how stdin
    programs run, problems.STDIN_HARNESSES; "" = by format). Dropped rows are counted in
    stats["dropped"] by reason and logged once per reason when the source is done.
    """
    name, fmt, limit = source["name"], source.get("format", "auto"), int(source.get("limit", 0) or 0)
    if fmt not in FORMATS:
        raise ValueError(f"source {name}: unknown format {fmt!r}; expected one of {FORMATS}")
    drops = drops or Drops("collect")
    harness = source.get("harness") or ""
    if fmt == "dir":
        if not os.path.isdir(source["path"]):
            raise FileNotFoundError(f"source {name}: not a directory: {source['path']}")
        found = read_problem_dir(source["path"], lambda path, e: drops.error(name, path, e))
        rows = ((path, None, row, row_format) for path, row, row_format in found)
    else:

        def file_rows(f):
            for i, row in _guarded(f, stats, lambda i, e: drops.error(name, f"{f}:{i}", e)):
                yield f, i, row, None

        rows = (item for f in row_files(source["path"]) for item in file_rows(f))
    count = read = 0
    for path, index, row, row_format in rows:
        read += 1
        if row is not None:
            origin = path if index is None else f"{path}:{index}"
            try:
                row_format = row_format or (fmt if fmt != "auto" else detect_format(row))
            except RowError as e:
                drops.error(name, origin, e)
            else:
                count += 1
                record = {"source": name, "format": row_format, "origin": origin, "row": jsonable(row)}
                if harness:
                    record["harness"] = harness
                yield record
        if limit and read >= limit:
            break  # stops reading the file too
    stats["rows"] = stats.get("rows", 0) + count
    if drops.of(name):
        stats["dropped"] = drops.of(name)
    drops.log(name)


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
