"""A fingerprint of the code a component runs, so that changing it invalidates TFX's cache.

Transform and Trainer reference their functions by module path (so the installed package runs
the same everywhere). TFX fingerprints a `module_file`, but not a module path: without this, an
edited preprocessing_fn or model would silently reuse cached results from the old code.

Each component's fingerprint covers its entry module and the modules of the component packages
(`PACKAGES`) that it imports, transitively, and nothing else: an edit to the model or a profile
re-runs the Trainer but not Transform, which on the whole data (or a paid Dataflow job) is the
costly step. The Trainer imports Transform's preprocessing (its graph is in the exported model),
so an edit to the tokenization re-runs both.
"""
from __future__ import annotations

import ast
import hashlib
import os

import trainer_module
import transform_module

# The packages that hold component code, all found under ROOT (the repository root).
PACKAGES = (transform_module.__name__, trainer_module.__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(transform_module.__file__)))


def _source_file(name: str, packages: tuple[str, ...]) -> str:
    """A module's file relative to the root: "a.b" -> "a/b.py", a package "a" -> "a/__init__.py"
    (importing any module of a package runs its __init__.py first)."""
    if name in packages:
        return os.path.join(name, "__init__.py")
    return os.path.join(*name.split(".")) + ".py"


def _in_packages(name: str, packages: tuple[str, ...]) -> bool:
    return name.split(".")[0] in packages


def _imported_modules(path: str, packages: tuple[str, ...], root: str) -> set[str]:
    """Names of the packages' modules (packages included) that the file at `path` imports."""
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
            if _in_packages(name, packages) and os.path.exists(
                    os.path.join(root, _source_file(name, packages))):
                found.add(name)
    return found


def module_sources(module: str, packages: tuple[str, ...] = PACKAGES,
                   root: str = ROOT) -> list[str]:
    """`module`'s file, those of every module of `packages` it imports, transitively, and the
    `__init__.py` of each package they are in, sorted (paths relative to `root`)."""
    if not _in_packages(module, packages):
        raise ValueError(f"{module} is not a module of {' or '.join(packages)}")
    pending, seen = [module], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        path = os.path.join(root, _source_file(name, packages))
        if not os.path.exists(path):
            raise ValueError(f"{name} has no source file at {path}")
        pending.append(name.split(".")[0])
        pending.extend(_imported_modules(path, packages, root) - seen)
    return sorted(_source_file(name, packages) for name in seen)


def code_version(module: str, packages: tuple[str, ...] = PACKAGES, root: str = ROOT) -> str:
    """sha256 (first 16 hex digits) over `module_sources(module)`: names and contents."""
    digest = hashlib.sha256()
    for relative in module_sources(module, packages, root):
        digest.update(relative.encode() + b"\0")
        with open(os.path.join(root, relative), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]
