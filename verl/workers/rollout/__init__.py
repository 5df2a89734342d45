# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rollout: the vLLM engine in SPMD mode (vllm_rollout.py), its config, and the vLLM adapter (vllm_compat.py); the
rollout pool's engine process in mode=disaggregated (rollout_worker.py).

`VLLMRollout` is imported lazily: importing this package (e.g. for RolloutConfig) must not import vLLM.
"""

from typing import Any

from verl.workers.rollout.config import RolloutConfig


__all__ = ["RolloutConfig", "VLLMRollout"]


def __getattr__(name: str) -> Any:
    if name == "VLLMRollout":
        from verl.workers.rollout.vllm_rollout import VLLMRollout

        return VLLMRollout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
