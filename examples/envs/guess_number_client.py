# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The guess-the-number game of guess_number.py written in the client style (as `verifiers` environments are): the
episode asks the model for each guess itself through an OpenAI-style chat client.

    worker.rollout.env=examples/envs/guess_number_client.py:GuessNumberChat worker.rollout.max_turns=4
    worker.reward.reward_function=examples/envs/guess_number.py:compute_score

    python -m verl.envs.evaluate --env examples/envs/guess_number_client.py:GuessNumberChat --data val.jsonl \\
        --base-url http://127.0.0.1:8000/v1

In training the client is the rollout engine (all episodes' requests batched); in evaluation a real
`openai.AsyncOpenAI` client. `max_guesses` bounds the episode here; rollout.max_turns (or --max-turns) too.
"""

import re
from typing import Any

from verl.envs import ChatClientEnv


NUMBER = re.compile(r"-?\d+")


class GuessNumberChat(ChatClientEnv):
    def __init__(self, max_guesses: int = 4) -> None:
        self.max_guesses = max_guesses

    def reset(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"row": row, "target": int(row["ground_truth"]), "solved": False, "guesses": 0}

    async def rollout(self, client: Any, model: str, messages: list[dict[str, Any]], state: dict[str, Any]) -> None:
        for _ in range(self.max_guesses):
            reply = await client.chat.completions.create(model=model, messages=messages, max_tokens=16)
            text = reply.choices[0].message.content or ""
            state["guesses"] += 1
            match = NUMBER.search(text)
            if match is not None and int(match.group(0)) == state["target"]:
                state["solved"] = True
                return
            if match is None:
                hint = "Answer with a number."
            else:
                hint = "higher" if int(match.group(0)) < state["target"] else "lower"
            messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": hint}]

    def episode_info(self, state: dict[str, Any]) -> dict[str, float]:
        return {"solved": float(state["solved"]), "guesses": float(state["guesses"])}
