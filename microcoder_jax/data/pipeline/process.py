"""Process: raw collected rows -> `microcoder_jax.problems.Problem` (the one schema of the project).

Per row: convert by format (LiveCodeBench and APPS/TACO through the schema's own readers;
CodeContests, DeepCoder and problem folders here), decode tests, keep Python reference solutions in
`Problem.solutions`, clean the statement (markup, source-specific "read from stdin / write the
code" boilerplate removed, so the prompt template alone states the I/O contract), normalise
difficulty to easy/medium/hard and dates to ISO, and make every call-based problem carry starter
code. Question ids get the source name as prefix so ids from different dumps never collide.
"""
from __future__ import annotations

import ast
import hashlib
import html
import json
import re
from typing import Any

from microcoder_jax.data.dates import parse_date  # noqa: F401 (re-exported: the readers' date parser)
from microcoder_jax.problems import Problem, TestCase

# CodeContests enums (deepmind/code_contests, contest_problem.proto).
CC_SOURCES = {1: "codechef", 2: "codeforces", 3: "hackerearth", 4: "codejam", 5: "atcoder", 6: "aizu"}
# EASY..HARDEST = 1..5, EXTERNAL = 6, then Codeforces letters A = 7, B = 8, ...: A-B easy, C-D medium.
CC_DIFFICULTY = {1: "easy", 2: "medium", 3: "hard", 4: "hard", 5: "hard",
                 7: "easy", 8: "easy", 9: "medium", 10: "medium"}
CC_PYTHON3 = 3  # Language.PYTHON3; 1 is Python 2, which our judge does not run.

_DIFFICULTY_WORDS = {
    "easy": "easy", "introductory": "easy", "very_easy": "easy",
    "medium": "medium", "interview": "medium",
    "hard": "hard", "medium_hard": "hard", "very_hard": "hard", "competition": "hard",
}  # fmt: skip

# Source-specific instructions that would contradict or duplicate the prompt template's own, each
# with a lower-case phrase it contains (the regex runs only when the phrase is there: cheap).
_BOILERPLATE = [
    ("solve the following coding problem",
     r"^\s*Solve the following coding problem using the programming language python3?:?\s*"),
    ("printed to stdout", r"\s*The input will be (?:given via|read from) stdin and the output (?:should|will) be "
                          r"printed to stdout by your code\.?"),
    ("as argument", r"\s*The input will be given as arguments? to the function.*?\.\s*"),
    ("providing the code", r"\s*Now solve the problem by providing the code\.?\s*$"),
    ("read the inputs from stdin",
     r"\s*Read the inputs from stdin,? solve the problem,? and write the answer to stdout.*$"),
    ("to solve the problem", r"\s*Write (?:a )?Python (?:code|program|function) to solve the problem\..*$"),
    ("following starter code", r"\s*You will use the following starter code to write the solution.*$"),
]
_BOILERPLATE_RE = [(hint, re.compile(p, re.IGNORECASE | re.DOTALL)) for hint, p in _BOILERPLATE]
_TAGS = "p|div|span|b|i|em|strong|code|pre|ul|ol|li|h[1-6]|br|hr|img|table|tr|td|th|tt|center|font"
_TAG_RE = re.compile(rf"</?(?:{_TAGS})\b[^<>]*>", re.IGNORECASE)
_HEADING_RE = re.compile(r"^-{3,}\s*([A-Za-z][\w ]*?)\s*-{3,}\s*$", re.MULTILINE)


