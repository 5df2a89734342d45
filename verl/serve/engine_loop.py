# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verl.serve`'s engine, shared by concurrent HTTP requests: one engine thread (verl.workers.rollout.engine_thread)
adds requests and steps it, and each step's outputs are routed to their request's queue."""

import logging
import queue
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from verl.workers.rollout.engine_thread import EngineThread
from verl.workers.rollout.request_loop import RequestLoop


logger = logging.getLogger(__name__)

T = TypeVar("T")


class EngineLoop:
    """Routes the outputs of `llm`'s engine, stepped by its engine thread. Requests are added on that thread
    (`submit`), so the tokenizer is never used from two threads at once."""

    def __init__(self, llm: Any) -> None:
        self.engine = llm.llm_engine
        loop = RequestLoop(llm, render=lambda prompt: prompt, name="serve")
        loop.outside = self._route
        self._routes: dict[str, queue.SimpleQueue] = {}
        """The output queue of each request id the engine holds."""
        self.thread = EngineThread(loop, recover=self._fail_all, name="serve").start()

    def submit(self, add: Callable[[], tuple[list[str], T]]) -> tuple[T, Iterator[Any]]:
        """Run `add` (which adds a request, returning its ids and a value) on the engine thread. Returns (the value,
        an iterator of those ids' outputs until each finishes); closing it early aborts them. `add`'s error raises
        here, a step's from the iterator."""
        outbox: queue.SimpleQueue = queue.SimpleQueue()

        def added() -> tuple[list[str], T]:
            ids, value = add()
            self._routes.update(dict.fromkeys(ids, outbox))
            return ids, value

        ids, value = self.thread.call(added)
        return value, self._outputs(ids, outbox)

    def _outputs(self, ids: list[str], outbox: queue.SimpleQueue) -> Iterator[Any]:
        unfinished = set(ids)
        try:
            while unfinished:
                output = outbox.get()
                if isinstance(output, BaseException):
                    unfinished.clear()  # the engine thread has dropped the request
                    raise output
                if output.finished:
                    unfinished.discard(output.request_id)
                yield output
        finally:
            if unfinished:
                self.thread.post(lambda ids=sorted(unfinished): self._abort(ids))

    def stop(self) -> None:
        """End the engine thread after the work already posted (requests still held stay in the engine)."""
        self.thread.stop()

    def _route(self, output: Any) -> None:
        """One step's output to the queue of its request."""
        outbox = self._routes.get(output.request_id)
        if outbox is None:  # aborted while the step ran
            return
        if output.finished:
            del self._routes[output.request_id]
        outbox.put(output)

    def _abort(self, ids: list[str]) -> None:
        held = [request_id for request_id in ids if self._routes.pop(request_id, None) is not None]
        if held:
            self.engine.abort_request(held)

    def _fail_all(self, error: BaseException) -> None:
        """A failed step: answer every held request with the error and abort it; the thread serves on."""
        routes, self._routes = self._routes, {}
        try:
            self.engine.abort_request(list(routes))
        except Exception:
            logger.exception("aborting the requests of a failed step failed too")
        for outbox in {id(box): box for box in routes.values()}.values():  # once per request, whatever its ids
            outbox.put(error)
