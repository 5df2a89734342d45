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

    Registering it in sys.modules while it runs lets dataclasses and pickling inside the file find their module;
    the path-derived name keeps two files (say, a train and a val reward) from replacing each other. Raises
    NotPythonFileError when the file cannot be read as Python, and whatever executing it raises (the module is then
    unregistered); callers turn both into errors that name their config key.
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
