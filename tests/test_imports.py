"""The project's modules import each other without cycles (function-level imports included:
a lazy import hides a cycle from Python, not from the reader)."""
from __future__ import annotations

import ast
import os

from helpers import REPO

# The top-level folders, lowest first: a module imports only from its own folder and from
# folders below it, so dependencies point one way (README, "Layout"). Folders on one line
# are peers that do not import each other.
LAYERS = (
    ("schemas", "transform_module", "components"),
    ("trainer_module",),
    ("pipeline",),  # the pipeline's definition: what create_pipeline needs
    ("engines", "metadata"),  # Beam's engines; reading ML Metadata and reporting on runs
    ("inference",),  # using a trained model: translate, evaluate
    ("runners",),  # running the pipeline locally or on Kubeflow / Vertex AI
    ("cli",),  # the `nmt` command, on top of everything
)
PACKAGES = tuple(package for layer in LAYERS for package in layer)


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


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a.x -> b.y' for each import of a folder that is not below the importer's (LAYERS)."""
    rank = {package: level for level, layer in enumerate(LAYERS) for package in layer}
    found = []
    for module, imports in sorted(graph.items()):
        here = module.split(".")[0]
        for name in sorted(imports):
            there = name.split(".")[0]
            if there != here and rank[there] >= rank[here]:
                found.append(f"{module} -> {name}")
    return found


def test_the_direction_check_finds_an_upward_and_a_sideways_import():
    graph = {"pipeline.pipeline": {"runners.local_runner", "components.atomic_pusher"},
             "engines.flink": {"metadata.runs"}, "cli.run": {"runners.local_runner"},
             "runners.local_runner": {"pipeline.pipeline", "engines.flink"}}
    assert upward_imports(graph) == ["engines.flink -> metadata.runs",
                                     "pipeline.pipeline -> runners.local_runner"]


def test_dependencies_point_down_the_layers():
    """The CLI uses everything; the runners use the pipeline; nothing in the pipeline's
    definition imports a runner, an engine, a client or the CLI."""
    graph = project_imports()
    assert {m.split(".")[0] for m in graph} == set(PACKAGES)  # every folder is in a layer
    assert upward_imports(graph) == []


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
