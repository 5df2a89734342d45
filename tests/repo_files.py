# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Load the repository's scripts, benchmarks and examples (files outside any package) as modules in tests.

Importable from every test directory: pytest puts tests/ on sys.path for tests/conftest.py.
"""

import functools
import importlib.util
from pathlib import Path
from types import ModuleType


REPO = Path(__file__).resolve().parents[1]


def load_repo_file(relative_path: str, name: str | None = None) -> ModuleType:
    """Execute REPO/relative_path as a fresh module (named after the file unless `name` is given)."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _model_merger() -> ModuleType:
    return load_repo_file("scripts/model_merger.py", "model_merger_in_tests")


def export_checkpoint(actor_dir, target, *flags: str) -> None:
    """scripts/model_merger.py's `main` in this process, writing fp32 weights (tests/scripts/test_model_merger.py
    runs it as the command; a new Python per export would import torch and transformers again)."""
    target_dir = ["--target_dir", str(target)] if target is not None else []  # None: the merger's default
    argv = ["--local_dir", str(actor_dir), *target_dir, "--dtype", "fp32", *flags]
    assert _model_merger().main(argv) == 0, argv
