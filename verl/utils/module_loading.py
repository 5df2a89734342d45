# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Import a user's Python file (a reward function, an environment) as a module of its own."""

import hashlib
import importlib.util
import os
import sys
from types import ModuleType


class NotPythonFileError(ImportError):
    """The file cannot be imported as Python (no loader for it)."""


def import_file(path: str, prefix: str) -> ModuleType:
    """Execute the file at `path` as a fresh module named `prefix` + a hash of its absolute path.

    It is registered in sys.modules while it runs (dataclasses and pickling find it); the path-derived name keeps two
    files apart. Raises NotPythonFileError, or whatever executing it raises (then unregistered).
    """
    module_name = prefix + hashlib.sha1(os.path.abspath(path).encode("utf-8")).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise NotPythonFileError(f"cannot import {path} as Python; it must be a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
