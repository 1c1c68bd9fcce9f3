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


def compare_stdout(
    expected: str, actual: str, *, tolerance: float = 1e-6, case_sensitive: bool = True
) -> tuple[bool, str]:
    """(matches, short reason when it does not) for a stdin problem's output."""
    if expected == actual:
        return True, ""
    matcher = StdoutMatcher(expected, tolerance=tolerance, case_sensitive=case_sensitive)
    matcher.feed(actual.encode("utf-8", errors="surrogateescape"))
    return matcher.finish()


_RUN = re.compile(rb"[ \t\r\n]+")
_BTOKEN = re.compile(rb"[^ \t\r\n]+")
_CLASS = bytes(0x20 if b in b" \t\r\n" else 0x78 for b in range(256))  # whitespace -> " ", else "x"
TOKEN_SLACK = 4096  # bytes an output token may exceed the expected one by (longer: a mismatch)


class StdoutMatcher:
    """Compares stdout with the expected output as its bytes arrive (`feed`), then `finish`.

    Memory is bounded by one chunk plus one token, whatever the program prints: the expected text
    is kept once with single spaces between tokens; each chunk (cut at its last whitespace) is
    normalised the same way and compared as bytes against the next stretch of it, and only where
    they differ token by token (numbers within the tolerance, case). After the first mismatch
    nothing more is looked at; past the last expected token, tokens are only counted (C speed).
    A token longer than the expected one by over TOKEN_SLACK bytes is a mismatch.
    """

    def __init__(self, expected: str, *, tolerance: float = 1e-6, case_sensitive: bool = True):
        self._want = _RUN.sub(b" ", expected.encode("utf-8", errors="surrogateescape")).strip(b" ")
        self._total = self._want.count(b" ") + 1 if self._want else 0
        self._tolerance, self._case_sensitive = tolerance, case_sensitive
        self._pos = 0  # offset in _want of the next expected token
        self._matched = 0  # tokens matched so far
        self._extra = 0  # tokens past the expected ones
        self._tail = b""  # an unfinished token (no whitespace after it yet)
        self._after_space = True  # counting mode: the last byte seen was whitespace
        self.reason: str | None = None

    def feed(self, chunk) -> None:
        if self.reason is not None or not chunk:
            return
        if self._extra:  # the answer is already too long: count, keep nothing
            self._count(chunk)
            return
        data = self._tail + chunk
        cut = max(data.rfind(b" "), data.rfind(b"\n"), data.rfind(b"\t"), data.rfind(b"\r"))
        self._tail = data[cut + 1 :]
        if cut >= 0:
            self._window(data[: cut + 1])
        if self._extra and self._tail:  # _window switched to counting: the tail starts a token
            tail, self._tail = self._tail, b""
            self._count(tail)
        elif self.reason is None and self._tail:
            self._check_long_tail()

    def finish(self) -> tuple[bool, str]:
        if self.reason is None and self._tail:
            tail, self._tail = self._tail, b""
            self._window(tail + b" ")
        if self.reason is not None:
            return False, self.reason
        got = self._matched + self._extra
        if got != self._total:
            return False, f"expected {self._total} tokens, got {got}"
        return True, ""

    def _window(self, window: bytes) -> None:
        """Whole tokens (the window ends with whitespace)."""
        norm = _RUN.sub(b" ", window).strip(b" ")
        if not norm:
            return
        want, pos = self._want, self._pos
        if pos >= len(want):
            self._extra += norm.count(b" ") + 1
            self._after_space = True
            return
        end = pos + len(norm)
        if want[pos:end] == norm and (end >= len(want) or want[end] == 0x20):  # the common case
            self._matched += norm.count(b" ") + 1
            self._pos = end + 1
            return
        for m in _BTOKEN.finditer(norm):  # the slow path: each step uses up one expected token
            if self._pos >= len(want):
                self._extra += norm.count(b" ", m.start()) + 1
                self._after_space = True
                return
            nxt = want.find(b" ", self._pos)
            nxt = len(want) if nxt < 0 else nxt
            expected, actual = want[self._pos : nxt], m.group()
            if not _bytes_tokens_equal(expected, actual, self._tolerance, self._case_sensitive):
                self.reason = (
                    f"token {self._matched + 1}: expected {_clip(_text(expected))}, got {_clip(_text(actual))}"
                )
                return
            self._matched += 1
            self._pos = nxt + 1

    def _check_long_tail(self) -> None:
        want, pos = self._want, self._pos
        if pos >= len(want):
            limit = TOKEN_SLACK
        else:
            nxt = want.find(b" ", pos)
            limit = (len(want) if nxt < 0 else nxt) - pos + TOKEN_SLACK
        if len(self._tail) <= limit:
            return
        if pos >= len(want):  # one more token, too many: count it and whatever follows
            tail, self._tail = self._tail, b""
            self._count(tail)
            return
        shown = _text(self._tail[:_SHOW])
        self._tail = b""
        self.reason = (
            f"token {self._matched + 1}: expected {_clip(_text(want[pos : nxt if nxt >= 0 else None]))}, "
            f"got {_clip(shown + '...')} (over {limit} bytes)"
        )

    def _count(self, data) -> None:
        classes = data.translate(_CLASS)
        self._extra += classes.count(b" x") + (self._after_space and classes[:1] == b"x")
        self._after_space = classes[-1:] == b" "


def _bytes_tokens_equal(expected: bytes, actual: bytes, tolerance: float, case_sensitive: bool) -> bool:
    return expected == actual or tokens_equal(_text(expected), _text(actual), tolerance, case_sensitive)


def _text(token: bytes) -> str:
    return token.decode("utf-8", errors="replace")


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
        return isinstance(actual, float) and actual.is_integer() and len(expected) < 400 and int(expected) == actual
    if isinstance(expected, float):
        if isinstance(actual, (_Int, float)):
            return close(expected, float(actual), tolerance)
        return False
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(values_equal(e, a, tolerance) for e, a in zip(expected, actual))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(values_equal(v, actual[k], tolerance) for k, v in expected.items())
        )
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
