"""One JSONL reader: (line index, value) per non-blank line, a `BadLine` where a line does not parse.

Callers decide what a bad line means: metrics skip a torn last line, the data pipeline counts it
as malformed, a stage's own output never has one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator


@dataclasses.dataclass(frozen=True)
class BadLine:
    """A line that is not valid JSON, with the parser's message."""

    error: str


def read_jsonl(path: str, *, missing_ok: bool = False, errors: str = "strict") -> Iterator[tuple[int, Any]]:
    """(0-based line index, parsed value or BadLine) per non-blank line; no file = nothing when missing_ok."""
    if missing_ok and not os.path.exists(path):
        return
    with open(path, encoding="utf-8", errors=errors) as f:
        for index, line in enumerate(f):
            if not line.strip():
                continue
            try:
                yield index, json.loads(line)
            except json.JSONDecodeError as e:
                yield index, BadLine(str(e))
