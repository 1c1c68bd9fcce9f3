"""Row readers of the public layouts: one function per format, raw row -> (Problem, solutions).

`solutions` is returned raw (a list, one program as a string, or JSON/Python-literal text) and
read by `parse_solutions`, which never raises: a bad solutions field loses the references, never
the tests. A row that cannot become a problem raises (drops.RowError carries its reason).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from typing import Any

from microcoder_jax.dataset import asserts
from microcoder_jax.dataset.drops import RowError
from microcoder_jax.data.problems import Problem, TestCase, func_name_from_starter

# CodeContests enums (deepmind/code_contests, contest_problem.proto).
CC_SOURCES = {1: "codechef", 2: "codeforces", 3: "hackerearth", 4: "codejam", 5: "atcoder", 6: "aizu"}
CC_PYTHON3 = 3  # Language.PYTHON3; 1 is Python 2, which our judge does not run.


def literal(value: Any, default: Any = None) -> Any:
    """JSON text or a Python literal (as stringified dumps store them) parsed; non-text as is."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"neither JSON nor a Python literal: {type(e).__name__}") from None


def parse_solutions(value: Any) -> tuple[list[str], bool]:
    """(programs, readable): a list of programs, one program as plain text, JSON or a Python
    literal of either, or CodeContests' {language, solution} (Python 3 kept). Never raises."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return [], True
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith(("[", "{", '"', "'")):
            return [value], True  # one program (ast.literal_eval on code would lose the row)
        try:
            value = literal(text)
        except ValueError:
            return ([value], True) if _compiles(value) else ([], False)
        if isinstance(value, str):
            return [value], True
    if isinstance(value, dict) and "solution" in value:
        langs, programs = value.get("language") or [], value.get("solution") or []
        return [s for lang, s in zip(langs, programs) if _int(lang) == CC_PYTHON3 and isinstance(s, str)], True
    if isinstance(value, (list, tuple)):
        return [s for s in value if isinstance(s, str)], all(isinstance(s, str) for s in value)
    return [], False


def _compiles(code: str) -> bool:
    try:
        compile(code, "<solution>", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError):
        return False


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def row_id(row: dict) -> str:
    """The row's own id, else a digest of its statement (stable across runs and machines)."""
    for key in ("question_id", "problem_id", "task_id", "id", "name", "url"):
        if row.get(key) not in (None, ""):
            return str(row[key])
    text = row.get("question") or row.get("problem") or row.get("question_content") or row.get("description") or ""
    if not isinstance(text, str) or not text.strip():
        raise RowError("no_id", "row has neither an id nor a statement")
    return "sha1-" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _tests_block(row: dict, key: str) -> tuple[list, list]:
    try:
        block = literal(row.get(key), {}) or {}
    except ValueError as e:
        raise RowError("bad_tests", f"{key}: {e}") from None
    if not isinstance(block, dict):
        raise RowError("bad_tests", f"{key} is a {type(block).__name__}, not {{input, output}}")
    inputs, outputs = block.get("input") or [], block.get("output") or []
    if len(inputs) != len(outputs):
        raise RowError("bad_tests", f"{key}: {len(inputs)} inputs but {len(outputs)} outputs")
    return inputs, outputs


def read_lcb(row: dict) -> tuple[Problem, Any]:
    return Problem.from_lcb_row(row), row.get("solutions")


def read_apps(row: dict) -> tuple[Problem, Any]:
    """APPS and TACO: `input_output` tests, `solutions` a JSON list of programs."""
    if row.get("input_output") in (None, "", {}):
        raise RowError("no_tests", "input_output is empty")
    problem = Problem.from_apps_row(row, question_id=row_id(row))
    if row.get("source") and not problem.platform:
        problem.platform = str(row["source"]).lower()
    return problem, row.get("solutions")


