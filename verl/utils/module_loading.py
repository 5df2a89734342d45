# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Import a user's Python file (a reward function, an environment) as a module of its own, and say where its code
failed."""

import hashlib
import importlib.util
import os
import sys
import sysconfig
import traceback
from types import ModuleType


class NotPythonFileError(ImportError):
    """The file cannot be imported as Python (no loader for it)."""


_IMPORTED: dict[tuple[str, str], tuple[bytes, ModuleType]] = {}
"""(prefix, absolute path) -> (digest of the file's bytes, module): a file runs once per process while unchanged."""


def import_file(path: str, prefix: str) -> ModuleType:
    """Execute the file at `path` as a module named `prefix` + a hash of its absolute path (keeping two files apart),
    registered in sys.modules while it runs (dataclasses and pickling find it). Once per process, as Python's own
    imports: the driver's config check and its training share the module (a file that loads a model at its top level
    loads it once); a file changed since is run again. Raises NotPythonFileError, or whatever executing it raises
    (then unregistered)."""
    absolute = os.path.abspath(path)
    with open(absolute, "rb") as file:
        digest = hashlib.sha1(file.read()).digest()
    known = _IMPORTED.get((prefix, absolute))
    if known is not None and known[0] == digest:
        return known[1]
    module_name = prefix + hashlib.sha1(absolute.encode("utf-8")).hexdigest()[:12]
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
    _IMPORTED[(prefix, absolute)] = digest, module
    return module


def user_traceback(error: BaseException) -> str:
    """The traceback of `error` from the first frame of the user's code (outside this package, Python's own library
    and installed packages), as Python prints it: put in an error's message, where the user's code raised crosses
    processes and Ray, which a traceback does not."""
    lines = traceback.format_list(user_frames(traceback.extract_tb(error.__traceback__)))
    return "".join(lines + traceback.format_exception_only(type(error), error)).rstrip("\n")


def user_frames(frames: traceback.StackSummary) -> list[traceback.FrameSummary]:
    """`frames` (outermost first) from the first of the user's code: outside this package, Python's own library and
    installed packages; all of them where none is."""
    paths = sysconfig.get_paths()
    ours = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), paths["stdlib"], paths["purelib"])
    first = next((i for i, frame in enumerate(frames) if not frame.filename.startswith(ours)), 0)
    return list(frames[first:])


def user_error_message(error: BaseException) -> str:
    """The message of an error about a user's code or data for a person: its own text, also when it reached the
    driver wrapped in Ray's task error or re-raised from a data-loader worker (whose texts add the worker's stack)."""
    original = getattr(error, "cause", None)  # ray.exceptions.RayTaskError: the worker's own exception
    error = original if isinstance(original, BaseException) else error
    text = str(error)
    if text.startswith("Caught ") and "\nOriginal Traceback" in text:  # re-raised from a torch DataLoader worker
        kind = type(error)
        # the traceback's last line that opens with the error's type (a chained error's own comes last); the message
        # itself may name the type again ("... raised ValueError: ...")
        for prefix in (f"\n{kind.__module__}.{kind.__qualname__}: ", f"\n{kind.__name__}: "):
            if prefix in text:
                return text[text.rindex(prefix) + len(prefix) :].strip()
    return text
