"""LeetCode/HumanEval assert tests (`def check(candidate): assert candidate(...) == ...`).

Where every assertion compares a call on literal arguments with a literal, the check becomes
ordinary functional tests (JSON arguments, compared by the judge on plain data, one test per
assertion). Anything else (helpers such as `list_node`, several statements per case) stays one
`assert` test that the sandbox runs with the entry point as `candidate`.
"""

from __future__ import annotations

import ast
import json

from microcoder_jax.data.problems import TestCase


def split_check(test_code: str) -> tuple[str, str | None]:
    """The test code without its trailing `check(Solution().name)` call(s), and that name."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError as e:
        raise ValueError(f"assert test code does not parse: {e}") from None
    name, body = None, []
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) else None
        if call is not None and isinstance(call.func, ast.Name) and call.func.id == "check" and call.args:
            target = call.args[0]
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", name)
            continue
        body.append(node)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in body):
        raise ValueError("assert test code defines no check(candidate)")
    return ast.unparse(ast.Module(body=body, type_ignores=[])) + "\n", name


def entry_point_name(entry_point: str) -> str | None:
    """`Solution().maxProfit` -> `maxProfit`; `add` -> `add`."""
    tail = str(entry_point or "").strip().rsplit(".", 1)[-1]
    return tail if tail.isidentifier() else None


def parameters(code: str, name: str) -> list[str] | None:
    """The parameter names (without self) of `name` in starter or reference code, which may end
    in an empty body (`def f(self, x: int) -> int:\\n        `)."""
    for attempt in (code, code.rstrip() + "\n        pass\n", code.rstrip() + "\n    pass\n"):
        try:
            tree = ast.parse(attempt)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                names = [a.arg for a in node.args.posonlyargs + node.args.args]
                return names[1:] if names[:1] == ["self"] else names
    return None


def literal_tests(check_code: str, params: list[str] | None) -> list[TestCase] | None:
    """One functional test per `assert candidate(args) == expected`, or None when any statement
    of check() is something else or a value is not a JSON literal."""
    tree = ast.parse(check_code)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or len(check.args.args) != 1 or len(tree.body) != 1:
        return None  # helpers beside check(): they need the sandbox
    candidate = check.args.args[0].arg
    tests = []
    for stmt in check.body:
        case = _case(stmt, candidate, params)
        if case is None:
            return None
        tests.append(case)
    return tests or None


def _case(stmt, candidate: str, params) -> TestCase | None:
    if not (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare)):
        return None
    cmp = stmt.test
    if len(cmp.ops) != 1 or not isinstance(cmp.ops[0], ast.Eq):
        return None
    call = cmp.left
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == candidate):
        return None
    try:
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
        expected = ast.literal_eval(cmp.comparators[0])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if len(kwargs) != len(call.keywords):
        return None  # **spread
    if kwargs:
        if params is None or set(kwargs) - set(params[len(args) :]):
            return None
        rest = params[len(args) :]
        if set(rest) != set(kwargs):
            return None  # a defaulted parameter left out: positions unknown
        args += [kwargs[p] for p in rest]
    try:
        lines = [json.dumps(a, allow_nan=False) for a in args]
        output = json.dumps(expected, allow_nan=False)
    except (TypeError, ValueError):
        return None  # sets, bytes, inf: not JSON
    return TestCase("\n".join(lines), output, "functional")
