# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
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