def clean_statement(text: str) -> str:
    """Plain text: HTML markup and entities resolved, APPS `-----Input-----` headings plain,
    boilerplate removed, newlines normalised, no trailing spaces, at most one blank line in a row."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _TAG_RE.search(text):
        text = re.sub(r"<sup>(.*?)</sup>", r"^\1", text, flags=re.IGNORECASE | re.DOTALL)
        text = re.sub(r"<sub>(.*?)</sub>", r"_\1", text, flags=re.IGNORECASE | re.DOTALL)
        text = re.sub(r"<br\s*/?>|</p>|</div>|</li>", "\n", text, flags=re.IGNORECASE)
        text = re.sub(r"<li\b[^>]*>", "- ", text, flags=re.IGNORECASE)
        text = _TAG_RE.sub("", text)
    if "&" in text:
        text = html.unescape(text)
    text = _HEADING_RE.sub(r"\1", text)
    lower = text.lower()
    for hint, pattern in _BOILERPLATE_RE:
        if hint in lower:
            text = pattern.sub("", text)
    text = text.replace("\u00a0", " ").replace("\u200b", "").replace("\ufeff", "")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


_TOLERANCE_RE = re.compile(  # 10^{-6}, 10^(-6), 1e-6, and "10 - 6" / "10-6" as extracted CF text has it
    r"(?:absolute|relative) error[^.]{0,120}?"
    r"(?:10\s*\^\s*\{?\(?\s*[-\u2212]\s*(\d{1,2})\b|1e-(\d{1,2})\b|10\s*[-\u2212]\s*(\d{1,2})\b)",
    re.IGNORECASE,
)


def statement_tolerance(text: str) -> float | None:
    """The float tolerance a statement promises ("absolute or relative error ... 10^{-4}"), else
    None; the judge then compares reals with it instead of the default."""
    match = _TOLERANCE_RE.search(text)
    if not match:
        return None
    return 10.0 ** -int(next(g for g in match.groups() if g))


def normalize_difficulty(raw: Any, rating: int | None = None) -> str:
    """easy/medium/hard from the sources' labels (APPS, TACO, LCB words; CodeContests enums;
    Codeforces ratings: < 1400 easy, < 2100 medium, else hard); "" when unknown."""
    if rating:
        return "easy" if rating < 1400 else "medium" if rating < 2100 else "hard"
    if isinstance(raw, int) and not isinstance(raw, bool):
        return CC_DIFFICULTY.get(raw, "hard" if raw > 10 else "")
    return _DIFFICULTY_WORDS.get(str(raw or "").strip().lower().replace(" ", "_").replace("-", "_"), "")


def to_problem(record: dict, max_solutions: int = 4) -> Problem:
    """One collected record -> a normalised Problem. Raises ValueError/KeyError/TypeError for a
    malformed row (the stage logs, counts and skips it)."""
    fmt, row, source = record["format"], record["row"], record["source"]
    reader = _READERS.get(fmt)
    if reader is None:
        raise ValueError(f"no reader for format {fmt!r}")
    problem, solutions = reader(row)
    check_io_kind(problem)
    raw_difficulty = problem.difficulty
    problem.difficulty = normalize_difficulty(raw_difficulty, _rating(row))
    if raw_difficulty and raw_difficulty != problem.difficulty:
        problem.metadata["difficulty_raw"] = raw_difficulty
    date = parse_date(problem.contest_date)
    if date is not None:
        problem.contest_date = date.isoformat()
    problem.question_content = clean_statement(problem.question_content)
    tolerance = statement_tolerance(problem.question_content)
    if tolerance is not None and fmt != "ours":
        problem.float_tolerance = tolerance
    if problem.call_based and not problem.starter_code.strip():
        problem.starter_code = _starter(problem)
        problem.metadata["starter_synthesized"] = True
    if not problem.question_id.startswith(f"{source}/"):
        problem.question_id = f"{source}/{problem.question_id}"
    problem.source = source
    problem.metadata["format"] = fmt
    problem.metadata["origin"] = record.get("origin", "")
    problem.solutions = [s for s in solutions if isinstance(s, str) and s.strip()][:max_solutions]
    return problem


def check_io_kind(problem: Problem) -> None:
    """One I/O kind per problem: every test functional iff the problem names its entry point."""
    kinds = {t.kind for t in problem.tests}
    if len(kinds) > 1:
        raise ValueError(f"mixed test kinds {sorted(kinds)}")
    if kinds and (kinds == {"functional"}) != problem.call_based:
        raise ValueError("functional tests need a func_name, and a func_name needs functional tests")


def solutions_of(problem: Problem) -> list[str]:
    """The reference solutions stored with a problem."""
    return list(problem.solutions)


def _starter(problem: Problem) -> str:
    """`class Solution` with the entry point; arity from the first test's argument lines."""
    arity = len(problem.tests[0].input.split("\n")) if problem.tests and problem.tests[0].input else 0
    args = "".join(f", arg{i}" for i in range(arity))
    return f"class Solution:\n    def {problem.func_name}(self{args}):\n        "


