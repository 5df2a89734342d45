# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Thinking with images: a `zoom` tool that returns an enlarged quarter of the prompt's picture, which the model's
next turn sees (a vision-language model only).

    worker.rollout.env=examples/envs/zoom.py:Zoom worker.rollout.max_turns=2 worker.rollout.limit_images=2
    worker.reward.reward_function=examples/envs/zoom.py:compute_score

The model calls <tool_call>{"name": "zoom", "arguments": {"quadrant": "top-left"}}</tool_call> (or writes the call in
its own chat template's format: `tool_format`); the environment crops that quarter of the row's first picture
(`row["prompt_images"]`, as the model sees it), enlarges it to the picture's own size and answers with a tool message
holding that picture. The episode ends at the first turn without a tool call; `examples/cpu_zoom.sh` trains the tiny
Qwen2.5-VL on it (a dot's colour, readable only once enlarged).
"""

import re
from typing import Any

from verl.envs import EnvStep, MultiTurnEnv
from verl.envs.tools import HERMES


REWARD_TYPE = "sequential"
QUADRANTS = {"top-left": (0, 0), "top-right": (1, 0), "bottom-left": (0, 1), "bottom-right": (1, 1)}
COLOURS = ("red", "green", "blue")
SCHEMA = {
    "type": "function",
    "function": {
        "name": "zoom",
        "description": "Enlarge one quarter of the picture.",
        "parameters": {
            "type": "object",
            "properties": {"quadrant": {"type": "string", "enum": list(QUADRANTS)}},
            "required": ["quadrant"],
        },
    },
}


def zoom(image: Any, quadrant: str) -> Any:
    """The `quadrant` quarter of `image`, enlarged back to the image's size."""
    column, row = QUADRANTS[quadrant]
    width, height = image.size
    box = (column * width // 2, row * height // 2, (column + 1) * width // 2, (row + 1) * height // 2)
    return image.crop(box).resize((width, height))


class Zoom(MultiTurnEnv):
    """Zooms into the prompt's picture on request; counts zooms and calls that went wrong."""

    concurrent_steps = 8
    tool_format = HERMES
    """How the model writes calls: the rollout sets it from the chat template (Hermes JSON for Qwen2.5-VL)."""

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [SCHEMA]

    def reset(self, row: dict[str, Any]) -> dict[str, Any]:
        images = row.get("prompt_images") or []
        return {"image": images[0] if images else None, "zooms": 0, "errors": 0}

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        calls = self.tool_format.read(response)[1]
        if not calls:
            return EnvStep(messages=[], done=True)
        messages, errors = [], 0
        for call in calls:
            problem = None
            if isinstance(call, str):
                problem = call
            elif call["name"] != "zoom":
                problem = f"there is no tool named {call['name']!r}; the only tool is zoom"
            elif call["arguments"].get("quadrant") not in QUADRANTS:
                problem = f"quadrant must be one of {', '.join(QUADRANTS)}, got {call['arguments'].get('quadrant')!r}"
            elif state["image"] is None:
                problem = "this question has no picture to zoom into"
            if problem is not None:
                errors += 1
                messages.append({"role": "tool", "content": f"Error: {problem}."})
                continue
            quadrant = call["arguments"]["quadrant"]
            state["zooms"] += 1
            enlarged = zoom(state["image"], quadrant)
            messages.append({"role": "tool", "content": [{"type": "image", "image": enlarged}]})
        state["errors"] += errors
        return EnvStep(messages=messages, done=False, tool_calls=len(calls), tool_errors=errors)

    def episode_info(self, state: dict[str, Any]) -> dict[str, float]:
        return {"zooms": float(state["zooms"]), "zoom_errors": float(state["errors"])}


def compute_score(sample: dict[str, Any]) -> dict[str, float]:
    """1 for the right colour word in the final turn, and a 0.1 bonus for a zoom without errors before it."""
    words = re.findall(r"[a-z]+", sample["extra_info"].get("last_turn", sample["response"]).lower())
    named = [word for word in words if word in COLOURS]
    correct = float(bool(named) and named[-1] == str(sample["ground_truth"]).strip().lower())
    info = sample["extra_info"]
    zoomed = float(info.get("env_zooms", 0) > 0 and info.get("env_zoom_errors", 0) == 0)
    return {"overall": correct + 0.1 * zoomed, "accuracy": correct, "zoomed": zoomed}
