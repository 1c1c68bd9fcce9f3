"""Compare a program's output with the expected output, as a contest judge does.

Stdin problems: token comparison, tokens separated by space, tab, CR and LF only (as testlib
does; form feed, vertical tab and Unicode spaces such as U+00A0 are part of a token, so a program
printing them where the expected output has a space is wrong). A token equal as text matches. Otherwise
it matches only if the expected token is a real number (has a '.' or an exponent) and the actual
token is a strictly written number within the tolerance (absolute or relative). Integers must match
exactly as text, so `1_0`, `1e1`, `+10`, `0x10`, `10.0` never equal `10`.

Call-based problems: the expected and actual return values are JSON texts, parsed here in the judge
into plain data (never objects from the child) and compared structurally with the same number rules;
JSON turns tuples into lists, so tuples and lists compare alike.
"""
from __future__ import annotations

import json
import math
import re

_INT = re.compile(r"-?[0-9]+")
_REAL = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_TOKEN = re.compile(r"[^ \t\r\n]+")
_SHOW = 40  # characters of a token shown in a reason


def close(expected: float, actual: float, tolerance: float) -> bool:
    """|actual - expected| <= tolerance, absolute or relative (whichever is looser)."""
    if not (math.isfinite(expected) and math.isfinite(actual)):
        return False
    # The factor absorbs binary rounding of decimal text (0.3 vs 0.2999990 at 1e-6).
    return abs(actual - expected) <= tolerance * max(1.0, abs(expected)) * (1 + 1e-9)


def tokens_equal(expected: str, actual: str, tolerance: float, case_sensitive: bool = True) -> bool:
    """One whitespace-free token of output against the expected token."""
    if expected == actual:
        return True
    if _INT.fullmatch(expected):
        return False
    if _REAL.fullmatch(expected):
        return _REAL.fullmatch(actual) is not None and close(float(expected), float(actual), tolerance)
    return not case_sensitive and expected.casefold() == actual.casefold()


def compare_stdout(expected: str, actual: str, *, tolerance: float = 1e-6,
                   case_sensitive: bool = True) -> tuple[bool, str]:
    """(matches, short reason when it does not) for a stdin problem's output."""
    if expected == actual:
        return True, ""
    want, got = _TOKEN.findall(expected), _TOKEN.findall(actual)
    for i, (e, a) in enumerate(zip(want, got)):
        if not tokens_equal(e, a, tolerance, case_sensitive):
            return False, f"token {i + 1}: expected {_clip(e)}, got {_clip(a)}"
    if len(want) != len(got):
        return False, f"expected {len(want)} tokens, got {len(got)}"
    return True, ""


class _Int(str):
    """A JSON integer kept as its text: exact, and free of int()'s 4300-digit limit."""


def parse_value(text: str):
    """Plain data from JSON text; integers become `_Int` text, floats stay floats."""
    return json.loads(text, parse_int=_Int)


def values_equal(expected, actual, tolerance: float) -> bool:
    """Structural equality of plain JSON data with the number rules of the module docstring."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, _Int):
        if isinstance(actual, _Int):
            return str(expected) == str(actual)
        # An integral float equals an int exactly (2.0 for 2), never within a tolerance.
        return (isinstance(actual, float) and actual.is_integer() and len(expected) < 400
                and int(expected) == actual)
    if isinstance(expected, float):
        if isinstance(actual, (_Int, float)):
            return close(expected, float(actual), tolerance)
        return False
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(values_equal(e, a, tolerance) for e, a in zip(expected, actual)))
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and expected.keys() == actual.keys()
                and all(values_equal(v, actual[k], tolerance) for k, v in expected.items()))
    return type(expected) is type(actual) and expected == actual  # str (an _Int is not a str here), None


def compare_return(expected_json: str, actual_json: str, *, tolerance: float = 1e-6) -> tuple[bool, str]:
    """(matches, short reason) for a call-based test: both sides are JSON texts."""
    try:
        expected = parse_value(expected_json)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"expected output is not JSON: {_clip(expected_json)}") from e
    try:
        actual = parse_value(actual_json)
    except (ValueError, RecursionError):
        return False, f"return value is not JSON: {_clip(actual_json)}"
    try:
        ok = values_equal(expected, actual, tolerance)
    except RecursionError:
        ok = False
    return (True, "") if ok else (False, f"expected {_clip(expected_json)}, got {_clip(actual_json)}")


def _clip(text: str) -> str:
    text = str(text)
    return repr(text if len(text) <= _SHOW else text[:_SHOW] + "...")
