# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.workers.rollout.engine_thread without an engine: what a finished task held is freed at once."""

import gc
import time
import types
import weakref

import torch

from verl.workers.rollout.engine_thread import EngineThread


def test_a_finished_tasks_closure_is_not_kept_until_the_next_task() -> None:
    """The rollout pool posts each sync's `load` to the engine thread, its closure holding the received weights (a
    whole model): the loop's variables kept it alive until the next task came, so the next sync received a second
    copy beside it (two copies of the weights on the device at peak)."""
    engine = types.SimpleNamespace(has_unfinished_requests=lambda: False)
    thread = EngineThread(types.SimpleNamespace(llm=types.SimpleNamespace(llm_engine=engine)), idle_s=0.2).start()
    try:

        def post() -> weakref.ref:
            received = torch.empty(2**20)
            weights = [("w", received[:10])]
            assert thread.call(lambda: float(len(weights))) == 1.0
            return weakref.ref(received)

        held = post()
        deadline = time.monotonic() + 5.0  # the thread drops the task right after handing its result over
        while held() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
        assert held() is None
    finally:
        thread.stop()
