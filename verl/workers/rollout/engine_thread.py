# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one thread that owns an engine which other threads call into (rollout pool worker, `verl.serve`): vLLM's
`LLMEngine` is not thread-safe. The thread steps it through its request loop and runs posted work (`call`, `post`)
between steps; `cond` guards what both sides read. A tensor-parallel follower runs its own target on it."""

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from typing import Any


logger = logging.getLogger(__name__)

_POLL_S = 1.0
"""How often a waiting caller checks that the thread is still alive."""


class EngineThread:
    """Steps `loop`'s engine on a thread of its own (see the module docstring).

    - `prepare()`, under `cond` before each step: the owner's bookkeeping; True when only environment steps are
      running, and the thread then waits on them instead of stepping.
    - `has_work()`, under `cond`: work beside the engine's requests that should wake the thread.
    - `on_idle()`, every `idle_s` seconds without work (a tensor-parallel leader's heartbeat).
    - `recover(error)`: gets a failed step and the thread goes on; without it the thread stops and every later call
      raises the error.
    """

    def __init__(
        self,
        loop: Any,
        prepare: Callable[[], bool] = lambda: False,
        has_work: Callable[[], bool] = lambda: False,
        on_idle: Callable[[], None] | None = None,
        idle_s: float | None = None,
        recover: Callable[[BaseException], None] | None = None,
        on_stop: Callable[[BaseException | None], None] = lambda error: None,
        name: str = "engine",
    ) -> None:
        self.loop = loop
        self.cond = threading.Condition()
        if loop is not None:
            loop.lock = self.cond  # other threads read the groups the steps record
        self.prepare, self.has_work, self.on_idle, self.idle_s = prepare, has_work, on_idle, idle_s
        self.recover, self.on_stop = recover, on_stop
        self.version = 0
        """The policy version the steps' tokens are tagged with."""
        self._idle = True
        self.error: BaseException | None = None
        self.busy_s = 0.0
        """Seconds spent in engine steps (the owner reads and resets it under `cond`)."""
        self._tasks: list[tuple[Callable[[], Any], Future]] = []
        self._stop = False
        self.thread = threading.Thread(target=self._guarded, name=f"{name}-thread", daemon=True)
        self._target: Callable[[], None] = self._run

    def start(self, target: Callable[[], None] | None = None) -> "EngineThread":
        """Start stepping (or run `target` instead: a follower's loop)."""
        self._target = target or self._run
        self.thread.start()
        return self

    @property
    def idle(self) -> bool:
        """Waiting for work, none posted (read under `cond`)."""
        return self._idle and not self._tasks

    @property
    def stopping(self) -> bool:
        return self._stop

    def raise_if_failed(self) -> None:
        """The thread's own error, of its own type (a user's environment failing is an EnvCodeError wherever the
        thread's failure is raised: the CLI reports it as one; the thread logged where it failed)."""
        if isinstance(self.error, Exception):
            raise self.error
        if self.error is not None:  # a SystemExit or KeyboardInterrupt raised in a Ray call would end the process
            raise RuntimeError(f"The engine thread failed: {self.error!r}") from self.error

    def post(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the thread between two engine steps; its result (or exception) comes in the future."""
        future: Future = Future()
        with self.cond:
            self.raise_if_failed()
            if self._stop:
                raise RuntimeError("The engine thread has stopped.")
            self._tasks.append((fn, future))
            self.cond.notify_all()
        return future

    def wait(self, future: Future) -> Any:
        """`future`'s result, failing as soon as the thread has failed."""
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except futures.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                with self.cond:
                    self.raise_if_failed()

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.wait(self.post(fn))

    def stop(self) -> None:
        """End the thread: work posted but not yet run, and work posted later, raise in their callers."""
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def fail(self, error: BaseException) -> None:
        """Record the thread's failure: every waiting and later call raises it."""
        with self.cond:
            self.error = error
            for _, future in self._tasks:
                future.set_exception(error)
            self._tasks = []
            self.cond.notify_all()

    def _guarded(self) -> None:
        try:
            self._target()
        except BaseException as error:
            logger.exception("The engine thread failed.")
            self.on_stop(error)
            self.fail(error)

    def _run(self) -> None:
        engine = self.loop.llm.llm_engine
        while True:
            idle_tick = False
            with self.cond:
                while not (self._stop or self._tasks or self.has_work() or engine.has_unfinished_requests()):
                    self._idle = True
                    self.cond.notify_all()
                    if not self.cond.wait(self.idle_s) and self.on_idle is not None:
                        idle_tick = True
                        break
                self._idle = False
                if self._stop:
                    tasks, self._tasks = self._tasks, []
                    for _, future in tasks:  # no caller waits forever on work the thread will never run
                        future.set_exception(RuntimeError("The engine thread stopped before running this."))
                    self.on_stop(None)
                    return
                if not idle_tick:
                    tasks, self._tasks = self._tasks, []
            if idle_tick:  # the work that came meanwhile waits for the next round
                self.on_idle()
                continue
            for fn, future in tasks:
                try:
                    future.set_result(fn())
                except BaseException as error:  # the caller gets it; the thread goes on
                    future.set_exception(error)
            # a task's closure may hold what it worked on (the pool's received weights: a whole model): not kept
            # alive until the next task comes
            tasks = fn = future = None
            with self.cond:
                waiting_for_env = self.prepare()
            if not engine.has_unfinished_requests():
                if waiting_for_env:
                    self.loop.turns.wait(0.05)
                continue
            start = time.perf_counter()
            try:
                completed = self.loop.step(self.version)
            except Exception as error:
                if self.recover is None:
                    raise
                logger.exception("An engine step failed; the requests it held are aborted.")
                self.recover(error)
                continue
            with self.cond:
                self.busy_s += time.perf_counter() - start
                if completed:
                    self.cond.notify_all()
