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
"""Where the project reaches into transformers' internals, each because a run is wrong without it; a test per entry
(tests/models/test_transformers_compat.py) fails when transformers changes under it."""

from typing import Any


def keep_output_capture(module: Any, model_class: type) -> None:
    """Let a submodel that `fully_shard` gave an FSDP subclass still record its layers' outputs (transformers 5.19).

    transformers records `output_hidden_states` through hooks chosen by the model's class, looked up by the class's
    name in a registry filled when the model is built (`output_capturing._CAN_RECORD_REGISTRY`); fully_shard then swaps
    the class, so the lookup misses and `hidden_states` comes back None. LLaVA-OneVision's SigLIP tower is read that way
    (`get_image_features` takes `hidden_states[vision_feature_layer]`): without this its sharded forward fails."""
    from transformers.utils import output_capturing

    flags = output_capturing._CAN_RECORD_REGISTRY.get(str(model_class))
    if flags is not None:
        output_capturing._CAN_RECORD_REGISTRY[str(type(module))] = flags
