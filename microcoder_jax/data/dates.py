"""Dates of problems: one parser for every spelling the sources use, one inclusive window test."""

from __future__ import annotations

import datetime
from typing import Any

_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%d/%m/%Y", "%B %d, %Y", "%b %d, %Y", "%Y-%m")


def parse_date(value: Any) -> datetime.date | None:
    """A date from ISO datetimes/dates, a few common spellings, or a Unix timestamp; else None."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value  # milliseconds in some dumps
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC).date()
    text = str(value).strip()
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).date()
    except ValueError:
        pass
    for fmt in _DATE_FORMATS:
        try:
            return datetime.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def in_window(value: Any, start: str = "", end: str = "") -> bool:
    """Whether a date lies in [start, end] (ISO dates; '' = open on that side).

    No bound at all: every problem is inside, dated or not. With a bound, an undated problem is
    outside: its date cannot be shown to lie in the window.
    """
    if not (start or end):
        return True
    day = parse_date(value)
    if day is None:
        return False
    lo = datetime.date.fromisoformat(start) if start else datetime.date.min
    hi = datetime.date.fromisoformat(end) if end else datetime.date.max
    return lo <= day <= hi
