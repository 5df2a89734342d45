# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
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
