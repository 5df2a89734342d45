# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Settings that change during training (Skywork-OR1, arXiv 2505.22312): the staged response length and the adaptive
entropy coefficient. The stage is a pure function of the global step, so a resume needs nothing saved; the entropy
coefficient is checkpointed. Config keys: README.md's "Reasoning runs"."""

from typing import Any


def check_response_length_schedule(schedule: dict[int, int], max_response_length: int) -> str | None:
    """An error message for a schedule that cannot work, or None (an empty schedule is valid)."""
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
    if schedule and min(schedule) != 0:
        return f"starts at step {min(schedule)}; the first stage must start at step 0."
    return None


def response_length_at(schedule: dict[int, int], step: int, default: int) -> int:
    """The length of the stage `step` is in (largest start <= step)."""
    if not schedule:
        return default
    started = [start for start in schedule if start <= step]
    return schedule[max(started)] if started else schedule[min(schedule)]


class EntropyController:
    """The entropy bonus' coefficient, stepped by +-delta towards a target entropy, clipped to [min_coef, max_coef],
    and applied only while the entropy is at or below the target (Skywork-OR1's alpha_k = c_k 1{e_k <= target}):
    above it the bonus is off, not just shrinking, so it does not push the entropy further up."""

    def __init__(self, init_coef: float, target: float, delta: float, min_coef: float, max_coef: float) -> None:
        self.coef = min(max(init_coef, min_coef), max_coef)
        self.target, self.delta = target, delta
        self.min_coef, self.max_coef = min_coef, max_coef
        self.applied = self.coef
        """The coefficient the next update uses: `coef`, or 0 after a step whose entropy was above the target."""

    def update(self, entropy: float) -> float:
        """Step the coefficient by this step's entropy; returns the next update's (`applied`)."""
        if entropy < self.target:
            self.coef += self.delta
        elif entropy > self.target:
            self.coef -= self.delta
        self.coef = min(max(self.coef, self.min_coef), self.max_coef)
        self.applied = self.coef if entropy <= self.target else 0.0
        return self.applied

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef, "applied": self.applied}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = float(state["coef"])
        self.applied = float(state.get("applied", self.coef))  # a checkpoint saved before the gate: its coefficient
