# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The rule-based reward in the trainer's own process (`worker.reward.run_in=driver`, the default): each batch is
scored in a daemon thread, overlapping the workers' passes without an actor's start-up (docs/performance.md). A
function that hangs past worker.reward.timeout_s stops the run."""

import threading
from concurrent.futures import Future
from typing import Any

import torch

from verl.data.tokenizer import get_tokenizer
from verl.protocol import DataProto
from verl.rewards.manager import RewardSettings, create_reward_manager
from verl.utils import stall_report


class LocalReward:
    """The reward manager of `config` (RewardConfig's attributes, or RewardSettings), scoring batches in background
    threads; in a Ray actor (ray_actor.RewardActor), its `compute_reward` is called remotely."""

    def __init__(self, config: Any, tokenizer_path: str, trust_remote_code: bool = False) -> None:
        # its own tokenizer: the trainer's thread may encode while this one decodes (the trainer loaded it too, and
        # said what it lacks)
        tokenizer = get_tokenizer(tokenizer_path, trust_remote_code=trust_remote_code, warn_no_pad=False)
        self.manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
        self.scoring: set[int] = set()
        """The threads in `compute_reward` now."""

    def compute_reward(self, data: DataProto) -> tuple[torch.Tensor, dict[str, list[float]]]:
        self.scoring.add(threading.get_ident())
        try:
            return self.manager.compute_reward(data)
        finally:
            self.scoring.discard(threading.get_ident())

    def where(self) -> str:
        """Where the batches being scored are now: the Python stack of each thread in `compute_reward` from the
        reward code on ("" when none) and, with `num_cpus` > 1, of each process of the pool the function runs in."""
        threads = stall_report.format_stacks(self.scoring, user_code_only=True)
        return threads + self.manager.where() if threads else ""

    def submit(self, data: DataProto) -> "Future[tuple[torch.Tensor, dict[str, list[float]]]]":
        """Start scoring `data`; the future gives what `manager.compute_reward` returns, or raises its error."""
        future: Future = Future()
        future.set_running_or_notify_cancel()

        def score() -> None:
            try:
                future.set_result(self.compute_reward(data))
            except BaseException as err:  # delivered to the trainer's thread by future.result()
                future.set_exception(err)

        threading.Thread(target=score, name="reward", daemon=True).start()
        return future

    def close(self) -> None:
        """Stop the worker processes of the parallel pool, if any; call before killing an actor for a clean exit."""
        self.manager.close()