def read_codecontests(row: dict) -> tuple[Problem, Any]:
    """CodeContests: public, private and generated tests ({input: [...], output: [...]} each, or
    that as Python-literal text, as stringified dumps have it), solutions by language enum
    (Python 3 kept), difficulty enum or Codeforces rating. The statement is `description` or,
    in rllm-style rows, `problem`."""
    tests, public = [], 0
    for key in ("public_tests", "private_tests", "generated_tests"):
        inputs, outputs = _tests_block(row, key)
        tests += [TestCase(str(i), str(o), "stdin") for i, o in zip(inputs, outputs)]
        if key == "public_tests":
            public = len(tests)
    metadata: dict[str, Any] = {"public_tests": public}
    try:
        limit = literal(row.get("time_limit"), None) if row.get("time_limit") != "None" else None
    except ValueError:
        limit = None
    if isinstance(limit, dict) and limit.get("seconds") is not None:
        metadata["time_limit"] = limit["seconds"] + (limit.get("nanos") or 0) / 1e9
    if _int(row.get("memory_limit_bytes")):
        metadata["memory_limit_bytes"] = _int(row["memory_limit_bytes"])
    if row.get("input_file") or row.get("output_file"):
        metadata["file_io"] = True
    try:
        tags = literal(row.get("cf_tags"), []) or []
    except ValueError:
        tags = []
    if tags:
        metadata["tags"] = list(tags)
    problem = Problem(
        question_id=row_id(row),
        tests=tests,
        question_content=row.get("description") or row.get("problem") or "",
        platform=CC_SOURCES.get(_int(row.get("source")) or 0, ""),  # 0: not a source
        difficulty=str(_int(row.get("difficulty")) or ""),
        metadata=metadata,
    )
    return problem, row.get("solutions")


def read_deepcoder(row: dict) -> tuple[Problem, Any]:
    """DeepCoder/rllm rows: `problem` statement and `tests` (or `test_cases`) in one of the
    shapes their subsets use: LCB-like [{input, output, testtype, metadata: {func_name}}],
    PrimeIntellect [{type: stdin_stdout|function_call, input, output, fn_name}] (JSON or a Python
    literal), Codeforces [{input, output}], TACO {inputs, outputs, fn_name}, CodeContests
    {input: [...], output: [...]}, or LeetCode {functional: "def check(candidate): ..."}."""
    try:
        tests_json = literal(row.get("tests", row.get("test_cases")), None)
        meta = literal(row.get("metadata"), {}) or {}
    except ValueError as e:
        raise RowError("bad_tests", f"tests: {e}") from None
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(tests_json, dict) and "functional" in tests_json:
        return read_leetcode({**row, "test": tests_json["functional"]})
    qid = row_id(row)
    base = {
        "question_id": qid,
        "question_content": row.get("problem") or "",
        "starter_code": row.get("starter_code") or meta.get("starter_code") or "",
        "difficulty": str(row.get("difficulty") or meta.get("difficulty") or ""),
        "contest_date": str(row.get("contest_date") or meta.get("contest_date") or ""),
        "platform": str(row.get("platform") or meta.get("platform") or ""),
    }
    solutions = row.get("solutions")
    if isinstance(tests_json, dict) and "input" in tests_json and "inputs" not in tests_json:  # CodeContests
        inputs, outputs = _tests_block({"t": tests_json}, "t")
        return Problem(tests=[TestCase(str(i), str(o)) for i, o in zip(inputs, outputs)], **base), solutions
    if isinstance(tests_json, dict):  # TACO form
        problem = Problem.from_apps_row({**base, "input_output": tests_json}, question_id=qid)
        problem.starter_code, problem.platform = base["starter_code"], base["platform"]
        return problem, solutions
    if not isinstance(tests_json, list) or not tests_json:
        raise RowError("no_tests", "no tests")
    if not all(isinstance(t, dict) and "input" in t and "output" in t for t in tests_json):
        raise RowError("bad_tests", "tests must be objects with input and output")
    if all(t.get("type") == "function_call" for t in tests_json):
        io_spec = {
            "inputs": [literal(t["input"], []) for t in tests_json],
            "outputs": [literal(t["output"], None) for t in tests_json],
            "fn_name": tests_json[0].get("fn_name") or meta.get("func_name"),
        }
        problem = Problem.from_apps_row({**base, "input_output": io_spec}, question_id=qid)
        problem.starter_code, problem.platform = base["starter_code"], base["platform"]
        return problem, solutions
    tests = [TestCase(str(t["input"]), str(t["output"]), _deepcoder_kind(t)) for t in tests_json]
    test_meta = literal(tests_json[0].get("metadata"), {}) or {}  # LCB-derived rows keep it per test
    func_name = meta.get("func_name") or row.get("func_name") or test_meta.get("func_name") or None
    problem = Problem(tests=tests, func_name=func_name, **base)
    if func_name is None and any(t.kind == "functional" for t in tests):
        problem.func_name = func_name_from_starter(base["starter_code"])
        problem.metadata["func_name_from_starter"] = True
    problem.metadata.update({k: v for k, v in meta.items() if k not in ("func_name", "starter_code")})
    return problem, solutions


def _deepcoder_kind(test: dict) -> str:
    if "testtype" in test:
        return test["testtype"]
    kind = test.get("type", "stdin_stdout")
    if kind not in ("stdin_stdout", "function_call"):
        raise RowError("bad_tests", f"unknown test type {kind!r}")
    return "stdin" if kind == "stdin_stdout" else "functional"


