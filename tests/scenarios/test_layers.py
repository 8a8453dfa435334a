"""The modules of ``scenarios`` import one another without a cycle, counting imports inside functions too,
and none of them imports a project layer above ``scenarios``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABOVE = ("envs", "policy", "rollout", "evaluation", "learner")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path, package: str, modules: set[str]) -> set[str]:
    """Every project module ``path`` imports, at any depth of the file (functions included); ``from p
    import name`` counts as importing ``p.name`` when that is a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in modules else node.module)
    return out


def import_graph(package: str = "scenarios") -> dict[str, set[str]]:
    files = sorted((ROOT / package).rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, package, modules) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle among the graph's nodes (edges to other names ignored), as a path, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if m not in graph:
                continue
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "x"}, "b": set()}) is None


def test_scenarios_has_no_import_cycle():
    graph = import_graph("scenarios")
    # the package __init__ imports its modules; no module imports the package back
    inner = {k: {m for m in v if m != "scenarios"} for k, v in graph.items()}
    assert all("scenarios" not in v for k, v in graph.items() if k != "scenarios"), graph
    assert find_cycle(inner) is None, find_cycle(inner)
    assert {"scenarios.builtin", "scenarios.generation", "scenarios.io", "scenarios.format", "scenarios.scene"} <= set(
        graph
    )


def test_scenarios_imports_no_layer_above_it():
    graph = import_graph("scenarios")
    up = {(k, m) for k, v in graph.items() for m in v if m.split(".")[0] in ABOVE}
    assert up == set(), up
