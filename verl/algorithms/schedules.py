# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Settings that change as training goes on: the staged response length and the adaptive entropy coefficient.

Both follow Skywork-OR1 (arXiv 2505.22312). The stage is a pure function of the global step, so a resumed run
continues in the right stage without saving anything; the entropy coefficient is saved with the checkpoint.
README.md's "Reasoning runs" describes the config keys.
"""

from typing import Any


def check_response_length_schedule(schedule: dict[int, int], max_response_length: int) -> str | None:
    """An error message for a schedule that cannot work, or None. Empty schedules are valid (no stages)."""
    if not schedule:
        return None
    for step, length in schedule.items():
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            return (
                f"has the key {step!r}; keys are the training steps (as logged) where a stage starts, the first at 0."
            )
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            return f"gives step {step} the length {length!r}; lengths are positive numbers of tokens."
        if length > max_response_length:
            return (
                f"gives step {step} the length {length}, above data.max_response_length={max_response_length}; the "
                "engine and the batch budgets are sized for data.max_response_length: set it to the longest stage."
            )
    if min(schedule) != 0:
        return f"starts at step {min(schedule)}; the first stage must start at step 0."
    return None


def response_length_at(schedule: dict[int, int], step: int, default: int) -> int:
    """The response length of the stage that `step` is in (the stage with the largest start <= step)."""
    if not schedule:
        return default
    started = [start for start in schedule if start <= step]
    return schedule[max(started)] if started else schedule[min(schedule)]


class EntropyController:
    """The entropy bonus' coefficient, adapted to keep the policy's token entropy near a target.

    After each step with measured entropy e: coef += delta if e < target, coef -= delta if e > target, then clipped
    to [min_coef, max_coef].
    """

    def __init__(self, init_coef: float, target: float, delta: float, min_coef: float, max_coef: float) -> None:
        self.coef = min(max(init_coef, min_coef), max_coef)
        self.target, self.delta = target, delta
        self.min_coef, self.max_coef = min_coef, max_coef

    def update(self, entropy: float) -> float:
        if entropy < self.target:
            self.coef += self.delta
        elif entropy > self.target:
            self.coef -= self.delta
        self.coef = min(max(self.coef, self.min_coef), self.max_coef)
        return self.coef

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = float(state["coef"])
