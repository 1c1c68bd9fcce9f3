"""The package's import graph has no cycle and every import goes down a floor or stays on its own
(ARCHITECTURE.md's layering; imports inside functions count too)."""

import ast
import os

import microcoder_jax

ROOT = os.path.dirname(microcoder_jax.__file__)


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (`from pkg import sub` is an edge to pkg.sub only)."""
    modules = {}
    for folder, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                modules[_module_name(os.path.join(folder, f))] = os.path.join(folder, f)
    graph = {}
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                subs = {f"{base}.{a.name}" for a in node.names}
                deps.update(subs)
                if not subs <= set(modules):  # a name from the package itself, not only submodules
                    deps.add(base)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None. A package's __init__ importing its own
    submodules is not a cycle unless a submodule imports that package back."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    loop = "microcoder_jax.trainer.loop"
    assert loop in graph and "microcoder_jax.trainer.worker" in graph[loop]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


# ARCHITECTURE.md's floors, top to bottom. A module's floor is its first matching prefix (after the
# package name); an import may go to a module on a lower floor or on its own floor.
FLOORS = [
    (
        6,
        (
            "train",
            "api",
            "eval",
            "plot",
            "convert",
            "replay",
            "plan.__main__",
            "dataset.__main__",
            "experiments",
        ),
    ),
    (5, ("plan",)),
    (4, ("trainer", "dataset")),
    (3, ("config", "cli")),
    (2, ("rl", "sampling", "envs")),
    (0, ("data.problems", "blocks", "data.jsonl")),
    (1, ("models", "data", "judge", "sharding")),
]
# Same-floor pairs that must not meet (they meet only in the trainer and the planner, or share a
# lower module instead): (importer prefix, imported prefix); floor-0 leaves such as data/jsonl.py excepted.
FORBIDDEN = [
    ("rl", "sampling"),
    ("sampling", "rl"),
    ("data", "judge"),
    ("judge", "data"),
    # an environment is the task (prompt, judging, feedback): it knows neither the train step nor the sampler
    ("envs", "rl"),
    ("envs", "sampling"),
    ("rl", "envs"),
    ("sampling", "envs"),
]


def floor_of(module: str) -> int:
    name = module.partition(".")[2]
    for floor, prefixes in FLOORS:
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return floor
    raise AssertionError(f"{module} has no floor in tests/test_imports.py FLOORS: add it where ARCHITECTURE.md puts it")


def _under(module: str, prefix: str) -> bool:
    name = module.partition(".")[2]
    return name == prefix or name.startswith(prefix + ".")


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge that goes up a floor or joins a forbidden pair. `config` assembles every package's
    block module (`<package>/config.py`), which is its one allowed upward edge."""
    bad = []
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if module == "microcoder_jax.config" and dep.endswith(".config"):
                continue
            if floor_of(dep) > floor_of(module):
                bad.append(f"{module} (floor {floor_of(module)}) imports {dep} (floor {floor_of(dep)})")
            for a, b in FORBIDDEN:
                if _under(module, a) and _under(dep, b) and floor_of(dep) > 0:
                    bad.append(f"{module} imports {dep}: {a}/ and {b}/ must not import each other")
    return bad


def test_the_layering_check_sees_an_upward_and_a_forbidden_import():
    graph = {
        "microcoder_jax.models.decoder": {"microcoder_jax.trainer.loop"},
        "microcoder_jax.rl.step": {"microcoder_jax.sampling.paged_engine"},
        "microcoder_jax.trainer.loop": {"microcoder_jax.models.decoder"},
        "microcoder_jax.config": {"microcoder_jax.trainer.config"},
    }
    assert layering_violations(graph) == [
        "microcoder_jax.models.decoder (floor 1) imports microcoder_jax.trainer.loop (floor 4)",
        "microcoder_jax.rl.step imports microcoder_jax.sampling.paged_engine: "
        "rl/ and sampling/ must not import each other",
    ]


def test_every_import_respects_the_floors():
    violations = layering_violations(import_graph())
    assert not violations, "\n".join(violations)


def test_only_models_names_a_model_family_or_its_param_keys():
    """The model seam: outside models/ code reaches a model through `microcoder_jax.models` names
    (DecoderConfig, forward, head_weight, ...), never a family's type or a key of its params dict."""
    import re

    family_names = re.compile(r"\bQwen[23]\w*(Config|ForCausalLM)\b|models\.decoder\b|\bflax_decoder\b")
    param_key = re.compile(r"""\[\s*["'](embed|lm_head|layers|final_norm|q_proj|k_proj|v_proj|o_proj)["']\s*\]""")
    found = []
    for folder, _, files in os.walk(ROOT):
        if os.path.relpath(folder, ROOT).split(os.sep)[0] == "models":
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    if family_names.search(line) or param_key.search(line):
                        found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_no_function_in_the_trainer_is_longer_than_a_screen():
    """The training loop reads in one screen per function (trainer/loop.py's step body is a function
    of its own): no function or method in trainer/ over 80 lines."""
    import ast
    import glob

    long = []
    for path in sorted(glob.glob(os.path.join(ROOT, "trainer", "*.py"))):
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # pyright: ignore[reportOptionalOperand]
                if lines > 80:
                    long.append(f"{os.path.basename(path)}:{node.name} ({lines} lines)")
    assert not long, long


ROLLOUT_SIDE = ("worker", "step_batch", "rollout", "partial", "pipeline")


def test_the_rollout_side_imports_nothing_of_the_learner():
    """Data flows one way: the worker's modules (and all they import, transitively) never reach the
    learner or the loop; the loop hands the worker's batches to the learner."""
    graph = import_graph()
    learner = {"microcoder_jax.trainer.learner", "microcoder_jax.trainer.loop"}
    for side in ROLLOUT_SIDE:
        seen, todo = set(), [f"microcoder_jax.trainer.{side}"]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
        assert not seen & learner, f"trainer.{side} reaches {sorted(seen & learner)}"
