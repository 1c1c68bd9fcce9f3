"""Output comparison (contest-judge rules) and program extraction from model responses."""

import pytest

from microcoder_jax.judge.compare import compare_return, compare_stdout
from microcoder_jax.judge.extract import extract_code


@pytest.mark.parametrize(
    "expected, actual",
    [
        ("3\n", "3"),
        ("1 2\n3 4\n", "1   2 3\r\n4\n\n"),
        ("0.333333\n", "0.33333333"),
        ("0.5", "0.5000004"),
        ("1e-07", "0.0000001"),
        ("2.0", "2"),
        ("1000000.0", "1000000.5"),  # relative 5e-7
        ("-0.000000", "0.0000001"),
        ("YES", "YES"),
        ("", "  \n"),
        ("1 2\n", "\t1\t\t2\r\n\r\n"),
    ],
)
def test_stdout_accepts(expected, actual):
    assert compare_stdout(expected, actual) == (True, "")


@pytest.mark.parametrize(
    "expected, actual",
    [
        ("10", "1_0"),
        ("10", "1e1"),
        ("10", "+10"),
        ("10", "0x10"),
        ("16", "0x10"),
        ("10", "10.0"),
        ("10", "010"),
        ("10", " 1 0"),
        ("0.5", "0.502"),  # outside 1e-6
        ("0.5", "+0.5"),
        ("0.5", "5e-1x"),
        ("0.5", "nan"),
        ("1.5", "1_5"),
        ("YES", "yes"),
        ("1 2 3", "1 2"),
        ("1 2", "1 2 3"),
        ("abc", "ab c"),
        ("1.0", "inf"),
        # Tokens are separated by space, tab, CR and LF only (testlib): other whitespace is text.
        ("1 2", "1\x0c2"),
        ("1 2", "1\x0b2"),
        ("1 2", "1\xa02"),
        ("1 2", "1\u20032"),
        ("1 2", "1\x1c2"),
        ("1 2", "1 2\x0c"),
    ],
)
def test_stdout_rejects(expected, actual):
    ok, reason = compare_stdout(expected, actual)
    assert not ok and reason


def test_stdout_tolerance_and_case_are_per_problem():
    assert not compare_stdout("0.5", "0.5004")[0]
    assert compare_stdout("0.5", "0.5004", tolerance=1e-3)[0]
    assert compare_stdout("Yes", "YES", case_sensitive=False)[0]
    assert not compare_stdout("10", "1e1", case_sensitive=False)[0]


@pytest.mark.parametrize(
    "expected, actual",
    [
        ("[1, 2]", "[1,2]"),
        ("[[1, 2], [3]]", "[[1, 2], [3]]"),
        ("0.5", "0.5000001"),
        ("2", "2.0"),
        ('{"a": [1.5]}', '{"a": [1.5000000001]}'),
        ("true", "true"),
        ('"ab"', '"ab"'),
        ("null", "null"),
        ("1" * 5000, "1" * 5000),  # beyond int()'s default 4300-digit limit
    ],
)
def test_return_value_accepts(expected, actual):
    assert compare_return(expected, actual) == (True, "")


@pytest.mark.parametrize(
    "expected, actual",
    [
        ("[1, 2]", "[2, 1]"),
        ("[1, 2]", "[1, 2, 3]"),
        ("2", "2.5"),
        ("2", "1.9999999"),
        ("true", "1"),
        ("1", "true"),
        ("0", "false"),
        ('"1"', "1"),
        ("1", '"1"'),
        ("null", "0"),
        ('{"a": 1}', '{"a": 1, "b": 2}'),
        ("[1]", "1"),
        ('{"__repr__": "x"}', "[]"),
        ("[1]", '{"__repr__": "<Always equal>"}'),
        ("1" * 5000, "1" * 4999 + "2"),
        ("1", "not json"),
    ],
)
def test_return_value_rejects(expected, actual):
    ok, reason = compare_return(expected, actual)
    assert not ok and reason


def test_broken_expected_json_is_a_data_error():
    with pytest.raises(ValueError, match="expected output is not JSON"):
        compare_return("[1,", "[1]")


PROGRAM = "import sys\nprint(sum(map(int, sys.stdin.read().split())))"


@pytest.mark.parametrize(
    "response, code",
    [
        (f"Here:\n```python\n{PROGRAM}\n```\n", PROGRAM),
        (f"<think>try ```python\nprint(0)\n```</think>\nFinal:\n```py\n{PROGRAM}\n```", PROGRAM),
        (f"```python\nprint(1)\n```\nBetter:\n```Python3\n{PROGRAM}\n```\nDone.", PROGRAM),
        (f"```\n{PROGRAM}\n```", PROGRAM),
        (f"- step\n    ```python\n    {PROGRAM.replace(chr(10), chr(10) + '    ')}\n    ```", PROGRAM),
        (f"```python\n{PROGRAM}\n```\nExample output:\n```text\n3\n```", PROGRAM),
        (PROGRAM, PROGRAM),  # a bare program
        ("<think>long reasoning ```python\nprint(1)\n``` and then cut", None),  # unclosed thinking
        ("The answer is 42.", None),
        ("```cpp\nint main(){}\n```", None),
        (f"```python\n{PROGRAM}", None),  # cut off inside the block
        ("```python\n\n```", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_code(response, code):
    assert extract_code(response) == code
