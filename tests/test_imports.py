"""The package's import graph has no cycle (imports inside functions count too)."""
import ast
import os

import microcoder_jax

ROOT = os.path.dirname(microcoder_jax.__file__)


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


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
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
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
                return stack[stack.index(dep):] + [dep]
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
