"""Rewards: named functions from one judged response to a float, each saying which judge results it
needs, so the list of rewards is this registry and nothing else.

A reward is ``fn(problem, response, result) -> float``: the `Problem`, the response's decoded text
(special tokens dropped) and its `JudgeResult` (verdict, tests_passed / tests_total,
first_failure, times). `every_test` says how much judging it needs: False lets the judge stop at
a problem's first failed test (cheaper; `tests_passed` then counts up to there), True runs every
test. A judge_error row gets no reward whatever the function (NaN: the judge failed, not the
program; the advantages and metrics leave it out). A new reward is one decorated function::

    from microcoder_jax.judge.rewards import register_reward

    @register_reward("no_prompt_text")
    def no_prompt_text(problem, response, result):  # pass, and no input("Enter ...") prompts
        return float(result.passed and "Enter" not in response)

    --config.judge.reward=no_prompt_text   (or api.train(..., reward=no_prompt_text))

The module that registers it must be imported before the run's config is checked.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import Callable

from microcoder_jax.judge.extract import extract_code
from microcoder_jax.judge.program import JudgeResult

RewardFn = Callable[..., float]  # (problem, response text, JudgeResult) -> float


@dataclasses.dataclass(frozen=True)
class Reward:
    name: str
    fn: RewardFn
    every_test: bool = False  # False: the judge may stop at the first failed test

    def __call__(self, problem, response: str, result: JudgeResult) -> float:
        if result.verdict == "judge_error":
            return float("nan")
        value = float(self.fn(problem, response, result))
        if math.isnan(value):
            raise ValueError(f"reward {self.name!r} returned NaN (NaN is kept for judge errors)")
        return value


REWARDS: dict[str, Reward] = {}


def register_reward(name: str, *, every_test: bool = False):
    """Decorator: register `fn(problem, response, result) -> float` as the reward called `name`."""

    def decorator(fn: RewardFn) -> RewardFn:
        old = REWARDS.get(name)
        if old is not None and (old.fn is not fn or old.every_test != every_test):
            raise ValueError(
                f"reward {name!r} is already registered ({old.fn.__module__}.{old.fn.__name__}); pick another name"
            )
        REWARDS[name] = Reward(name, fn, every_test)
        return fn

    return decorator


def lookup(name: str) -> Reward:
    """The reward registered as `name`, or a ValueError listing the registered ones."""
    if name not in REWARDS:
        raise ValueError(
            f"unknown reward {name!r}; registered: {', '.join(sorted(REWARDS))} "
            "(microcoder_jax.judge.rewards.register_reward adds one)"
        )
    return REWARDS[name]


@register_reward("all")
def all_tests(problem, response, result) -> float:
    """1 iff every test passes (the paper's reward)."""
    return float(result.passed)


@register_reward("fraction", every_test=True)
def fraction(problem, response, result) -> float:
    """Tests passed / tests run, every test run."""
    return result.tests_passed / result.tests_total if result.tests_total else 0.0


@register_reward("fraction_runs", every_test=True)
def fraction_runs(problem, response, result) -> float:
    """0.9 x the share of tests passed, plus 0.1 when the program ran cleanly: everything passed,
    or its first failing test ran to the end and printed a wrong answer (no crash, timeout, compile
    error or missing code). A shaped reward for a model too weak to pass tests at first (SmolLM2
    on easy problems): reading the input the way the statement says is rewarded before the answer
    is right. Evaluation still scores all-tests pass@1."""
    runs = result.passed or result.verdict == "wrong_answer"
    share = result.tests_passed / result.tests_total if result.tests_total else 0.0
    return 0.9 * share + 0.1 * float(runs)


@register_reward("fraction_reads", every_test=True)
def fraction_reads(problem, response, result) -> float:
    """`fraction_runs` with its 0.1 paid only to a program that also reads standard input (an
    `input()` call, `sys.stdin` or `open(0)` in its code). On SmolLM2, `fraction_runs` taught
    programs that hard-code a value or never call their function: they run cleanly and read
    nothing (docs/experiments.md). This rung pays for the first step of a right answer instead."""
    runs = result.passed or result.verdict == "wrong_answer"
    share = result.tests_passed / result.tests_total if result.tests_total else 0.0
    return 0.9 * share + 0.1 * float(runs and reads_stdin(extract_code(response)))


def reads_stdin(code: str | None) -> bool:
    """Whether a program's source reads standard input where it runs: `input` (called, or taken
    as a function: `read = input`), `sys.stdin`/`stdin`, file descriptor 0 (`open(0)`,
    `os.read(0, n)`, `io.open(0)`, `os.fdopen(0)`) or `fileinput.input()`, at module level or in a
    function or method that running code calls (by name, transitively; a class call enters its
    `__init__`, a decorator runs at definition). Read from the syntax tree, so comments, strings
    and functions never called do not count; source that does not parse reads nothing."""
    if not code:
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    functions: dict[str, list] = {}  # a name -> the bodies of every function or method so named
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(n.name, []).append(n)
        elif isinstance(n, ast.ClassDef):  # calling the class runs its __init__
            functions.setdefault(n.name, []).extend(
                f for f in n.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            )
    pending: list[ast.AST] = list(tree.body)
    entered: set[str] = set()

    def enter(name: str) -> None:
        if name in functions and name not in entered:
            entered.add(name)
            pending.extend(stmt for f in functions[name] for stmt in f.body)

    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending.extend(node.decorator_list)  # its body runs only when called
            for d in node.decorator_list:  # a decorator is called at definition
                enter(_called_name(d))
            continue
        if _reads(node):
            return True
        if isinstance(node, ast.Call):
            enter(_called_name(node.func))
        pending.extend(ast.iter_child_nodes(node))
    return False


def _called_name(func: ast.expr) -> str:
    """`f` of `f(...)` or `obj.f(...)` (a method: any class's method of that name), else ''."""
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def _reads(node: ast.AST) -> bool:
    """One node that reads stdin by itself (see reads_stdin)."""
    if isinstance(node, ast.Name):
        return node.id in ("input", "stdin") and isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Attribute):
        owner = node.value.id if isinstance(node.value, ast.Name) else ""
        return node.attr == "stdin" or (node.attr == "input" and owner in ("builtins", "fileinput"))
    if isinstance(node, ast.Call) and node.args and _is_zero(node.args[0]):  # file descriptor 0
        f = node.func
        if isinstance(f, ast.Name):
            return f.id == "open"
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        return owner in ("os", "io") and _called_name(f) in ("open", "read", "fdopen")
    return False


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)
