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
"""HybridEngine: moving the FSDP2 actor's weights into the colocated vLLM engine (fsdp_vllm.py)."""

from typing import Any


__all__ = ["FSDPVLLMShardingManager", "sync_weights"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from verl.workers.sharding_manager import fsdp_vllm

        return getattr(fsdp_vllm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
