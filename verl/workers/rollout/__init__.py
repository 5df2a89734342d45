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
