# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""`worker.rollout.env=path/to/env.py:ClassName` -> an Environment instance, with errors that name the key."""

import os
from collections.abc import Mapping
from typing import Any

from verl.envs.base import Environment
from verl.utils.module_loading import import_file


CONFIG_KEY = "worker.rollout.env"


class EnvironmentLoadError(ValueError):
    """The configured environment cannot be loaded or built."""


def load_environment(spec: str, kwargs: Mapping[str, Any] | None = None) -> Environment:
    """Import the file of `spec` ("path.py:ClassName"), build the class with `kwargs` and check it is an Environment."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise EnvironmentLoadError(f"{CONFIG_KEY}={spec!r} must be 'path/to/env.py:ClassName'.")
    if not os.path.isfile(path):
        raise EnvironmentLoadError(f"{CONFIG_KEY}={spec!r}: the file {path} does not exist.")
    try:
        module = import_file(path, "verl_env_")
    except Exception as error:
        raise EnvironmentLoadError(
            f"{CONFIG_KEY}={spec!r}: importing {path} failed with {type(error).__name__}: {error}."
        ) from error
    cls = getattr(module, name, None)
    if not isinstance(cls, type) or not issubclass(cls, Environment):
        raise EnvironmentLoadError(
            f"{CONFIG_KEY}={spec!r}: {path} has no Environment subclass named {name!r} (subclass verl.envs.ToolEnv, "
            "MultiTurnEnv or Environment)."
        )
    try:
        return cls(**dict(kwargs or {}))
    except Exception as error:
        raise EnvironmentLoadError(
            f"{CONFIG_KEY}={spec!r}: {name}(**worker.rollout.env_kwargs={dict(kwargs or {})!r}) failed with "
            f"{type(error).__name__}: {error}."
        ) from error
