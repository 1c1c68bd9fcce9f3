"""Easy stdin/stdout problems from templates: a problem set a small pretrained chat model can learn from.

Each template draws one problem from a seeded `random.Random`: a LiveCodeBench-style statement
(the task, an Input and an Output section, constraints, one sample) with random surface parameters
(variable names, people and things, phrasing, answer words such as YES/NO or Yes/No, the sample's
values), a reference program, and test inputs: the sample first, then some edge cases (zero,
negative numbers, one element, ...), then random inputs. The expected outputs are the reference
program's output, run here in-process on each input (it is our own code); tests/test_easy_problems.py
runs every reference through the real judge.

The training templates (`TRAIN`) and the held-out templates (`HELD_OUT`, other operations of the
same difficulty) are disjoint, so a held-out score measures templates never trained on. A row's
`question_id` is `easy/<template>/<index>`; `metadata` holds `template`, `split`, `public_tests`
(the leading tests shown in the statement: 1, the sample; the rest are private) and `seed`.

    python -m microcoder_jax.data.easy_problems --out DIR --seed 0 \\
        [--train-per-template 16 --held-out-per-template 4 --tests 6]

writes DIR/train.jsonl and DIR/held_out.jsonl (the same seed and options give the same bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import os
import random
import sys
import types
from typing import Callable, Sequence

from microcoder_jax.data.problems import Problem, TestCase, save_problems

SOURCE = "easy-problems"
MAX_TESTS = 20
PUBLIC_TESTS = 1  # the statement's sample; a follow-up builds feedback from public tests only

WORDS = (
    "apple banana cherry garden window python rocket silver planet yellow orange castle dragon "
    "forest river mountain pencil rabbit turtle winter summer button camera letter market number "
    "object people record school ticket village wonder zebra anchor bridge candle desert engine "
    "finger guitar harbor island jacket kitten lemon magnet needle ocean pepper quartz saddle "
    "tomato umbrella violin walnut yogurt level radar civic kayak noon refer stats"
).split()
PALINDROMES = "level radar civic kayak noon refer stats madam racecar rotor deed peep abba wow".split()
NAMES = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Trent Victor Wendy".split()
THINGS = "apples coins stickers marbles books pencils cards stamps shells candies".split()
VOWELS = "aeiou"


@dataclasses.dataclass
class Instance:
    """One drawn problem before its tests: statement parts, reference program, input sources."""

    story: str  # the task in words
    input_spec: str  # the Input section
    output_spec: str  # the Output section
    solution: str  # the reference program
    draw: Callable[[random.Random], str]  # one random test input (the sample is one of these)
    edges: Sequence[str] = ()  # edge-case inputs, some of which become tests
    constraints: Sequence[str] = ()


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    make: Callable[[random.Random], Instance]


TRAIN: dict[str, Template] = {}
HELD_OUT: dict[str, Template] = {}


def _template(split: dict[str, Template]):
    def register(fn: Callable[[random.Random], Instance]) -> Callable[[random.Random], Instance]:
        name = fn.__name__.lstrip("_")
        assert name not in TRAIN and name not in HELD_OUT, name
        split[name] = Template(name, fn)
        return fn

    return register


train, held_out = _template(TRAIN), _template(HELD_OUT)


# ---------------------------------------------------------------------------------------------
# helpers


def _line(values) -> str:
    return " ".join(map(str, values))


def _lines(*rows) -> str:
    return "".join(f"{row}\n" for row in rows)


def _vars2(r: random.Random) -> tuple[str, str]:
    return r.choice((("a", "b"), ("x", "y"), ("p", "q"), ("A", "B"), ("m", "n")))


def _list_names(r: random.Random) -> tuple[str, str]:
    return r.choice((("N", "A"), ("n", "a"), ("N", "X"), ("n", "v")))


def _yes_no(r: random.Random) -> tuple[str, str]:
    return r.choice((("YES", "NO"), ("Yes", "No")))


def _word(r: random.Random, lo: int = 3, hi: int = 10) -> str:
    if r.random() < 0.6:
        return r.choice(WORDS)
    return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(lo, hi)))


def _sentence(r: random.Random, lo: int = 2, hi: int = 8) -> str:
    return " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))


def _list_input(lo: int, hi: int, n_lo: int = 1, n_hi: int = 10, *, per_line: bool = False, distinct: bool = False):
    """A drawer of `n` then n integers, on one line or one per line."""

    def draw(r: random.Random) -> str:
        n = r.randint(n_lo, n_hi)
        values = r.sample(range(lo, hi + 1), n) if distinct else [r.randint(lo, hi) for _ in range(n)]
        return _lines(n, *values) if per_line else _lines(n, _line(values))

    return draw


def _list_spec(n: str, a: str, what: str = "integers", per_line: bool = False) -> str:
    if per_line:
        return (
            f"The first line contains an integer {n}. Each of the next {n} lines contains one integer "
            f"{a}_i.\n\n{n}\n{a}_1\n{a}_2\n...\n{a}_{n}"
        )
    return (
        f"The first line contains an integer {n}, the number of {what}. The second line contains {n} "
        f"{what} {a}_1, {a}_2, ..., {a}_{n}, separated by spaces.\n\n{n}\n{a}_1 {a}_2 ... {a}_{n}"
    )


def _list_edges(*lists: Sequence[int], per_line: bool = False) -> list[str]:
    return [_lines(len(v), *v) if per_line else _lines(len(v), _line(v)) for v in lists]


# ---------------------------------------------------------------------------------------------
# training templates: two numbers


@train
def _sum_two(r):
    a, b = _vars2(r)
    if r.random() < 0.5:
        p, q = r.sample(NAMES, 2)
        thing = r.choice(THINGS)
        story = f"{p} has {a} {thing} and {q} has {b} {thing}. How many {thing} do they have together?"
        lo = 0
    else:
        story = f"You are given two integers {a} and {b}. Compute their sum."
        lo = -1000
    return Instance(
        story,
        f"One line containing two integers {a} and {b}, separated by a space.",
        f"Print a single integer: the value of {a} + {b}.",
        "a, b = map(int, input().split())\nprint(a + b)\n",
        lambda r: _lines(_line([r.randint(lo, 1000), r.randint(lo, 1000)])),
        ["0 0\n", "1000 1000\n"] + (["-7 7\n", "-1000 -1000\n"] if lo < 0 else []),
        [f"{lo} <= {a}, {b} <= 1000"],
    )


@train
def _difference_two_lines(r):
    a, b = _vars2(r)
    return Instance(
        r.choice(
            (
                f"Read two integers {a} and {b} and print {a} minus {b}.",
                f"Subtract the second number from the first one. The numbers are {a} and {b}.",
            )
        ),
        f"The first line contains the integer {a}. The second line contains the integer {b}.",
        f"Print one integer: {a} - {b}.",
        "a = int(input())\nb = int(input())\nprint(a - b)\n",
        lambda r: _lines(r.randint(-500, 500), r.randint(-500, 500)),
        ["0\n0\n", "3\n10\n", "-5\n-5\n"],
        [f"-500 <= {a}, {b} <= 500"],
    )


@train
def _product_two(r):
    a, b = _vars2(r)
    return Instance(
        f"Given two integers {a} and {b}, print their product.",
        f"A single line with {a} and {b} separated by one space.",
        f"Print {a} * {b} as an integer.",
        "a, b = map(int, input().split())\nprint(a * b)\n",
        lambda r: _lines(_line([r.randint(-100, 100), r.randint(-100, 100)])),
        ["0 57\n", "-3 -4\n", "100 -100\n"],
        [f"-100 <= {a}, {b} <= 100"],
    )


@train
def _abs_difference(r):
    a, b = _vars2(r)
    p, q = r.sample(NAMES, 2)
    return Instance(
        r.choice(
            (
                f"Print the absolute difference of two integers {a} and {b}, that is |{a} - {b}|.",
                f"{p} is standing at position {a} on a number line and {q} at position {b}. How far apart are they?",
            )
        ),
        f"One line containing two integers {a} and {b} separated by a space.",
        f"Print one non-negative integer: |{a} - {b}|.",
        "a, b = map(int, input().split())\nprint(abs(a - b))\n",
        lambda r: _lines(_line([r.randint(-1000, 1000), r.randint(-1000, 1000)])),
        ["5 5\n", "3 10\n", "-4 6\n"],
        [f"-1000 <= {a}, {b} <= 1000"],
    )


@train
def _swap_two(r):
    a, b = _vars2(r)
    return Instance(
        f"You are given two integers {a} and {b}. Print them in the opposite order.",
        f"One line with two integers {a} and {b}, separated by a space.",
        f"Print {b} and then {a} on one line, separated by a space.",
        "a, b = input().split()\nprint(b, a)\n",
        lambda r: _lines(_line([r.randint(-99, 99), r.randint(-99, 99)])),
        ["0 1\n", "7 7\n", "-3 12\n"],
        [f"-99 <= {a}, {b} <= 99"],
    )


@train
def _max_of_three(r):
    names = r.choice((("a", "b", "c"), ("x", "y", "z"), ("p", "q", "r")))
    one_line = r.random() < 0.5
    layout = (
        "One line containing three integers {}, {} and {}, separated by spaces."
        if one_line
        else "Three lines, containing the integers {}, {} and {} in this order, one per line."
    ).format(*names)
    solution = (
        "a, b, c = map(int, input().split())\nprint(max(a, b, c))\n"
        if one_line
        else "a = int(input())\nb = int(input())\nc = int(input())\nprint(max(a, b, c))\n"
    )

    def fmt(values):
        return _lines(_line(values)) if one_line else _lines(*values)

    return Instance(
        f"Print the largest of three integers {names[0]}, {names[1]} and {names[2]}.",
        layout,
        "Print the largest of the three integers.",
        solution,
        lambda r: fmt([r.randint(-100, 100) for _ in range(3)]),
        [fmt([5, 5, 5]), fmt([-1, -2, -3]), fmt([1, 9, 4])],
        [f"-100 <= {', '.join(names)} <= 100"],
    )


@train
def _power(r):
    a, b = r.choice((("a", "b"), ("x", "k"), ("base", "exponent")))
    return Instance(
        f"Compute {a} raised to the power {b}.",
        f"One line with two integers {a} and {b}, separated by a space.",
        f"Print the value of {a} to the power {b} (the product of {b} copies of {a}; it is 1 when {b} is 0).",
        "a, b = map(int, input().split())\nprint(a ** b)\n",
        lambda r: _lines(_line([r.randint(-9, 9), r.randint(0, 10)])),
        ["5 0\n", "0 3\n", "-2 3\n", "2 10\n"],
        [f"-9 <= {a} <= 9", f"0 <= {b} <= 10"],
    )


@train
def _gcd_two(r):
    a, b = _vars2(r)
    return Instance(
        f"Find the greatest common divisor of two positive integers {a} and {b}: the largest integer "
        "that divides both of them.",
        f"A single line containing {a} and {b}, separated by a space.",
        "Print the greatest common divisor.",
        "import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))\n",
        lambda r: (lambda g: _lines(_line([g * r.randint(1, 50), g * r.randint(1, 50)])))(r.randint(1, 20)),
        ["1 1\n", "7 13\n", "12 12\n", "1000 10\n"],
        [f"1 <= {a}, {b} <= 1000"],
    )


@train
def _rectangle_area(r):
    w, h = r.choice((("W", "H"), ("width", "height"), ("a", "b")))
    one_line = r.random() < 0.5
    return Instance(
        f"A rectangle has width {w} and height {h}. Compute its area.",
        f"One line containing two integers {w} and {h}, separated by a space."
        if one_line
        else f"The first line contains {w}, the second line contains {h}.",
        "Print the area of the rectangle as an integer.",
        "w, h = map(int, input().split())\nprint(w * h)\n"
        if one_line
        else "w = int(input())\nh = int(input())\nprint(w * h)\n",
        lambda r: (
            _lines(_line([r.randint(1, 100), r.randint(1, 100)]))
            if one_line
            else _lines(r.randint(1, 100), r.randint(1, 100))
        ),
        ["1 1\n", "100 1\n"] if one_line else ["1\n1\n", "100\n1\n"],
        [f"1 <= {w}, {h} <= 100"],
    )


@train
def _celsius_to_fahrenheit(r):
    c = r.choice(("C", "c", "celsius"))
    return Instance(
        f"A temperature of {c} degrees Celsius is given. Convert it to degrees Fahrenheit with the "
        f"formula F = {c} * 9 / 5 + 32. {c} is a multiple of 5, so the answer is an integer.",
        f"One line containing the integer {c}.",
        "Print the temperature in Fahrenheit as an integer (no decimal point).",
        "c = int(input())\nprint(c * 9 // 5 + 32)\n",
        lambda r: _lines(5 * r.randint(-40, 40)),
        ["0\n", "100\n", "-40\n", "-5\n"],
        [f"-200 <= {c} <= 200", f"{c} is a multiple of 5"],
    )


@train
def _minutes_to_hours(r):
    m = r.choice(("M", "m", "minutes"))
    return Instance(
        f"A movie lasts {m} minutes. Express this length as hours and minutes.",
        f"A single integer {m}.",
        "Print two integers separated by a space: the number of full hours, then the remaining minutes (from 0 to 59).",
        "m = int(input())\nprint(m // 60, m % 60)\n",
        lambda r: _lines(r.randint(0, 1000)),
        ["0\n", "59\n", "60\n", "125\n"],
        [f"0 <= {m} <= 1000"],
    )


@train
def _divisible_by_k(r):
    n, k = r.choice((("N", "K"), ("n", "k"), ("a", "d")))
    yes, no = _yes_no(r)

    def draw(r):
        d = r.randint(1, 20)
        return _lines(_line([d * r.randint(0, 49) + (0 if r.random() < 0.5 else r.randint(0, d - 1)), d]))

    return Instance(
        f"Is the integer {n} divisible by the integer {k}?",
        f"One line with two integers {n} and {k}, separated by a space.",
        f"Print {yes} if {n} is divisible by {k}, and {no} otherwise.",
        f"n, k = map(int, input().split())\nprint({yes!r} if n % k == 0 else {no!r})\n",
        draw,
        ["0 7\n", "7 7\n", "1 2\n", "100 1\n"],
        [f"0 <= {n} <= 1000", f"1 <= {k} <= 20"],
    )


@train
def _is_even(r):
    n = r.choice(("N", "n", "x"))
    yes, no = _yes_no(r)
    return Instance(
        r.choice((f"Determine whether the integer {n} is even.", f"Tell whether {n} is divisible by 2.")),
        f"A single integer {n}.",
        f"Print {yes} if {n} is even and {no} if it is odd.",
        f"n = int(input())\nprint({yes!r} if n % 2 == 0 else {no!r})\n",
        lambda r: _lines(r.randint(-1000, 1000)),
        ["0\n", "-3\n", "1\n", "-8\n"],
        [f"-1000 <= {n} <= 1000"],
    )


@train
def _leap_year(r):
    y = r.choice(("Y", "year", "y"))
    yes, no = _yes_no(r)
    return Instance(
        f"A year is a leap year if it is divisible by 4, except that years divisible by 100 are not "
        f"leap years unless they are also divisible by 400. Is the year {y} a leap year?",
        f"One line containing the integer {y}.",
        f"Print {yes} if {y} is a leap year, otherwise print {no}.",
        f"y = int(input())\nprint({yes!r} if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else {no!r})\n",
        lambda r: _lines(r.randint(1, 3000) if r.random() < 0.6 else 4 * r.randint(1, 750)),
        ["1900\n", "2000\n", "2024\n", "2023\n"],
        [f"1 <= {y} <= 3000"],
    )


@train
def _fizzbuzz_one(r):
    n = r.choice(("N", "n", "x"))
    return Instance(
        f"Given a positive integer {n}, print Fizz if it is divisible by 3, Buzz if it is divisible "
        f"by 5, FizzBuzz if it is divisible by both, and the number {n} itself otherwise.",
        f"A single integer {n}.",
        "Print Fizz, Buzz, FizzBuzz or the number, as described.",
        "n = int(input())\nif n % 15 == 0:\n    print('FizzBuzz')\nelif n % 3 == 0:\n    print('Fizz')\n"
        "elif n % 5 == 0:\n    print('Buzz')\nelse:\n    print(n)\n",
        lambda r: _lines(r.randint(1, 1000)),
        ["15\n", "9\n", "10\n", "1\n", "7\n"],
        [f"1 <= {n} <= 1000"],
    )


@train
def _factorial(r):
    n = r.choice(("N", "n", "k"))
    return Instance(
        f"Compute the factorial of {n}, that is 1 * 2 * ... * {n}. The factorial of 0 is 1.",
        f"One line with the integer {n}.",
        f"Print {n}! as an integer.",
        "n = int(input())\nf = 1\nfor i in range(2, n + 1):\n    f *= i\nprint(f)\n",
        lambda r: _lines(r.randint(2, 15)),
        ["0\n", "1\n", "15\n"],
        [f"0 <= {n} <= 15"],
    )


@train
def _sum_1_to_n(r):
    n = r.choice(("N", "n", "k"))
    return Instance(
        f"Compute the sum of all integers from 1 to {n}, that is 1 + 2 + ... + {n}.",
        f"A single integer {n}.",
        "Print the sum.",
        "n = int(input())\nprint(n * (n + 1) // 2)\n",
        lambda r: _lines(r.randint(1, 10**6)),
        ["1\n", "2\n", "1000000\n"],
        [f"1 <= {n} <= 10^6"],
    )


@train
def _sum_of_digits(r):
    n = r.choice(("N", "n", "x"))
    return Instance(
        f"Compute the sum of the decimal digits of a non-negative integer {n}.",
        f"One line containing the integer {n}.",
        f"Print the sum of the digits of {n}.",
        "s = input().strip()\nprint(sum(int(d) for d in s))\n",
        lambda r: _lines(r.randint(0, 10 ** r.randint(1, 18))),
        ["0\n", "7\n", "1000000\n", "999999999999999999\n"],
        [f"0 <= {n} <= 10^18"],
    )


@train
def _count_digits(r):
    n = r.choice(("N", "n", "x"))
    return Instance(
        f"How many digits does the integer {n} have? A minus sign is not a digit.",
        f"A single integer {n}.",
        f"Print the number of digits of {n}.",
        "n = abs(int(input()))\nprint(len(str(n)))\n",
        lambda r: _lines(r.choice((-1, 1)) * r.randint(0, 10 ** r.randint(1, 12))),
        ["0\n", "-5\n", "100\n", "-123456\n"],
        [f"-10^12 <= {n} <= 10^12"],
    )


@train
def _last_digit(r):
    n = r.choice(("N", "n", "x"))
    return Instance(
        f"Print the last decimal digit of the non-negative integer {n}.",
        f"One line containing the integer {n}.",
        f"Print one digit: the last digit of {n}.",
        "n = int(input())\nprint(n % 10)\n",
        lambda r: _lines(r.randint(0, 10**9)),
        ["0\n", "10\n", "7\n"],
        [f"0 <= {n} <= 10^9"],
    )


@train
def _multiplication_table(r):
    n = r.choice(("N", "n", "x"))
    k = r.choice((5, 10))
    return Instance(
        f"Print the first {k} multiples of {n}: {n} * 1, {n} * 2, ..., {n} * {k}.",
        f"A single integer {n}.",
        f"Print {k} integers on one line, separated by spaces.",
        f"n = int(input())\nprint(' '.join(str(n * i) for i in range(1, {k + 1})))\n",
        lambda r: _lines(r.randint(-20, 20)),
        ["0\n", "1\n", "-3\n"],
        [f"-20 <= {n} <= 20"],
    )


# ---------------------------------------------------------------------------------------------
# training templates: lists


@train
def _max_of_list(r):
    n, a = _list_names(r)
    return Instance(
        r.choice(
            (
                f"You are given {n} integers. Find the largest of them.",
                f"There are {n} numbers written on a board. What is the maximum number on the board?",
            )
        ),
        _list_spec(n, a),
        "Print the maximum value.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(max(a))\n",
        _list_input(-1000, 1000),
        _list_edges([42], [-5, -3, -9], [7, 7, 7]),
        [f"1 <= {n} <= 100", f"-1000 <= {a}_i <= 1000"],
    )


@train
def _min_of_list_lines(r):
    n, a = _list_names(r)
    return Instance(
        f"Find the smallest of {n} integers.",
        _list_spec(n, a, per_line=True),
        "Print the minimum value.",
        "n = int(input())\nprint(min(int(input()) for _ in range(n)))\n",
        _list_input(-1000, 1000, per_line=True),
        _list_edges([5], [3, -3], [0, 0, 0], per_line=True),
        [f"1 <= {n} <= 100", f"-1000 <= {a}_i <= 1000"],
    )


@train
def _sum_of_list(r):
    n, a = _list_names(r)
    thing = r.choice(THINGS)
    return Instance(
        r.choice(
            (
                f"Compute the sum of {n} integers.",
                f"There are {n} boxes and box i holds {a}_i {thing}. How many {thing} are there in total?",
            )
        ),
        _list_spec(n, a),
        "Print the sum.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a))\n",
        _list_input(0, 1000),
        _list_edges([0], [1000] * 10, [5, 0, 5]),
        [f"1 <= {n} <= 100", f"0 <= {a}_i <= 1000"],
    )


@train
def _min_and_max(r):
    n, a = _list_names(r)
    return Instance(
        f"Find both the smallest and the largest of {n} integers.",
        _list_spec(n, a),
        "Print two integers separated by a space: the minimum and then the maximum.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(min(a), max(a))\n",
        _list_input(-100, 100),
        _list_edges([4], [-1, -1], [3, -8, 0]),
        [f"1 <= {n} <= 100", f"-100 <= {a}_i <= 100"],
    )


@train
def _sort_numbers(r):
    n, a = _list_names(r)
    down = r.random() < 0.4
    order = "non-increasing (largest first)" if down else "non-decreasing (smallest first)"
    return Instance(
        f"Sort {n} integers in {order} order.",
        _list_spec(n, a),
        f"Print the {n} integers in {order} order on one line, separated by spaces.",
        "n = int(input())\na = list(map(int, input().split()))\n"
        f"print(' '.join(map(str, sorted(a{', reverse=True' if down else ''}))))\n",
        _list_input(-100, 100),
        _list_edges([1], [2, 2, 1], [-5, 10, 0, -5]),
        [f"1 <= {n} <= 100", f"-100 <= {a}_i <= 100"],
    )


@train
def _second_largest(r):
    n, a = _list_names(r)
    return Instance(
        f"You are given {n} distinct integers. Print the second largest of them.",
        _list_spec(n, a),
        "Print the second largest value.",
        "n = int(input())\na = sorted(map(int, input().split()))\nprint(a[-2])\n",
        _list_input(-1000, 1000, 2, 10, distinct=True),
        _list_edges([1, 2], [-7, -3, -5], [10, 0]),
        [f"2 <= {n} <= 100", f"-1000 <= {a}_i <= 1000", "all values are distinct"],
    )


@train
def _running_sum(r):
    n, a = _list_names(r)
    return Instance(
        f"Given {n} integers, print their running sums: the i-th number printed is {a}_1 + {a}_2 + ... + {a}_i.",
        _list_spec(n, a),
        f"Print {n} integers on one line, separated by spaces.",
        "n = int(input())\na = list(map(int, input().split()))\ns = 0\nout = []\nfor x in a:\n"
        "    s += x\n    out.append(s)\nprint(' '.join(map(str, out)))\n",
        _list_input(-50, 50),
        _list_edges([9], [1, -1, 1, -1], [0, 0]),
        [f"1 <= {n} <= 100", f"-50 <= {a}_i <= 50"],
    )


@train
def _count_positive(r):
    n, a = _list_names(r)
    return Instance(
        f"Count how many of the {n} given integers are strictly greater than zero.",
        _list_spec(n, a),
        "Print the count.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(sum(1 for x in a if x > 0))\n",
        _list_input(-20, 20),
        _list_edges([0], [-1, -2], [5, 0, -5, 1]),
        [f"1 <= {n} <= 100", f"-20 <= {a}_i <= 20"],
    )


@train
def _count_even(r):
    n, a = _list_names(r)
    per_line = r.random() < 0.4
    return Instance(
        f"How many of the {n} given integers are even?",
        _list_spec(n, a, per_line=per_line),
        "Print the number of even integers.",
        "import sys\ndata = sys.stdin.read().split()\nn = int(data[0])\n"
        "print(sum(1 for x in data[1:n + 1] if int(x) % 2 == 0))\n",
        _list_input(-100, 100, per_line=per_line),
        _list_edges([0], [1, 3, 5], [-2, 7], per_line=per_line),
        [f"1 <= {n} <= 100", f"-100 <= {a}_i <= 100"],
    )


@train
def _average_floor(r):
    n, a = _list_names(r)
    return Instance(
        f"Compute the average of {n} non-negative integers, rounded down to an integer.",
        _list_spec(n, a),
        f"Print the sum of the integers divided by {n}, rounded down (integer division).",
        "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a) // n)\n",
        _list_input(0, 100),
        _list_edges([0], [1, 2], [100, 100, 99]),
        [f"1 <= {n} <= 100", f"0 <= {a}_i <= 100"],
    )


# ---------------------------------------------------------------------------------------------
# training templates: strings


@train
def _reverse_word(r):
    s = r.choice(("S", "s", "w"))
    return Instance(
        r.choice((f"Reverse the string {s}.", f"Print the word {s} written backwards.")),
        f"One line containing a string {s} of lowercase English letters.",
        f"Print {s} reversed.",
        "s = input().strip()\nprint(s[::-1])\n",
        lambda r: _lines(_word(r)),
        ["a\n", "ab\n", "level\n"],
        [f"1 <= length of {s} <= 20"],
    )


@train
def _count_vowels(r):
    return Instance(
        "Count the vowels in a line of text. The vowels are a, e, i, o and u.",
        "One line of lowercase English words separated by single spaces.",
        "Print the number of vowels in the line.",
        "s = input()\nprint(sum(1 for ch in s if ch in 'aeiou'))\n",
        lambda r: _lines(_sentence(r, 1, 6)),
        ["rhythm\n", "a e i o u\n", "queue\n"],
        ["the line has at most 100 characters"],
    )


@train
def _palindrome(r):
    s = r.choice(("S", "s", "w"))
    yes, no = _yes_no(r)
    return Instance(
        f"A palindrome reads the same forwards and backwards. Is the string {s} a palindrome?",
        f"One line containing the string {s} of lowercase English letters.",
        f"Print {yes} if {s} is a palindrome and {no} otherwise.",
        f"s = input().strip()\nprint({yes!r} if s == s[::-1] else {no!r})\n",
        lambda r: _lines(r.choice(PALINDROMES) if r.random() < 0.5 else _word(r)),
        ["a\n", "ab\n", "aa\n", "abca\n"],
        [f"1 <= length of {s} <= 20"],
    )


@train
def _kth_character(r):
    s, k = r.choice((("S", "K"), ("s", "k"), ("w", "i")))
    return Instance(
        f"Print the {k}-th character of the string {s}. Characters are numbered from 1.",
        f"The first line contains the string {s}. The second line contains the integer {k}.",
        f"Print the {k}-th character of {s}.",
        "s = input().strip()\nk = int(input())\nprint(s[k - 1])\n",
        lambda r: (lambda w: _lines(w, r.randint(1, len(w))))(_word(r)),
        ["a\n1\n", "hello\n5\n", "hello\n1\n"],
        [f"1 <= {k} <= length of {s} <= 20", f"{s} consists of lowercase English letters"],
    )


@train
def _count_letter(r):
    s, c = r.choice((("S", "C"), ("s", "c"), ("word", "letter")))
    one_line = r.random() < 0.5

    def draw(r):
        w = _word(r)
        ch = r.choice(w) if r.random() < 0.7 else r.choice("abcdefghijklmnopqrstuvwxyz")
        return _lines(f"{w} {ch}") if one_line else _lines(w, ch)

    return Instance(
        f"Count how many times the letter {c} occurs in the string {s}.",
        f"One line containing the string {s} and the letter {c}, separated by a space."
        if one_line
        else f"The first line contains the string {s}. The second line contains the letter {c}.",
        f"Print the number of occurrences of {c} in {s}.",
        "s, c = input().split()\nprint(s.count(c))\n"
        if one_line
        else "s = input().strip()\nc = input().strip()\nprint(s.count(c))\n",
        draw,
        ["banana a\n", "abc z\n"] if one_line else ["banana\na\n", "abc\nz\n"],
        [f"1 <= length of {s} <= 20", f"{s} and {c} consist of lowercase English letters"],
    )


@train
def _to_upper(r):
    return Instance(
        r.choice(("Convert a line of text to upper case.", "Print the given text in capital letters.")),
        "One line of lowercase English words separated by single spaces.",
        "Print the same line with every letter in upper case.",
        "print(input().upper())\n",
        lambda r: _lines(_sentence(r, 1, 5)),
        ["a\n", "hello world\n"],
        ["the line has at most 100 characters"],
    )


@train
def _repeat_word(r):
    w, k = r.choice((("W", "K"), ("s", "k"), ("word", "n")))
    sep = r.choice(("spaces", "nothing"))
    joined = "' '" if sep == "spaces" else "''"
    return Instance(
        f"Print the word {w} repeated {k} times.",
        f"One line containing the word {w} and the integer {k}, separated by a space.",
        f"Print {k} copies of {w} on one line, "
        + ("separated by single spaces." if sep == "spaces" else "with nothing between them."),
        f"w, k = input().split()\nprint({joined}.join([w] * int(k)))\n",
        lambda r: _lines(f"{_word(r, 1, 6)} {r.randint(1, 8)}"),
        ["a 1\n", "ab 5\n"],
        [f"1 <= {k} <= 10", f"{w} consists of lowercase English letters"],
    )


@train
def _count_words(r):
    return Instance(
        r.choice(("Count the words in a line of text.", "How many words are in the given sentence?")),
        "One line of lowercase English words separated by single spaces.",
        "Print the number of words.",
        "print(len(input().split()))\n",
        lambda r: _lines(_sentence(r, 1, 10)),
        ["hello\n", "a b c d e f g h i j\n"],
        ["the line has between 1 and 20 words"],
    )


@train
def _string_length(r):
    s = r.choice(("S", "s", "w"))
    return Instance(
        f"Print the length of the string {s}.",
        f"One line containing the string {s} of lowercase English letters.",
        f"Print the number of characters in {s}.",
        "print(len(input().strip()))\n",
        lambda r: _lines(_word(r, 1, 30)),
        ["a\n", "abcdefghijklmnopqrstuvwxyz\n"],
        [f"1 <= length of {s} <= 30"],
    )


@train
def _first_and_last(r):
    s = r.choice(("S", "s", "w"))
    return Instance(
        f"Print the first and the last character of the string {s}.",
        f"One line containing the string {s} of lowercase English letters.",
        f"Print the first character of {s} and the last character of {s}, separated by a space.",
        "s = input().strip()\nprint(s[0], s[-1])\n",
        lambda r: _lines(_word(r, 2, 12)),
        ["a\n", "ab\n", "aba\n"],
        [f"1 <= length of {s} <= 20"],
    )


@train
def _concat_two_words(r):
    s, t = r.choice((("S", "T"), ("s", "t"), ("a", "b")))
    return Instance(
        f"Glue two words together: print {s} followed directly by {t}.",
        f"The first line contains the word {s}. The second line contains the word {t}.",
        f"Print {s} and {t} concatenated, with no space between them.",
        "s = input().strip()\nt = input().strip()\nprint(s + t)\n",
        lambda r: _lines(_word(r), _word(r)),
        ["a\nb\n", "ab\nab\n"],
        [f"{s} and {t} consist of 1 to 10 lowercase English letters"],
    )


@train
def _remove_vowels(r):
    s = r.choice(("S", "s", "w"))

    def draw(r):
        w = _word(r)
        return _lines(w if any(ch not in VOWELS for ch in w) else w + "x")

    return Instance(
        f"Remove every vowel (a, e, i, o, u) from the string {s}.",
        f"One line containing the string {s} of lowercase English letters.",
        f"Print {s} without its vowels. {s} has at least one letter that is not a vowel.",
        "s = input().strip()\nprint(''.join(ch for ch in s if ch not in 'aeiou'))\n",
        draw,
        ["b\n", "aeiouz\n", "rhythm\n"],
        [f"1 <= length of {s} <= 20"],
    )


# ---------------------------------------------------------------------------------------------
# held-out templates: other operations, the same difficulty


@held_out
def _product_of_list(r):
    n, a = _list_names(r)
    return Instance(
        f"Compute the product of {n} integers.",
        _list_spec(n, a),
        "Print the product.",
        "n = int(input())\na = list(map(int, input().split()))\np = 1\nfor x in a:\n    p *= x\nprint(p)\n",
        _list_input(-9, 9, 1, 8),
        _list_edges([5], [0, 7, 8], [-1, -1, -1]),
        [f"1 <= {n} <= 10", f"-9 <= {a}_i <= 9"],
    )


@held_out
def _range_of_list(r):
    n, a = _list_names(r)
    return Instance(
        f"Find the difference between the largest and the smallest of {n} integers.",
        _list_spec(n, a),
        "Print the maximum minus the minimum.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(max(a) - min(a))\n",
        _list_input(-1000, 1000),
        _list_edges([3], [-5, 5], [2, 2, 2]),
        [f"1 <= {n} <= 100", f"-1000 <= {a}_i <= 1000"],
    )


@held_out
def _reverse_list(r):
    n, a = _list_names(r)
    return Instance(
        f"Print {n} integers in reverse order.",
        _list_spec(n, a),
        f"Print {a}_{n}, ..., {a}_2, {a}_1 on one line, separated by spaces.",
        "n = int(input())\na = input().split()\nprint(' '.join(reversed(a)))\n",
        _list_input(-100, 100),
        _list_edges([1], [1, 2], [0, -1, 0]),
        [f"1 <= {n} <= 100", f"-100 <= {a}_i <= 100"],
    )


@held_out
def _double_each(r):
    n, a = _list_names(r)
    per_line = r.random() < 0.5
    return Instance(
        f"Multiply each of {n} integers by two.",
        _list_spec(n, a, per_line=per_line),
        f"Print 2 * {a}_1, 2 * {a}_2, ..., 2 * {a}_{n} on one line, separated by spaces.",
        "import sys\ndata = sys.stdin.read().split()\nn = int(data[0])\n"
        "print(' '.join(str(2 * int(x)) for x in data[1:n + 1]))\n",
        _list_input(-500, 500, per_line=per_line),
        _list_edges([0], [-3], [1, 2, 3], per_line=per_line),
        [f"1 <= {n} <= 100", f"-500 <= {a}_i <= 500"],
    )


@held_out
def _count_distinct(r):
    n, a = _list_names(r)
    return Instance(
        f"How many different values are there among {n} integers?",
        _list_spec(n, a),
        "Print the number of distinct values.",
        "n = int(input())\nprint(len(set(input().split())))\n",
        _list_input(0, 9),
        _list_edges([4], [1, 1, 1], [1, 2, 3]),
        [f"1 <= {n} <= 100", f"0 <= {a}_i <= 9"],
    )


@held_out
def _index_of_max(r):
    n, a = _list_names(r)
    return Instance(
        f"Find the position of the largest of {n} integers. Positions are numbered from 1; if the "
        "largest value occurs several times, take its first position.",
        _list_spec(n, a),
        "Print the position.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(a.index(max(a)) + 1)\n",
        _list_input(-50, 50),
        _list_edges([8], [3, 3], [-1, -2, 0]),
        [f"1 <= {n} <= 100", f"-50 <= {a}_i <= 50"],
    )


@held_out
def _sum_of_squares(r):
    n, a = _list_names(r)
    return Instance(
        f"Compute the sum of the squares of {n} integers: {a}_1 * {a}_1 + ... + {a}_{n} * {a}_{n}.",
        _list_spec(n, a),
        "Print the sum of squares.",
        "n = int(input())\na = list(map(int, input().split()))\nprint(sum(x * x for x in a))\n",
        _list_input(-100, 100),
        _list_edges([0], [-3], [1, 2, 3]),
        [f"1 <= {n} <= 100", f"-100 <= {a}_i <= 100"],
    )


@held_out
def _is_prime(r):
    n = r.choice(("N", "n", "x"))
    yes, no = _yes_no(r)
    primes = [p for p in range(2, 1000) if all(p % d for d in range(2, math.isqrt(p) + 1))]
    return Instance(
        f"A prime is an integer greater than 1 whose only divisors are 1 and itself. Is {n} prime?",
        f"A single integer {n}.",
        f"Print {yes} if {n} is prime and {no} otherwise.",
        "n = int(input())\nprime = n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
        f"print({yes!r} if prime else {no!r})\n",
        lambda r: _lines(r.choice(primes) if r.random() < 0.5 else r.randint(1, 1000)),
        ["1\n", "2\n", "9\n", "997\n"],
        [f"1 <= {n} <= 1000"],
    )


@held_out
def _lcm_two(r):
    a, b = _vars2(r)
    return Instance(
        f"Find the least common multiple of two positive integers {a} and {b}: the smallest positive "
        "integer divisible by both.",
        f"One line containing {a} and {b}, separated by a space.",
        "Print the least common multiple.",
        "import math\na, b = map(int, input().split())\nprint(a * b // math.gcd(a, b))\n",
        lambda r: _lines(_line([r.randint(1, 100), r.randint(1, 100)])),
        ["1 1\n", "4 6\n", "7 7\n"],
        [f"1 <= {a}, {b} <= 100"],
    )


@held_out
def _sign_of_number(r):
    n = r.choice(("N", "n", "x"))
    words = r.choice((("positive", "negative", "zero"), ("Positive", "Negative", "Zero")))
    return Instance(
        f"Tell whether the integer {n} is positive, negative or zero.",
        f"One line containing the integer {n}.",
        f"Print {words[0]} if {n} > 0, {words[1]} if {n} < 0 and {words[2]} if {n} = 0.",
        f"n = int(input())\nprint({words[0]!r} if n > 0 else {words[1]!r} if n < 0 else {words[2]!r})\n",
        lambda r: _lines(r.randint(-100, 100)),
        ["0\n", "-1\n", "1\n"],
        [f"-100 <= {n} <= 100"],
    )


@held_out
def _square_perimeter(r):
    s = r.choice(("S", "a", "side"))
    return Instance(
        f"A square has side length {s}. Compute its perimeter.",
        f"A single integer {s}.",
        "Print the perimeter of the square.",
        "s = int(input())\nprint(4 * s)\n",
        lambda r: _lines(r.randint(1, 1000)),
        ["1\n", "1000\n"],
        [f"1 <= {s} <= 1000"],
    )


@held_out
def _product_of_digits(r):
    n = r.choice(("N", "n", "x"))
    return Instance(
        f"Compute the product of the decimal digits of a positive integer {n}.",
        f"One line containing the integer {n}.",
        f"Print the product of the digits of {n}.",
        "p = 1\nfor d in input().strip():\n    p *= int(d)\nprint(p)\n",
        lambda r: _lines(r.randint(1, 10 ** r.randint(1, 9))),
        ["7\n", "10\n", "999\n"],
        [f"1 <= {n} <= 10^9"],
    )


@held_out
def _count_consonants(r):
    s = r.choice(("S", "s", "w"))
    return Instance(
        f"Count the consonants in the string {s}: the letters other than a, e, i, o and u.",
        f"One line containing the string {s} of lowercase English letters.",
        f"Print the number of consonants in {s}.",
        "s = input().strip()\nprint(sum(1 for ch in s if ch not in 'aeiou'))\n",
        lambda r: _lines(_word(r)),
        ["a\n", "rhythm\n", "queue\n"],
        [f"1 <= length of {s} <= 20"],
    )


@held_out
def _swap_case(r):
    s = r.choice(("S", "s", "w"))

    def draw(r):
        w = _word(r)
        return _lines("".join(ch.upper() if r.random() < 0.5 else ch for ch in w))

    return Instance(
        f"Change the case of every letter of the string {s}: upper case letters become lower case and "
        "lower case letters become upper case.",
        f"One line containing the string {s} of English letters.",
        f"Print {s} with the case of every letter swapped.",
        "print(input().strip().swapcase())\n",
        draw,
        ["a\n", "ABC\n", "aBc\n"],
        [f"1 <= length of {s} <= 20"],
    )


@held_out
def _longest_word(r):
    return Instance(
        "Find the longest word in a line of text. If several words have the greatest length, take the first of them.",
        "One line of lowercase English words separated by single spaces.",
        "Print the longest word.",
        "best = ''\nfor w in input().split():\n    if len(w) > len(best):\n        best = w\nprint(best)\n",
        lambda r: _lines(_sentence(r, 1, 8)),
        ["hello\n", "ab cd ef\n", "a bb ccc dd\n"],
        ["the line has at most 100 characters"],
    )


@held_out
def _middle_character(r):
    s = r.choice(("S", "s", "w"))

    def draw(r):
        w = _word(r, 1, 15)
        return _lines(w if len(w) % 2 else w + r.choice("abcdefghijklmnopqrstuvwxyz"))

    return Instance(
        f"The string {s} has an odd length. Print its middle character.",
        f"One line containing the string {s} of lowercase English letters.",
        f"Print the character in the middle of {s}.",
        "s = input().strip()\nprint(s[len(s) // 2])\n",
        draw,
        ["a\n", "abc\n", "racecar\n"],
        [f"1 <= length of {s} <= 21", f"the length of {s} is odd"],
    )


# ---------------------------------------------------------------------------------------------
# statements, tests, problems


def render_statement(r: random.Random, inst: Instance, sample_in: str, sample_out: str) -> str:
    """The statement in one of three contest layouts (AtCoder, plain, Codeforces), drawn by `r`."""
    story, spec_in, spec_out = inst.story, inst.input_spec, inst.output_spec
    sin, sout = sample_in.rstrip("\n"), sample_out.rstrip("\n")
    style = r.randrange(3)
    if style == 0:
        parts = [story, f"Input\n\n{spec_in}", f"Output\n\n{spec_out}"]
        if inst.constraints:
            parts.append("Constraints\n\n" + "\n".join(f"- {c}" for c in inst.constraints))
        parts += [f"Sample Input 1\n\n{sin}", f"Sample Output 1\n\n{sout}"]
    elif style == 1:
        gap = "\n\n" if "\n" in spec_in else "\n"  # a format block ends before the Output line
        head = f"{story}\n\nInput: {spec_in}{gap}Output: {spec_out}"
        if inst.constraints:
            head += "\nConstraints: " + "; ".join(inst.constraints) + "."
        parts = [head, f"Example\n\nInput:\n{sin}\n\nOutput:\n{sout}"]
    else:
        parts = [story, f"-----Input-----\n\n{spec_in}", f"-----Output-----\n\n{spec_out}"]
        if inst.constraints:
            parts[1] += "\n\n" + "\n".join(inst.constraints)
        parts.append(f"-----Example-----\nInput\n{sin}\n\nOutput\n{sout}")
    return "\n\n".join(parts)


_COMPILED: dict[str, types.CodeType] = {}


def run_reference(solution: str, stdin: str) -> str:
    """The stdout of our own reference program on `stdin`, run in this process (trusted code)."""
    code = _COMPILED.get(solution)
    if code is None:
        code = _COMPILED[solution] = compile(solution, "<reference>", "exec")
    out = io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            exec(code, {"__name__": "__main__"})  # noqa: S102 - our own reference programs
    finally:
        sys.stdin = saved
    return out.getvalue()


def make_problem(template: Template, split: str, index: int, seed: int, tests: int = 6) -> Problem:
    """Problem `index` of `template`: drawn from its own RNG, so it does not depend on the others."""
    if not 1 <= tests <= MAX_TESTS:
        raise ValueError(f"tests must lie in [1, {MAX_TESTS}], got {tests}")
    r = random.Random(f"easy:{seed}:{template.name}:{index}")
    inst = template.make(r)
    inputs = [inst.draw(r)]  # the sample
    edges = [e for e in inst.edges if e != inputs[0]]
    inputs += r.sample(edges, min(len(edges), max(0, (tests - 1) // 2)))[: tests - 1]
    attempts = 0
    while len(inputs) < tests:
        candidate = inst.draw(r)
        attempts += 1
        if candidate not in inputs:
            inputs.append(candidate)
        elif attempts > 1000:
            raise RuntimeError(f"{template.name}: could not draw {tests} distinct test inputs")
    cases = []
    for text in inputs:
        output = run_reference(inst.solution, text)
        if not output.strip():
            raise RuntimeError(f"{template.name}: the reference printed nothing for {text!r}")
        cases.append(TestCase(text, output))
    return Problem(
        question_id=f"easy/{template.name}/{index:04d}",
        tests=cases,
        question_content=render_statement(r, inst, cases[0].input, cases[0].output),
        platform="microcoder",
        difficulty="easy",
        source=SOURCE,
        solutions=[inst.solution],
        metadata={"template": template.name, "split": split, "public_tests": PUBLIC_TESTS, "seed": seed},
    )


def generate(templates: dict[str, Template], split: str, per_template: int, seed: int, tests: int) -> list[Problem]:
    """`per_template` problems of every template, template by template."""
    return [make_problem(t, split, i, seed, tests) for t in templates.values() for i in range(per_template)]


def write(out: str, *, seed: int = 0, train_per_template: int = 16, held_out_per_template: int = 4, tests: int = 6):
    """Write out/train.jsonl and out/held_out.jsonl; returns their paths."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for name, templates, per in (
        ("train", TRAIN, train_per_template),
        ("held_out", HELD_OUT, held_out_per_template),
    ):
        path = os.path.join(out, f"{name}.jsonl")
        save_problems(generate(templates, name, per, seed, tests), path)
        paths.append(path)
    return paths


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one `error: ...` line and exit status 2 (not usage plus the message)."""

    def error(self, message):  # type: ignore[override]
        self.exit(2, f"error: {message}\n")


def main(argv=None) -> int:
    p = _OneLineParser(
        prog="python -m microcoder_jax.data.easy_problems",
        description=(__doc__ or "").split("\n")[0],
    )
    p.add_argument("--out", required=True, help="output directory (train.jsonl, held_out.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="the same seed and options write the same bytes (default 0)")
    p.add_argument(
        "--train-per-template", type=int, default=16, help=f"problems per training template ({len(TRAIN)} templates)"
    )
    p.add_argument(
        "--held-out-per-template",
        type=int,
        default=4,
        help=f"problems per held-out template ({len(HELD_OUT)} templates)",
    )
    p.add_argument("--tests", type=int, default=6, help=f"tests per problem, the sample first (1 to {MAX_TESTS})")
    args = p.parse_args(argv)
    for flag, value, low in (
        ("--train-per-template", args.train_per_template, 0),
        ("--held-out-per-template", args.held_out_per_template, 0),
        ("--tests", args.tests, 1),
    ):
        if value < low:
            p.error(f"{flag} {value}: must be >= {low}")
    if args.tests > MAX_TESTS:
        p.error(f"--tests {args.tests}: must be <= {MAX_TESTS}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out}: a file, not a directory")
    try:
        paths = write(
            args.out,
            seed=args.seed,
            train_per_template=args.train_per_template,
            held_out_per_template=args.held_out_per_template,
            tests=args.tests,
        )
    except OSError as e:
        p.error(f"--out {args.out}: {e.strerror or e}")
    counts = (len(TRAIN) * args.train_per_template, len(HELD_OUT) * args.held_out_per_template)
    print(
        f"wrote {paths[0]} ({counts[0]} problems, {len(TRAIN)} templates) and "
        f"{paths[1]} ({counts[1]} problems, {len(HELD_OUT)} templates)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
