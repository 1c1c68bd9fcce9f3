"""Process: raw collected rows -> `microcoder_jax.data.problems.Problem` (the one schema of the project).

Per row: convert by format (readers.py), decode tests, keep Python reference solutions in
`Problem.solutions`, clean the statement (markup, source-specific "read from stdin / write the
code" boilerplate removed, so the prompt template alone states the I/O contract), normalise
difficulty to easy/medium/hard and dates to ISO, and make every call-based problem carry starter
code. Question ids get the source name as prefix so ids from different dumps never collide.
"""

from __future__ import annotations

import html
import re
from typing import Any

from microcoder_jax.data.dates import parse_date  # noqa: F401 (re-exported: the readers' date parser)
from microcoder_jax.dataset.readers import READERS, parse_solutions
from microcoder_jax.data.problems import STDIN_HARNESSES, Problem

# Formats whose own harness runs stdin programs inside a function (a top-level `return` is
# allowed there): their problems get the "apps" harness unless the source config names one.
HARNESS_BY_FORMAT = {"apps": "apps"}
# CodeContests difficulty enums: EASY..HARDEST = 1..5, EXTERNAL = 6, then Codeforces letters A = 7,
# B = 8, ...: A-B easy, C-D medium.
CC_DIFFICULTY = {
    1: "easy",
    2: "medium",
    3: "hard",
    4: "hard",
    5: "hard",
    7: "easy",
    8: "easy",
    9: "medium",
    10: "medium",
}
_DIFFICULTY_WORDS = {
    "easy": "easy", "introductory": "easy", "very_easy": "easy",
    "medium": "medium", "interview": "medium",
    "hard": "hard", "medium_hard": "hard", "very_hard": "hard", "competition": "hard",
}  # fmt: skip

# Source-specific instructions that would contradict or duplicate the prompt template's own, each
# with a lower-case phrase it contains (the regex runs only when the phrase is there: cheap).
_BOILERPLATE = [
    (
        "solve the following coding problem",
        r"^\s*Solve the following coding problem using the programming language python3?:?\s*",
    ),
    (
        "printed to stdout",
        r"\s*The input will be (?:given via|read from) stdin and the output (?:should|will) be "
        r"printed to stdout by your code\.?",
    ),
    ("as argument", r"\s*The input will be given as arguments? to the function.*?\.\s*"),
    ("providing the code", r"\s*Now solve the problem by providing the code\.?\s*$"),
    (
        "read the inputs from stdin",
        r"\s*Read the inputs from stdin,? solve the problem,? and write the answer to stdout.*$",
    ),
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
    reader = READERS.get(fmt)
    if reader is None:
        raise ValueError(f"no reader for format {fmt!r}")
    problem, raw_solutions = reader(row)
    check_io_kind(problem)
    raw_difficulty = problem.difficulty
    enum = int(raw_difficulty) if raw_difficulty.isdigit() else raw_difficulty  # CodeContests enums
    problem.difficulty = normalize_difficulty(enum, _rating(row))
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
    harness = record.get("harness") or HARNESS_BY_FORMAT.get(fmt, "plain")
    if harness not in STDIN_HARNESSES:
        raise ValueError(f"source {source}: harness {harness!r} is not one of {STDIN_HARNESSES}")
    if harness != "plain" and not problem.call_based:
        problem.metadata["stdin_harness"] = harness
    solutions, readable = parse_solutions(raw_solutions)
    if not readable:
        problem.metadata["solutions_unreadable"] = True
    problem.solutions = [s for s in solutions if s.strip()][:max_solutions]
    return problem


def check_io_kind(problem: Problem) -> None:
    """One I/O kind per problem: every test call-based iff the problem names its entry point."""
    kinds = {t.kind for t in problem.tests}
    if len(kinds) > 1:
        raise ValueError(f"mixed test kinds {sorted(kinds)}")
    if kinds and (kinds != {"stdin"}) != problem.call_based:
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
    if isinstance(rating, str) and rating.strip().isdigit():
        rating = int(rating)
    return int(rating) if isinstance(rating, (int, float)) and rating > 0 else None
