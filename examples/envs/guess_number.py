# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A multi-turn game: the model guesses the row's number; the environment answers "higher" or "lower".

    worker.rollout.env=examples/envs/guess_number.py:GuessNumber worker.rollout.max_turns=4
    worker.reward.reward_function=examples/envs/guess_number.py:compute_score

The reward function reads the episode's outcome from the environment (extra_info["env_solved"], from
`episode_info`) and rewards fewer turns: 1.0 for a first-turn hit, less for each extra turn, 0 when unsolved. With
`worker.reward.reward_function_kwargs={per_turn: false}` a win scores 1.0 whatever its turn, so only the turn budget
(`worker.rollout.max_turns`) favours short games: the CPU example examples/cpu_guess/ trains with it.
"""

import re
from typing import Any

from verl.envs import MultiTurnEnv


NUMBER = re.compile(r"-?\d+")
REWARD_TYPE = "sequential"


class GuessNumber(MultiTurnEnv):
    def reset(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"row": row, "target": int(row["ground_truth"]), "solved": False, "guesses": 0}

    def env_response(self, state: dict[str, Any], response: str) -> tuple[list[dict[str, Any]], bool]:
        match = NUMBER.search(response)
        state["guesses"] += 1
        if match is None:
            return [{"role": "user", "content": "Answer with a number."}], False
        guess = int(match.group(0))
        if guess == state["target"]:
            state["solved"] = True
            return [], True
        return [{"role": "user", "content": "higher" if guess < state["target"] else "lower"}], False

    def episode_info(self, state: dict[str, Any]) -> dict[str, float]:
        return {"solved": float(state["solved"]), "guesses": float(state["guesses"])}


def compute_score(sample: dict[str, Any], per_turn: bool = True) -> dict[str, float]:
    """solved / turns (per_turn) or solved."""
    info = sample["extra_info"]
    solved = float(info.get("env_solved", 0.0))
    turns = float(info.get("env_turns", 1.0))
    return {"overall": solved / turns if per_turn else solved, "solved": solved}
