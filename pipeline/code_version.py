"""A fingerprint of the code a component runs, so that changing it invalidates TFX's cache.

Transform and Trainer reference their functions by module path (so the installed package runs
the same everywhere). TFX fingerprints a `module_file`, but not a module path: without this, an
edited preprocessing_fn or model would silently reuse cached results from the old code.

Each component's fingerprint covers its entry module and the package modules that module
imports, transitively, and nothing else: an edit to the model or a profile re-runs the Trainer
but not Transform, which on the whole data (or a paid Dataflow job) is the costly step.
"""
from __future__ import annotations

import ast
import hashlib
import os

import trainer_module

PACKAGE = trainer_module.__name__
PACKAGE_DIR = os.path.dirname(os.path.abspath(trainer_module.__file__))


def _source_file(name: str) -> str:
    """A package module's file relative to the package directory: "a.b" -> "a/b.py"."""
    return os.path.join(*name.split(".")) + ".py"


def _imported_modules(path: str, package: str, package_dir: str) -> set[str]:
    """Names (relative to `package`) of the package's modules that the file at `path` imports."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from package import x`: x is a module or a name defined in __init__.py.
            candidates = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in candidates:
            if name.startswith(package + "."):
                relative = name[len(package) + 1:]
                if os.path.exists(os.path.join(package_dir, _source_file(relative))):
                    found.add(relative)
    return found


def module_sources(module: str, package: str = PACKAGE,
                   package_dir: str = PACKAGE_DIR) -> list[str]:
    """The package's `__init__.py`, `module`'s file and those of every package module it imports,
    transitively, sorted (paths relative to `package_dir`)."""
    if not module.startswith(package + "."):
        raise ValueError(f"{module} is not a module of the {package} package")
    pending, seen = [module[len(package) + 1:]], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        path = os.path.join(package_dir, _source_file(name))
        if not os.path.exists(path):
            raise ValueError(f"{package}.{name} has no source file at {path}")
        pending.extend(_imported_modules(path, package, package_dir) - seen)
    return sorted(["__init__.py"] + [_source_file(name) for name in seen])


def code_version(module: str, package: str = PACKAGE, package_dir: str = PACKAGE_DIR) -> str:
    """sha256 (first 16 hex digits) over `module_sources(module)`: names and contents."""
    digest = hashlib.sha256()
    for relative in module_sources(module, package, package_dir):
        digest.update(relative.encode() + b"\0")
        with open(os.path.join(package_dir, relative), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]
