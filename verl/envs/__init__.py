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
"""Environments for multi-turn and tool-use rollouts (see verl.envs.base)."""

from verl.envs.base import Environment, EnvStep, MultiTurnEnv, SingleTurnEnv
from verl.envs.client_env import ChatClientEnv, EpisodeOver
from verl.envs.loader import load_environment
from verl.envs.parsers import XMLParser
from verl.envs.tools import ToolEnv, parse_tool_calls, python_tool


__all__ = [
    "ChatClientEnv",
    "EnvStep",
    "Environment",
    "EpisodeOver",
    "MultiTurnEnv",
    "SingleTurnEnv",
    "ToolEnv",
    "VerifiersEnv",
    "XMLParser",
    "load_environment",
    "parse_tool_calls",
    "python_tool",
]


def __getattr__(name: str):  # VerifiersEnv on first use, so that `python -m verl.envs.verifiers_env` runs cleanly
    if name == "VerifiersEnv":
        from verl.envs.verifiers_env import VerifiersEnv

        return VerifiersEnv
    raise AttributeError(f"module 'verl.envs' has no attribute {name!r}")
