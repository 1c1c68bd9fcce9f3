"""Dropped rows: every row a stage skips gets a reason code, is counted per source and reason,
and is logged once per (source, reason) with the count and the first example, never per row."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# Reason codes (docs/datasets.md lists them with their fixes).
REASONS = {
    "invalid_json": "a JSONL line that does not parse",
    "not_an_object": "a row that is a list, string or number, not an object",
    "unknown_format": "no known layout matches the row's keys",
    "test_without_answer": "a folder's .in test file has no .out/.ans answer",
    "bad_folder": "a problem folder that cannot be read (bad JSON/YAML, not UTF-8)",
    "no_tests": "the row has no test at all",
    "bad_tests": "the tests field does not parse or has the wrong shape",
    "no_func_name": "call-based tests without an entry point in the metadata, tests or starter code",
    "entry_point_mismatch": "the test code calls another function than the starter code declares",
    "mixed_test_kinds": "stdin and call-based tests in one problem",
    "no_id": "neither an id nor a statement to name the problem by",
    "duplicate_id": "a question id already read from the same or a higher-priority source",
    "malformed": "any other defect of the row (the log line says which)",
}

# Messages the schema's own readers (data/problems.py) raise, mapped to their reason.
_MESSAGES = (
    ("no test", "no_tests"),
    ("no_tests", "no_tests"),
    ("func_name", "no_func_name"),
    ("mixed test kinds", "mixed_test_kinds"),
    ("neither an id nor", "no_id"),
    ("has no question_id", "no_id"),
    ("inputs but", "bad_tests"),
    ("test case must", "bad_tests"),
    ("unknown test type", "bad_tests"),
    ("input_output needs", "bad_tests"),
    ("expected a list of tests", "bad_tests"),
    ("test cases are neither", "bad_tests"),
    ("test kind must", "bad_tests"),
    ("stdin test must", "bad_tests"),
    ("call-based inputs must", "bad_tests"),
    ("unknown row format", "unknown_format"),
)


class RowError(ValueError):
    """A row that cannot become a problem, with its reason code (one of REASONS)."""

    def __init__(self, reason: str, message: str):
        if reason not in REASONS:
            raise ValueError(f"unknown drop reason {reason!r}")
        super().__init__(message)
        self.reason = reason


def reason_of(error: BaseException) -> str:
    """The reason code of an exception raised while reading a row."""
    if isinstance(error, RowError):
        return error.reason
    text = str(error).lower()
    return next((reason for fragment, reason in _MESSAGES if fragment in text), "malformed")


class Drops:
    """Counts of dropped rows by source and reason, with the first example of each."""

    def __init__(self, stage: str):
        self.stage = stage
        self.counts: dict[str, dict[str, int]] = {}
        self._first: dict[tuple[str, str], str] = {}

    def add(self, source: str, reason: str, where: str, message: str) -> None:
        per = self.counts.setdefault(source, {})
        per[reason] = per.get(reason, 0) + 1
        self._first.setdefault((source, reason), f"{where}: {message}"[:300])

    def error(self, source: str, where: str, error: BaseException) -> str:
        """Count a row that raised `error`; returns its reason."""
        reason = reason_of(error)
        self.add(source, reason, where, f"{type(error).__name__}: {error}")
        return reason

    def of(self, source: str) -> dict[str, int]:
        return dict(sorted(self.counts.get(source, {}).items()))

    def log(self, source: str | None = None) -> None:
        """One warning line per (source, reason): the count and the first example."""
        for (src, reason), first in sorted(self._first.items()):
            if source is None or src == source:
                log.warning(
                    "%s %s: dropped %d rows: %s (%s; first: %s)",
                    self.stage,
                    src,
                    self.counts[src][reason],
                    reason,
                    REASONS[reason],
                    first,
                )
