# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`worker.rollout.env=path/to/env.py:ClassName` -> an Environment instance, with errors that name the key. A
verifiers taskset (`path/to/taskset.py:TasksetClass` or `verifiers:<taskset id>`) runs as a VerifiersEnv."""

import os
import sys
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
    except Exception as error:
        missing = isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "verifiers"
        hint = " Install verifiers with `pip install -e '.[verifiers]'`." if missing else ""
        raise EnvironmentLoadError(
            f"{key}={spec!r}: importing {path} failed with {type(error).__name__}: {error}.{hint}"
        ) from error
    cls = getattr(module, name, None)
    tasksets = sys.modules.get("verifiers.v1.taskset")  # imported by a file that defines a taskset
    if tasksets is not None and isinstance(cls, type) and issubclass(cls, tasksets.Taskset):
        return _verifiers_taskset(spec, os.path.abspath(path), kwargs, key)
    if not isinstance(cls, type) or not issubclass(cls, Environment):
        raise EnvironmentLoadError(
            f"{key}={spec!r}: {path} has no Environment subclass named {name!r} (subclass verl.envs.ToolEnv, "
            "MultiTurnEnv or Environment)."
        )
    try:
        return cls(**dict(kwargs or {}))
    except Exception as error:
        raise EnvironmentLoadError(
            f"{key}={spec!r}: {name}(**{kwargs_key}={dict(kwargs or {})!r}) failed with "
            f"{type(error).__name__}: {error}."
        ) from error


def _verifiers_taskset(spec: str, taskset: str, kwargs: Mapping[str, Any] | None, key: str) -> Environment:
    """The VerifiersEnv of `taskset` (an id, or a file's path)."""
    from verl.envs.verifiers_env import load_verifiers_environment

    try:
        return load_verifiers_environment(taskset, kwargs)
    except NotImplementedError:
        raise
    except Exception as error:
        raise EnvironmentLoadError(f"{key}={spec!r}: {error}") from error
