"""The problem schema of the project, and readers for the public problem formats.

One `Problem` holds what the judge needs (tests, call-based entry point, checker, tolerance) plus
the prompt-side fields (statement, starter code) and provenance. Readers convert LiveCodeBench
`code_generation_lite` rows, APPS/TACO `input_output` rows and our own `to_json()` rows (the
dataset pipeline, dataset/readers.py, reads the other public layouts).

Call-based tests use the LiveCodeBench convention throughout: `input` is one JSON value per
argument, newline-separated; `output` is one JSON value (the return value). An `assert` test is
Python test code defining `check(candidate)` (LeetCode/HumanEval style), run in the sandbox with
the entry point as `candidate`; its `output` is empty.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import logging
import os
import pickle
import re
import zlib
from typing import Any, Iterator, cast

from microcoder_jax.data.jsonl import BadLine, read_jsonl

log = logging.getLogger(__name__)

TEST_KINDS = ("stdin", "functional", "assert")
CALL_KINDS = ("functional", "assert")  # test kinds that call the entry point `func_name`
# How a stdin program is run: "plain" (ours, LiveCodeBench: the file as __main__) or "apps" (also
# accepts a top-level `return`, as the APPS/TACO harness does by running the program in a function).
STDIN_HARNESSES = ("plain", "apps")


@dataclasses.dataclass
class TestCase:
    """One test: stdin text and expected stdout, or JSON arguments and the JSON return value."""

    __test__ = False  # not a pytest class

    input: str
    output: str
    kind: str = "stdin"

    def __post_init__(self):
        if self.kind not in TEST_KINDS:
            raise ValueError(f"test kind must be one of {TEST_KINDS}, got {self.kind!r}")
        if not isinstance(self.input, str) or not isinstance(self.output, str):
            raise TypeError("test input and output must be str")


@dataclasses.dataclass
class Problem:
    """A judgeable problem. `func_name` set means call-based (a method of `Solution`, or a function).
    `metadata["public_tests"]`: how many of the first tests are public (the statement's examples,
    LiveCodeBench's public_test_cases); the rest are private (`public_tests` / `private_tests`)."""

    question_id: str
    tests: list[TestCase]
    func_name: str | None = None
    starter_code: str = ""
    question_content: str = ""
    platform: str = ""
    difficulty: str = ""
    contest_date: str = ""
    checker: str | None = None  # Python source defining check(input, expected, actual) -> bool
    float_tolerance: float = 1e-6  # absolute-or-relative, applied where the expected token is real
    source: str = ""
    solutions: list[str] = dataclasses.field(default_factory=list)  # reference programs, if known
    metadata: dict = dataclasses.field(default_factory=dict)

    @property
    def call_based(self) -> bool:
        return self.func_name is not None

    def to_json(self) -> dict:
        """A JSON-ready dict (our own row format); `from_json` reads it back. Shallow: the strings
        are shared, not copied (`dataclasses.asdict` deep-copies, 10x slower on big test sets)."""
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        row["tests"] = [{f.name: getattr(t, f.name) for f in dataclasses.fields(t)} for t in self.tests]
        row["solutions"] = list(self.solutions)
        row["metadata"] = dict(self.metadata)
        return row

    @classmethod
    def from_json(cls, row: dict | str) -> "Problem":
        """Inverse of `to_json`; also accepts the JSON text. Unknown keys go to `metadata`."""
        if isinstance(row, (str, bytes)):
            row = cast(dict, json.loads(row))  # a problem is a JSON object
        row = dict(row)
        tests = [t if isinstance(t, TestCase) else TestCase(**t) for t in _as_list(row.pop("tests"))]
        fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in row.items() if k in fields}
        extra = {k: v for k, v in row.items() if k not in fields}
        metadata = dict(known.pop("metadata", None) or {})
        metadata.update(extra)
        if "solutions" not in known and "solutions" in metadata:  # rows written before the field
            known["solutions"] = metadata.pop("solutions")
        known["solutions"] = [str(s) for s in known.get("solutions") or []]
        known["question_id"] = str(known["question_id"])
        if known.get("float_tolerance") is None:
            known.pop("float_tolerance", None)
        problem = cls(tests=tests, metadata=metadata, **known)
        _check_kinds(problem)
        return problem

    @classmethod
    def from_lcb_row(cls, row: dict) -> "Problem":
        """A LiveCodeBench `code_generation_lite` row (private tests may be compressed)."""
        meta = row.get("metadata") or {}
        if isinstance(meta, str):
            meta = json.loads(meta) if meta.strip() else {}
        tests = [_lcb_test(t) for t in _decode_lcb_tests(row.get("public_test_cases"))]
        public = len(tests)
        tests += [_lcb_test(t) for t in _decode_lcb_tests(row.get("private_test_cases"))]
        if not tests:
            raise ValueError("no test cases")
        func_name = meta.get("func_name") or None
        if func_name is None and any(t.kind in CALL_KINDS for t in tests):
            func_name = func_name_from_starter(row.get("starter_code") or "")
            if func_name is None:
                raise ValueError("functional tests but no func_name in metadata or starter code")
            meta = {**meta, "func_name_from_starter": True}
        problem = cls(
            question_id=str(row["question_id"]),
            tests=tests,
            func_name=func_name,
            starter_code=row.get("starter_code") or "",
            question_content=row.get("question_content") or "",
            platform=str(row.get("platform") or ""),
            difficulty=str(row.get("difficulty") or ""),
            contest_date=str(row.get("contest_date") or ""),
            source="livecodebench",
            metadata={k: v for k, v in meta.items() if k != "func_name"} | {"public_tests": public},
        )
        _check_kinds(problem)
        return problem

    @classmethod
    def from_apps_row(cls, row: dict, question_id: str | None = None) -> "Problem":
        """An APPS/TACO row: `input_output` = {inputs, outputs, fn_name?} (JSON text or dict).

        Call-based inputs are argument lists; they become newline-separated JSON, one per argument.
        APPS wraps call-based outputs in a one-element list; when every output of a problem is
        wrapped that way, it is unwrapped (recorded in metadata as `apps_outputs_unwrapped`).
        """
        io_spec = row["input_output"]
        if isinstance(io_spec, str):
            io_spec = json.loads(io_spec)
        inputs, outputs = io_spec.get("inputs"), io_spec.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list):
            raise ValueError("input_output needs lists 'inputs' and 'outputs'")
        if len(inputs) != len(outputs):
            raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
        if not inputs:
            raise ValueError("no test cases")
        func_name = io_spec.get("fn_name") or None
        metadata: dict[str, Any] = {}
        if func_name is None:
            tests = [TestCase(_apps_text(i), _apps_text(o), "stdin") for i, o in zip(inputs, outputs)]
        else:
            if all(isinstance(o, list) and len(o) == 1 for o in outputs):
                outputs = [o[0] for o in outputs]
                metadata["apps_outputs_unwrapped"] = True
            tests = [TestCase(_call_args(args), json.dumps(out), "functional") for args, out in zip(inputs, outputs)]
        qid = question_id
        if qid is None:
            for key in ("question_id", "problem_id", "id", "name", "url"):
                if row.get(key) not in (None, ""):
                    qid = str(row[key])
                    break
        if qid is None:
            raise ValueError("row has no question_id / problem_id / id / name / url")
        for key in ("tags", "skill_types", "time_limit", "memory_limit", "url", "name"):
            if row.get(key) not in (None, ""):
                metadata[key] = row[key]
        return cls(
            question_id=qid,
            tests=tests,
            func_name=func_name,
            starter_code=row.get("starter_code") or "",
            question_content=row.get("question") or row.get("question_content") or "",
            platform=str(row.get("platform") or ""),
            difficulty=str(row.get("difficulty") or ""),
            contest_date=str(row.get("date") or row.get("contest_date") or ""),
            source=str(row.get("source") or "apps"),
            metadata=metadata,
        )


