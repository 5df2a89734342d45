# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`worker.rollout.env=path/to/env.py:ClassName` -> an Environment instance, with errors that name the key. A
verifiers taskset (`path/to/taskset.py:TasksetClass` or `verifiers:<taskset id>`) runs as a VerifiersEnv; a file
written for older verifiers (a `load_environment()` returning a vf.SingleTurnEnv) is refused with what is supported."""

import os
import sys
import types
from collections.abc import Mapping
from typing import Any

from verl.envs.base import Environment
from verl.utils.module_loading import import_file


CONFIG_KEY = "worker.rollout.env"
VERIFIERS_PREFIX = "verifiers:"


class EnvironmentLoadError(ValueError):
    """The configured environment cannot be loaded or built."""


def load_environment(
    spec: str, kwargs: Mapping[str, Any] | None = None, key: str = CONFIG_KEY, kwargs_key: str = f"{CONFIG_KEY}_kwargs"
) -> Environment:
    """Import the file of `spec` ("path.py:ClassName"), build the class with `kwargs` and check it is an Environment;
    errors name the setting as `key` and `kwargs_key` (the config keys, or a command's options)."""
    if spec.startswith(VERIFIERS_PREFIX):
        return _verifiers_taskset(spec, spec[len(VERIFIERS_PREFIX) :], kwargs, key)
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise EnvironmentLoadError(f"{key}={spec!r} must be 'path/to/env.py:ClassName'.")
    if not os.path.isfile(path):
        raise EnvironmentLoadError(f"{key}={spec!r}: the file {path} does not exist.")
    try:
        module = import_file(path, "verl_env_")
    except (Exception, SystemExit) as error:
        missing = isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "verifiers"
        hint = " Install verifiers with `pip install -e '.[verifiers]'`." if missing else ""
        raise EnvironmentLoadError(
            f"{key}={spec!r}: importing {path} failed with {type(error).__name__}: {error}.{hint}"
        ) from error
    cls = getattr(module, name, None)
    tasksets = sys.modules.get("verifiers.v1.taskset")  # imported by a file that defines a taskset
    if tasksets is not None and isinstance(cls, type) and issubclass(cls, tasksets.Taskset):
        return _verifiers_taskset(spec, os.path.abspath(path), kwargs, key, name)
    if not isinstance(cls, type) or not issubclass(cls, Environment):
        if _uses_verifiers(module):
            raise EnvironmentLoadError(f"{key}={spec!r}: {_not_a_taskset(module, path, name, tasksets)}")
        raise EnvironmentLoadError(
            f"{key}={spec!r}: {path} has no Environment subclass named {name!r} (subclass verl.envs.ToolEnv, "
            "MultiTurnEnv or Environment)."
        )
    try:
        return cls(**dict(kwargs or {}))
    except (Exception, SystemExit) as error:
        raise EnvironmentLoadError(
            f"{key}={spec!r}: {name}(**{kwargs_key}={dict(kwargs or {})!r}) failed with "
            f"{type(error).__name__}: {error}."
        ) from error


def _uses_verifiers(module: types.ModuleType) -> bool:
    """Whether the module imports verifiers (the package, or something of it)."""
    for value in vars(module).values():
        where = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(where, str) and where.split(".")[0] == "verifiers":
            return True
    return False


def _not_a_taskset(module: types.ModuleType, path: str, name: str, tasksets: Any) -> str:
    """Why `name` of a file that imports verifiers cannot run: it names no taskset of the file's, or the file is an
    environment for older verifiers; and what is supported."""
    base = getattr(tasksets, "Taskset", None)
    own = [
        key
        for key, value in vars(module).items()
        if base is not None
        and isinstance(value, type)
        and issubclass(value, base)
        and value.__module__ == module.__name__
    ]
    if own:
        return f"{path} has no taskset named {name!r}; its tasksets: {', '.join(own)}."
    older = callable(getattr(module, "load_environment", None))
    what = "an environment for older verifiers (its `load_environment()`)" if older else f"{name!r}, no taskset"
    return (
        f"{path} has {what}; only verifiers 0.4 tasksets are supported: `path/to/taskset.py:TasksetClass` (a "
        "`verifiers.v1` Taskset subclass, exported in the file's `__all__`) or `verifiers:<taskset id>` (an installed "
        "taskset). An older verifiers environment (`load_environment()` returning a vf.SingleTurnEnv, MultiTurnEnv "
        "or ToolEnv) has to be written as a taskset."
    )


def _verifiers_taskset(
    spec: str, taskset: str, kwargs: Mapping[str, Any] | None, key: str, class_name: str | None = None
) -> Environment:
    """The VerifiersEnv of `taskset` (an id, or a file's path; `class_name`: the taskset class the file must
    export)."""
    from verl.envs.verifiers_env import load_verifiers_environment

    try:
        return load_verifiers_environment(taskset, kwargs, class_name)
    except NotImplementedError:
        raise
    except Exception as error:
        raise EnvironmentLoadError(f"{key}={spec!r}: {error}") from error
