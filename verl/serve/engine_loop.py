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
"""The one thread that owns `verl.serve`'s engine, so that concurrent HTTP requests share its batches.

vLLM's `LLMEngine` is not thread-safe and batches only the requests it holds at a step. The loop thread takes new
requests and aborts from an inbox, steps the engine while it holds any request (through the request loop's `step`,
the project's one engine loop, whose outputs of requests added from outside come back here), and hands each step's
outputs to the queue of the request they belong to; HTTP handler threads only submit and read their own queue.
"""

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar


logger = logging.getLogger(__name__)

T = TypeVar("T")


class EngineLoop:
    """Steps `llm`'s engine (a `vllm.LLM`'s `llm_engine`: add_request, step, abort_request, has_unfinished_requests)
    on its own thread.

    Requests are added by functions run on the loop's thread (`submit`), so rendering and tokenizing share the
    engine's thread too: its tokenizer is never used from two threads at once.
    """

    def __init__(self, llm: Any) -> None:
        from verl.workers.rollout.request_loop import RequestLoop

        self.engine = llm.llm_engine
        self.requests = RequestLoop(llm, render=lambda prompt: prompt, name="serve")
        self.requests.outside = self._route
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._routes: dict[str, queue.SimpleQueue] = {}
        """The output queue of each request id the engine holds."""
        self._stopped = False
        self.thread = threading.Thread(target=self._serve, name="engine-loop", daemon=True)
        self.thread.start()

    def submit(self, add: Callable[[], tuple[list[str], T]]) -> tuple[T, Iterator[Any]]:
        """Run `add` on the loop's thread: it checks a request and adds it to the engine as the request ids it
        returns, with a value for the caller. Returns (that value, the engine's outputs of those ids as the steps
        make them, until each has finished); closing the outputs early aborts the unfinished ids. An error of
        `add` is raised here, one of a step from the outputs."""
        outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._inbox.put(("add", add, outbox))
        first = outbox.get()
        if isinstance(first, BaseException):
            raise first
        ids, value = first
        return value, self._outputs(ids, outbox)

    def _outputs(self, ids: list[str], outbox: queue.SimpleQueue) -> Iterator[Any]:
        unfinished = set(ids)
        try:
            while unfinished:
                output = outbox.get()
                if isinstance(output, BaseException):
                    unfinished.clear()  # the loop has dropped the request
                    raise output
                if output.finished:
                    unfinished.discard(output.request_id)
                yield output
        finally:
            if unfinished:
                self._inbox.put(("abort", sorted(unfinished), None))

    def stop(self) -> None:
        """End the loop after the commands already sent (requests still held stay in the engine)."""
        self._inbox.put(("stop", None, None))
        self.thread.join(timeout=30)

    def _serve(self) -> None:
        while not self._stopped:
            try:
                self._step()
            except Exception as error:  # answer every held request with the error, keep serving
                logger.exception("the engine failed; the requests it held are aborted")
                self._fail_all(error)

    def _step(self) -> None:
        """Take the inbox's commands (waiting for one while the engine holds nothing), then one engine step."""
        self._take(block=not self.engine.has_unfinished_requests())
        if not self._stopped and self.engine.has_unfinished_requests():
            self.requests.step()

    def _route(self, output: Any) -> None:
        """One step's output to the queue of its request."""
        outbox = self._routes.get(output.request_id)
        if outbox is None:  # aborted while the step ran
            return
        if output.finished:
            del self._routes[output.request_id]
        outbox.put(output)

    def _take(self, block: bool) -> None:
        """Carry out the commands in the inbox: wait for one first when `block` (the engine holds nothing)."""
        while True:
            try:
                command, argument, outbox = self._inbox.get(block=block)
            except queue.Empty:
                return
            block = False
            if command == "add":
                try:
                    ids, value = argument()
                except Exception as error:
                    outbox.put(error)
                    continue
                self._routes.update(dict.fromkeys(ids, outbox))
                outbox.put((ids, value))
            elif command == "abort":
                held = [request_id for request_id in argument if self._routes.pop(request_id, None) is not None]
                if held:
                    self.engine.abort_request(held)
            else:
                self._stopped = True
                return

    def _fail_all(self, error: Exception) -> None:
        routes, self._routes = self._routes, {}
        try:
            self.engine.abort_request(list(routes))
        except Exception:
            logger.exception("aborting the requests of a failed step failed too")
        for outbox in {id(box): box for box in routes.values()}.values():  # once per request, whatever its ids
            outbox.put(error)