_CLASS_RE = re.compile(r"^class\s+Solution\b[^\n]*:", re.MULTILINE)
_DEF_RE = re.compile(r"^([ \t]*)def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


def public_tests(problem: Problem) -> list[TestCase]:
    """The tests a solver may see (metadata["public_tests"] leading ones; none when unset)."""
    n = int(problem.metadata.get("public_tests") or 0)
    return list(problem.tests[: max(0, min(n, len(problem.tests)))])


def private_tests(problem: Problem) -> list[TestCase]:
    """The tests never shown: all but the public ones."""
    return list(problem.tests[len(public_tests(problem)) :])


def func_name_from_starter(starter_code: str) -> str | None:
    """The entry point a starter code declares: the first public method of `class Solution`
    (`class Solution:\\n    def countSeniors(self, ...`), else its first top-level function."""
    match = _CLASS_RE.search(starter_code)
    if match:
        for m in _DEF_RE.finditer(starter_code, match.end()):
            if m.group(1) and not m.group(2).startswith("_"):
                return m.group(2)
            if not m.group(1):
                break
    for m in _DEF_RE.finditer(starter_code):
        if not m.group(1) and not m.group(2).startswith("_"):
            return m.group(2)
    return None


def problem_from_row(row: dict, index: int | None = None) -> Problem:
    """Detect the row format (ours, LiveCodeBench, APPS/TACO) and convert it."""
    if not isinstance(row, dict):
        raise ValueError(f"row is a {type(row).__name__}, not an object")
    if "tests" in row:
        return Problem.from_json(row)
    if "public_test_cases" in row or "private_test_cases" in row:
        return Problem.from_lcb_row(row)
    if "input_output" in row:
        qid = None if _has_id(row) or index is None else f"row-{index}"
        return Problem.from_apps_row(row, question_id=qid)
    raise ValueError("unknown row format: expected 'tests', 'public_test_cases' or 'input_output'")


def load_problems(path: str | os.PathLike, *, skip_malformed: bool = False) -> list[Problem]:
    """Read problems from JSONL, JSON (a list of rows) or Parquet, detecting each row's format.

    A malformed row raises `ValueError` naming the file and row; with `skip_malformed=True` it is
    skipped and the count is logged as a warning.
    """
    path = os.fspath(path)
    problems, skipped, first_error = [], 0, None
    for index, row in _iter_rows(path):
        try:
            problems.append(problem_from_row(row, index))
        except Exception as e:  # noqa: BLE001 - any defect of one row is reported the same way
            message = f"{path}: row {index}{_row_label(row)}: {type(e).__name__}: {e}"
            if not skip_malformed:
                raise ValueError(message) from e
            skipped += 1
            first_error = first_error or message
    if skipped:
        log.warning("skipped %d malformed problem rows of %s (first: %s)", skipped, path, first_error)
    if not problems:
        log.warning("%s: the problem file holds no problems", path)
    empty = without_tests(problems)
    if empty:  # (a str first: data.loader counts records whose first argument is an int as skipped rows)
        log.warning(
            "%s: %d problems have no tests (judged judge_error; training should skip them): %s",
            path,
            len(empty),
            ", ".join(empty[:10]) + (" ..." if len(empty) > 10 else ""),
        )
    return problems


def without_tests(problems) -> list[str]:
    """The question_ids of the problems that have no tests: nothing can judge them, so they can
    give no reward (the judge answers judge_error; a trainer should leave them out and count them)."""
    return [p.question_id for p in problems if not p.tests]


def save_problems(problems: list[Problem], path: str | os.PathLike) -> None:
    """Write problems as JSONL in our own row format."""
    with open(path, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps(p.to_json(), ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# helpers


def _iter_rows(path: str) -> Iterator[tuple[int, Any]]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        yield from enumerate(pq.read_table(path).to_pylist())
        return
    with open(path, encoding="utf-8") as f:
        if path.endswith(".json"):
            rows = json.load(f)
            if not isinstance(rows, list):
                raise ValueError(f"{path}: expected a JSON list of rows")
            yield from enumerate(rows)
            return
    yield from read_jsonl(path)  # a line that does not parse is a BadLine, reported like any bad row


def _row_label(row: Any) -> str:
    if isinstance(row, BadLine):
        return f" (invalid JSON: {row.error})"
    if isinstance(row, dict):
        for key in ("question_id", "problem_id", "id", "name"):
            if row.get(key) not in (None, ""):
                return f" ({key}={row[key]!r})"
    return ""


def _has_id(row: dict) -> bool:
    return any(row.get(k) not in (None, "") for k in ("question_id", "problem_id", "id", "name", "url"))


def _as_list(value: Any) -> list:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list):
        raise ValueError(f"expected a list of tests, got {type(value).__name__}")
    return value


class _DataOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any class or function reference is refused (no code runs)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test-case pickle")


def _decode_lcb_tests(value: Any) -> list:
    """LCB test lists are JSON text, or base64(zlib(pickle(JSON text))) for private tests."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise ValueError(f"test cases must be a JSON string, got {type(value).__name__}")
    try:
        return _as_list(value)
    except (json.JSONDecodeError, ValueError):
        pass
    try:
        raw = zlib.decompress(base64.b64decode(value, validate=False))
        decoded = _DataOnlyUnpickler(io.BytesIO(raw)).load()
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"test cases are neither JSON nor base64/zlib/pickle: {e}") from e
    return _as_list(decoded)


def _lcb_test(t: Any) -> TestCase:
    if not isinstance(t, dict) or "input" not in t or "output" not in t:
        raise ValueError(f"test case must have 'input' and 'output': {str(t)[:80]}")
    kind = t.get("testtype", "stdin")
    return TestCase(str(t["input"]), str(t["output"]), kind)


def _apps_text(value: Any) -> str:
    """APPS/TACO stdin tests are strings, occasionally lists of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value) + ("\n" if value and not value[-1].endswith("\n") else "")
    raise ValueError(f"stdin test must be text or a list of lines, got {str(value)[:80]}")


def _call_args(args: Any) -> str:
    if not isinstance(args, list):
        raise ValueError(f"call-based inputs must be argument lists, got {str(args)[:80]}")
    return "\n".join(json.dumps(a) for a in args)


def _check_kinds(problem: Problem) -> None:
    kinds = {t.kind for t in problem.tests}
    if len(kinds) > 1:
        raise ValueError(f"mixed test kinds {sorted(kinds)}")
    if problem.call_based and kinds == {"stdin"}:
        raise ValueError("func_name given but tests are stdin")
    if not problem.call_based and kinds and kinds <= set(CALL_KINDS):
        raise ValueError("functional tests but no func_name")
