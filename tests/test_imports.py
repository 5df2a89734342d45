# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every module of the package imports on its own, and the package's modules import each other without a cycle.

The static check reads every `import` of the package (those inside functions too: a cycle held together by imports
inside functions is still a cycle). The dynamic check imports each module first, in a child forked from a fresh
single-threaded server process that has the heavy third-party libraries loaded but no `verl` module, so a module that
works only because another one was imported before it fails here. (Children forked from the test process itself
inherit its other threads' locks: one waited for ever on a lock that a thread of the xdist worker held at the fork.)
"""

import ast
import importlib
import multiprocessing
import os
import pathlib
import sys
import traceback

import pytest


PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "verl"


def package_modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_graph(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its source (relative imports resolved)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_import_cycle():
    cycles = strongly_connected(import_graph(package_modules()))
    assert not cycles, "modules that import each other (directly or through others): " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def _import_alone(name: str) -> str | None:
    """In a forked child: import `name` as the first module of the package; the error's traceback, or None."""
    assert not any(module == "verl" or module.startswith("verl.") for module in sys.modules)
    try:
        importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - any failure is reported by name
        return traceback.format_exc(limit=-3)
    return None


IMPORTS_TIMEOUT_S = 300
"""Each module alone takes about 20 s in all on an idle machine."""


HEAVY_MODULES = ("torch", "transformers", "ray", "tensordict", "PIL.Image", "datasets")


def test_every_module_imports_on_its_own():
    # The children fork from a forkserver: a process started afresh (no thread, lock or signal handler of this one),
    # which imports the heavy libraries once and forks a child per module.
    leftovers = [module for module in sys.modules if module == "verl" or module.startswith("verl.")]
    saved = {module: sys.modules.pop(module) for module in leftovers}  # the server starts without any verl module
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(HEAVY_MODULES))
    try:
        names = sorted(package_modules())
        for attempt in range(2):
            with context.Pool(min(2, os.cpu_count() or 1), maxtasksperchild=1) as pool:
                try:
                    errors = dict(zip(names, pool.map_async(_import_alone, names, chunksize=1).get(IMPORTS_TIMEOUT_S)))
                    break
                except multiprocessing.TimeoutError:
                    assert attempt == 0, (
                        f"importing the package's modules one by one took over {IMPORTS_TIMEOUT_S} s twice"
                    )
    finally:
        sys.modules.update(saved)
    failed = {name: error for name, error in errors.items() if error}
    assert not failed, "\n".join(f"{name}:\n{error}" for name, error in failed.items())


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