_CODE_BLOCK_RE = re.compile(r"```python\n(.*?)```", re.DOTALL)
_LEETCODE_LEAD = "please solve the programming task below"


def read_leetcode(row: dict) -> tuple[Problem, Any]:
    """LeetCode rows with assert tests: LeetCodeDataset / human-eval style {task_id, prompt
    (imports and helpers), entry_point "Solution().name", test "def check(candidate): ...",
    completion, starter_code, problem_description}, or rllm's {problem (statement + starter in a
    code block), completion, tests: {functional: check code + "check(Solution().name)"}}."""
    statement = row.get("problem_description") or row.get("problem") or row.get("query") or ""
    starter = row.get("starter_code") or ""
    blocks = _CODE_BLOCK_RE.findall(statement)
    if not starter and blocks:
        starter = blocks[-1]
    if _LEETCODE_LEAD in statement[:200].lower() or blocks:  # rllm: instructions around the statement
        statement = statement.split("\n", 1)[1] if _LEETCODE_LEAD in statement[:200].lower() else statement
        statement = re.split(r"\n\s*Please complete the following python code precisely", statement)[0]
    test = row.get("test")
    if not isinstance(test, str) or not test.strip():
        raise RowError("no_tests", "no assert test code")
    try:
        check_code, called = asserts.split_check(test)
    except ValueError as e:
        raise RowError("bad_tests", str(e)) from None
    declared = func_name_from_starter(starter) if starter else None
    named = asserts.entry_point_name(row.get("entry_point") or "") or called
    if declared and named and declared != named:
        raise RowError("entry_point_mismatch", f"the test calls {named} but the starter code declares {declared}")
    func_name = named or declared
    if func_name is None:
        raise RowError("no_func_name", "no entry_point, check(...) call or starter code names the function")
    reference = row.get("completion") or ""
    helpers = row.get("prompt") or ""
    params = asserts.parameters(starter, func_name) or asserts.parameters(reference, func_name)
    functional = None if _uses_helpers(helpers, starter + check_code) else asserts.literal_tests(check_code, params)
    metadata: dict[str, Any] = {"tests_from": "assert"}
    if functional is not None:
        tests = functional
    else:
        tests = [TestCase(f"{helpers.rstrip()}\n\n{check_code}" if helpers.strip() else check_code, "", "assert")]
        metadata["assert_tests"] = True
    for key in ("tags", "estimated_date"):
        if row.get(key) not in (None, ""):
            metadata[key] = row[key]
    problem = Problem(
        question_id=row_id(row),
        tests=tests,
        func_name=func_name,
        starter_code=starter,
        question_content=statement,
        platform="leetcode",
        difficulty=str(row.get("difficulty") or ""),
        contest_date=str(row.get("estimated_date") or row.get("contest_date") or ""),
        metadata=metadata,
    )
    solutions = row.get("solutions") or ([reference] if reference.strip() else None)
    return problem, solutions


def _uses_helpers(helpers: str, code: str) -> bool:
    """Whether `code` names a class or function the helper prelude defines (ListNode, tree_node)."""
    try:
        tree = ast.parse(helpers)
    except SyntaxError:
        return bool(helpers.strip())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return any(re.search(rf"\b{re.escape(n)}\b", code) for n in names)


def read_ours(row: dict) -> tuple[Problem, Any]:
    problem = Problem.from_json(row)
    return problem, list(problem.solutions)


def read_dir(row: dict) -> tuple[Problem, Any]:
    """A problem folder (folders.py: ours or a Kattis package): call-based when meta names func_name."""
    func_name = row.get("func_name") or None
    kind = "functional" if func_name else "stdin"
    tests = [TestCase(t["input"], t["output"], kind) for t in row["tests"]]
    known = ("starter_code", "platform", "difficulty", "contest_date")
    skip = (*known, "tests", "statement", "checker", "solutions", "question_id", "func_name", "float_tolerance")
    texts: dict[str, Any] = {k: str(row[k]) for k in known if row.get(k) is not None}  # str fields of Problem
    problem = Problem(
        question_id=str(row["question_id"]),
        tests=tests,
        func_name=func_name,
        question_content=row.get("statement") or "",
        checker=row.get("checker"),
        metadata={k: v for k, v in row.items() if k not in skip},
        **texts,
    )
    if row.get("float_tolerance") is not None:
        problem.float_tolerance = float(row["float_tolerance"])
    return problem, row.get("solutions")


READERS = {
    "lcb": read_lcb,
    "apps": read_apps,
    "codecontests": read_codecontests,
    "deepcoder": read_deepcoder,
    "leetcode": read_leetcode,
    "ours": read_ours,
    "dir": read_dir,
}