def _rating(row: dict) -> int | None:
    rating = row.get("cf_rating") or row.get("rating")
    return int(rating) if isinstance(rating, (int, float)) and rating > 0 else None


def _json(value: Any, default: Any) -> Any:
    """Parsed JSON text (or a Python literal, as some dumps store them); non-text passes through."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return ast.literal_eval(value)


def _read_lcb(row: dict) -> tuple[Problem, list]:
    return Problem.from_lcb_row(row), list(_json(row.get("solutions"), []))


def _read_apps(row: dict) -> tuple[Problem, list]:
    """APPS and TACO: `input_output` tests, `solutions` a JSON list of programs."""
    problem = Problem.from_apps_row(row, question_id=_row_id(row))
    if row.get("source") and not problem.platform:
        problem.platform = str(row["source"]).lower()
    return problem, list(_json(row.get("solutions"), []))


def _read_codecontests(row: dict) -> tuple[Problem, list]:
    """CodeContests: public, private and generated tests ({input: [...], output: [...]} each),
    solutions by language enum (Python 3 kept), difficulty enum or Codeforces rating."""
    tests = []
    for key in ("public_tests", "private_tests", "generated_tests"):
        block = row.get(key) or {}
        inputs, outputs = block.get("input") or [], block.get("output") or []
        if len(inputs) != len(outputs):
            raise ValueError(f"{key}: {len(inputs)} inputs but {len(outputs)} outputs")
        tests += [TestCase(str(i), str(o), "stdin") for i, o in zip(inputs, outputs)]
    sols = row.get("solutions") or {}
    solutions = [s for lang, s in zip(sols.get("language") or [], sols.get("solution") or []) if lang == CC_PYTHON3]
    metadata: dict[str, Any] = {}
    limit = row.get("time_limit")
    if isinstance(limit, dict) and limit.get("seconds") is not None:
        metadata["time_limit"] = limit["seconds"] + (limit.get("nanos") or 0) / 1e9
    if row.get("memory_limit_bytes"):
        metadata["memory_limit_bytes"] = row["memory_limit_bytes"]
    if row.get("input_file") or row.get("output_file"):
        metadata["file_io"] = True
    if row.get("cf_tags"):
        metadata["tags"] = list(row["cf_tags"])
    name = row.get("name")
    if not name:
        raise ValueError("row has no name")
    problem = Problem(
        question_id=str(name),
        tests=tests,
        question_content=row.get("description") or "",
        platform=CC_SOURCES.get(row.get("source"), ""),
        difficulty=normalize_difficulty(row.get("difficulty"), _rating(row)),
        metadata=metadata,
    )
    return problem, solutions


def _read_deepcoder(row: dict) -> tuple[Problem, list]:
    """DeepCoder-style rows: `problem` statement and `tests` JSON in one of the shapes its subsets
    use: LCB-like [{input, output, testtype, metadata: {func_name}}], PrimeIntellect [{type:
    stdin_stdout|function_call, input, output, fn_name}] (JSON or a Python literal), or TACO's
    {inputs, outputs, fn_name}."""
    tests_json = _json(row.get("tests"), None)
    meta = _json(row.get("metadata"), {}) or {}
    if not isinstance(meta, dict):
        meta = {}
    qid = _row_id(row)
    base = {
        "question_id": qid,
        "question_content": row.get("problem") or "",
        "starter_code": row.get("starter_code") or meta.get("starter_code") or "",
        "difficulty": str(row.get("difficulty") or meta.get("difficulty") or ""),
        "contest_date": str(row.get("contest_date") or meta.get("contest_date") or ""),
        "platform": str(row.get("platform") or meta.get("platform") or ""),
    }
    solutions = list(_json(row.get("solutions"), []) or [])
    if isinstance(tests_json, dict):  # TACO form
        problem = Problem.from_apps_row({**base, "input_output": tests_json}, question_id=qid)
        problem.starter_code, problem.platform = base["starter_code"], base["platform"]
        return problem, solutions
    if not isinstance(tests_json, list) or not tests_json:
        raise ValueError("no tests")
    if all(t.get("type") == "function_call" for t in tests_json):
        fn_name = tests_json[0].get("fn_name") or meta.get("func_name")
        io_spec = {
            "inputs": [_json(t["input"], []) for t in tests_json],
            "outputs": [_json(t["output"], None) for t in tests_json],
            "fn_name": fn_name,
        }
        problem = Problem.from_apps_row({**base, "input_output": io_spec}, question_id=qid)
        problem.starter_code, problem.platform = base["starter_code"], base["platform"]
        return problem, solutions
    tests = [TestCase(str(t["input"]), str(t["output"]), _deepcoder_kind(t)) for t in tests_json]
    test_meta = _json(tests_json[0].get("metadata"), {}) or {}  # LCB-derived rows keep it per test
    func_name = meta.get("func_name") or row.get("func_name") or test_meta.get("func_name") or None
    problem = Problem(tests=tests, func_name=func_name, **base)
    problem.metadata.update({k: v for k, v in meta.items() if k not in ("func_name", "starter_code")})
    return problem, solutions


def _deepcoder_kind(test: dict) -> str:
    if "testtype" in test:
        return test["testtype"]
    kind = test.get("type", "stdin_stdout")
    if kind not in ("stdin_stdout", "function_call"):
        raise ValueError(f"unknown test type {kind!r}")
    return "stdin" if kind == "stdin_stdout" else "functional"


def _row_id(row: dict) -> str:
    """The row's own id, else a digest of its statement (stable across runs and machines)."""
    for key in ("question_id", "problem_id", "id", "name", "url"):
        if row.get(key) not in (None, ""):
            return str(row[key])
    text = row.get("question") or row.get("problem") or row.get("question_content") or ""
    if not text.strip():
        raise ValueError("row has neither an id nor a statement")
    return "sha1-" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _read_ours(row: dict) -> tuple[Problem, list]:
    problem = Problem.from_json(row)
    return problem, list(problem.solutions)


def _read_dir(row: dict) -> tuple[Problem, list]:
    """A problem folder (see collect.read_problem_dir): call-based when meta.json names func_name."""
    func_name = row.get("func_name") or None
    kind = "functional" if func_name else "stdin"
    tests = [TestCase(t["input"], t["output"], kind) for t in row["tests"]]
    known = ("starter_code", "platform", "difficulty", "contest_date")
    problem = Problem(
        question_id=str(row["question_id"]),
        tests=tests,
        func_name=func_name,
        question_content=row.get("statement") or "",
        checker=row.get("checker"),
        metadata={k: v for k, v in row.items() if k not in (*known, "tests", "statement", "checker",
                                                           "solutions", "question_id", "func_name", "float_tolerance")},
        **{k: str(row[k]) for k in known if row.get(k) is not None},
    )
    if row.get("float_tolerance") is not None:
        problem.float_tolerance = float(row["float_tolerance"])
    return problem, list(row.get("solutions") or [])


_READERS = {
    "lcb": _read_lcb,
    "apps": _read_apps,
    "codecontests": _read_codecontests,
    "deepcoder": _read_deepcoder,
    "ours": _read_ours,
    "dir": _read_dir,
}
