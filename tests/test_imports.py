"""The project's modules import each other without cycles (function-level imports included:
a lazy import hides a cycle from Python, not from the reader)."""
from __future__ import annotations

import ast
import os

from helpers import REPO

PACKAGES = ("cli", "pipeline", "components", "transform_module", "trainer_module",
            "schemas")


def project_imports() -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its source."""
    modules = {}
    for package in PACKAGES:
        for directory, _, files in os.walk(os.path.join(REPO, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                    modules[dotted.removesuffix(".__init__")] = path
    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        graph[module] = {n for n in names if n in modules and n != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_among_the_project_modules():
    graph = project_imports()
    assert {"cli.main", "trainer_module.task", "components.atomic_pusher"} <= set(graph)
    assert cycles(graph) == []


def test_the_commands_sit_on_top_one_module_per_subcommand():
    """`cli` imports the rest, nothing imports `cli`; each `nmt` subcommand has its module."""
    graph = project_imports()
    assert {m for m in graph if m.startswith("cli.")} == {
        "cli.main", "cli.errors", "cli.__main__", "cli.run", "cli.translate", "cli.evaluate",
        "cli.kubeflow", "cli.metadata", "cli.report"}
    below = {m: sorted(n for n in imports if n.split(".")[0] == "cli")
             for m, imports in graph.items() if m.split(".")[0] != "cli"}
    assert {m: names for m, names in below.items() if names} == {}


def test_every_expected_error_of_the_commands_names_an_exception_class():
    """cli.errors matches its table by module and class name: a typo would never match."""
    import importlib

    from cli import errors

    for module, name, status in errors.EXPECTED_ERRORS:
        assert issubclass(getattr(importlib.import_module(module), name), Exception), name
        assert status in (1, 2)
    assert errors.exit_status(errors.UsageError("x")) == 2
    assert errors.exit_status(errors.CommandError("x")) == 1
    assert errors.exit_status(KeyError("a bug")) is None
