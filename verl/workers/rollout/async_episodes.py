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
"""Multi-turn episodes in the asynchronous request loop (worker.rollout.env with mode=colocated or disaggregated).

Each sample of the request loop plays one `Episode` (verl.workers.rollout.multi_turn): a request is one model turn.
When a turn's request finishes, the environment's step runs on a thread of its own while the engine keeps stepping
the other requests; its messages become the episode's next environment turn (loss mask 0) and the next model turn is
submitted. A turn stopped at a step boundary keeps its tokens and continues after the weight sync like a single-turn
sample, so an episode's turns (and even one turn) may span policy versions; each model token records its version,
environment tokens record -1.
"""

import dataclasses
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from verl.envs.base import Environment
from verl.workers.rollout.multi_turn import TurnRunner, apply_step
from verl.workers.rollout.request_loop import Group, Sample, resume_seed


TURN_SEED_STRIDE = 7919
"""Turn t of an episode seeded `seed + 7919 t`, as the synchronous multi-turn rollout seeds it."""


@dataclasses.dataclass
class _Step:
    future: Future
    started: float
    group: Group
    sample: Sample
    turn_end: str


class TurnHooks:
    """What the request loop's multi-turn hooks share: a request is the rest of the sample's current model turn, and a
    finished request adds that turn to the episode. Subclasses say when a turn begins and how long it may be
    (`_turn_limit`) and what happens after it (`turn_done`)."""

    def __init__(self, runner: TurnRunner) -> None:
        self.runner = runner
        self._runners: dict[int, TurnRunner] = {}

    def _for(self, group: Group) -> TurnRunner:
        """The runner of a group: its response budget is the group's (the step's response length when it was
        admitted, or its row's own cap)."""
        if group.budget not in self._runners:
            self._runners[group.budget] = dataclasses.replace(self.runner, budget=group.budget)
        return self._runners[group.budget]

    def _turn_limit(self, group: Group, sample: Sample) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Stop what runs beside the engine for the episodes (the request loop drops them)."""

    def request(self, group: Group, sample: Sample) -> tuple[dict[str, Any], int, int | None]:
        """(engine input, max tokens, seed) of the sample's next request: its turn from the start, or the rest of a
        turn stopped at a step boundary."""
        episode = sample.episode
        if not sample.tokens:
            sample.turn_limit = self._turn_limit(group, sample)
        prompt = episode.engine_input()
        prompt["prompt_token_ids"] = prompt["prompt_token_ids"] + sample.tokens
        seed = None if episode.seed is None else episode.seed + TURN_SEED_STRIDE * episode.turns
        if sample.tokens:
            seed = resume_seed(seed, len(sample.tokens))
        return prompt, sample.turn_limit - len(sample.tokens), seed

    def _end_model_turn(self, group: Group, sample: Sample) -> str | None:
        """Add the sample's finished turn to its episode (see `TurnRunner.add_model_tokens`; model tokens keep their
        versions) and clear it for the next one."""
        episode = sample.episode
        before = len(episode.ids)
        logprobs = sample.logprobs if self.runner.with_logprobs else None
        turn_end = self._for(group).add_model_tokens(episode, sample.tokens, logprobs, sample.turn_limit)
        sample.episode_versions += sample.versions[: len(episode.ids) - before]
        sample.tokens, sample.logprobs, sample.versions = [], [], []
        return turn_end


class EpisodeTurns(TurnHooks):
    """The request loop's multi-turn hooks: what a sample's next request is, what happens when a turn ends, and the
    environment steps running meanwhile (at most `env.concurrent_steps` at a time)."""

    def __init__(self, runner: TurnRunner, env: Environment) -> None:
        super().__init__(runner)
        self.env = env
        self.pool = ThreadPoolExecutor(max(1, int(getattr(env, "concurrent_steps", 1))), thread_name_prefix="env-step")
        self.steps: dict[int, _Step] = {}
        """id(sample) -> its environment step in flight."""

    @property
    def pending(self) -> int:
        return len(self.steps)

    def waiting(self, sample: Sample) -> bool:
        return id(sample) in self.steps

    def _turn_limit(self, group: Group, sample: Sample) -> int:
        return self._for(group).turn_limit(sample.episode)

    def turn_done(self, group: Group, sample: Sample) -> bool:
        """The sample's model turn is complete: add it to the episode; True when the episode is over, else its
        environment step starts."""
        turn_end = self._end_model_turn(group, sample)
        if turn_end is None:
            return True
        episode = sample.episode
        future = self.pool.submit(self.env.step, episode.state, episode.last_turn)
        self.steps[id(sample)] = _Step(future, time.monotonic(), group, sample, turn_end)
        return False

    def poll(self) -> tuple[bool, bool]:
        """Apply the environment steps that have finished; (whether a group became complete, whether a sample is
        ready for its next request). A step past worker.rollout.env_step_timeout_s raises TimeoutError."""
        completed, ready = False, False
        timeout = self.runner.env_step_timeout_s
        for key, step in list(self.steps.items()):
            if not step.future.done():
                if timeout > 0 and time.monotonic() - step.started > timeout:
                    raise self.runner.env_timeout_error(step.sample.index, step.sample.episode.turns)
                continue
            del self.steps[key]
            episode = step.sample.episode
            before = len(episode.ids)
            apply_step(self._for(step.group), episode, step.future.result(), step.turn_end)
            step.sample.episode_versions += [-1] * (len(episode.ids) - before)  # environment tokens
            if episode.done:
                step.sample.finished = True
                completed = completed or step.group.complete
            else:
                ready = True
        return completed, ready

    def close(self) -> None:
        """Steps not yet started are cancelled; one still running (a hung tool) cannot be stopped from here and ends
        on its own, its result unread."""
        self.steps.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def wait(self, timeout_s: float) -> None:
        """Until an environment step finishes (or `timeout_s`)."""
        futures = [step.future for step in self.steps.values()]
        if futures:
            wait_futures(futures, timeout=timeout_s, return_when=FIRST_COMPLETED)
