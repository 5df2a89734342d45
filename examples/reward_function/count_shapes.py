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
"""Reward of the CPU quickstart: 1.0 when the first number in the response is the number of squares."""

import re
from typing import Any


REWARD_NAME = "count_shapes"
REWARD_TYPE = "sequential"


def compute_score(sample: dict[str, Any]) -> dict[str, float]:
    match = re.search(r"\d+", sample["response"])
    answered = match is not None
    accuracy = float(answered and match.group(0) == str(sample["ground_truth"]).strip())
    return {"overall": accuracy, "accuracy": accuracy, "format": float(answered)}
