# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verl.serve`'s engine, shared by concurrent HTTP requests: one engine thread (verl.workers.rollout.engine_thread)
adds requests and steps it, and each step's outputs are routed to their request's queue."""

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from verl.workers.rollout.engine_thread import EngineThread
from verl.workers.rollout.request_loop import RequestLoop


logger = logging.getLogger(__name__)

T = TypeVar("T")


class ClientGone(Exception):
    """The HTTP client left; its requests were aborted."""


_GONE = object()
"""Put into a request's output queue when its client leaves."""


class Client:
    """One HTTP request's client: when it leaves (`leave`), the engine requests submitted for it are aborted, and a
    thread waiting for their outputs gets ClientGone (a generator over them may never be resumed or closed)."""

    def __init__(self) -> None:
        self._held: list[tuple[Callable[[], None], queue.SimpleQueue]] = []
        self._gone = False
        self._lock = threading.Lock()

    def watch(self, abort: Callable[[], None], outbox: queue.SimpleQueue) -> None:
        with self._lock:
            self._held.append((abort, outbox))
            if not self._gone:
                return
        self._end(abort, outbox)

    def leave(self) -> None:
        with self._lock:
            self._gone, held = True, list(self._held)
        for abort, outbox in held:
            self._end(abort, outbox)

    @staticmethod
    def _end(abort: Callable[[], None], outbox: queue.SimpleQueue) -> None:
        abort()
        outbox.put(_GONE)


CLIENT: ContextVar[Client | None] = ContextVar("verl_serve_client", default=None)
"""The client of the HTTP request being answered (the thread pool's threads inherit it)."""


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
        an iterator of those ids' outputs until each finishes); closing it early, or the CLIENT leaving, aborts
        them. `add`'s error raises here, a step's from the iterator (ClientGone once the client has left)."""
        outbox: queue.SimpleQueue = queue.SimpleQueue()

        def added() -> tuple[list[str], T]:
            ids, value = add()
            self._routes.update(dict.fromkeys(ids, outbox))
            return ids, value

        ids, value = self.thread.call(added)
        client = CLIENT.get()
        if client is not None:  # its requests still held, once it has left (finished ones are no longer routed)
            client.watch(lambda: self.thread.post(lambda: self._abort(ids)), outbox)
        return value, self._outputs(ids, outbox)

    def _outputs(self, ids: list[str], outbox: queue.SimpleQueue) -> Iterator[Any]:
        unfinished = set(ids)
        try:
            while unfinished:
                output = outbox.get()
                if output is _GONE:
                    raise ClientGone("the client left")
                if isinstance(output, BaseException):
                    unfinished.clear()  # the engine thread has dropped the request
                    raise output
                if output.finished:
                    unfinished.discard(output.request_id)
                yield output
        finally:
            if unfinished and not self.thread.stopping:  # (a stopped engine thread has dropped every request)
                with contextlib.suppress(RuntimeError):  # it stopped or failed since
                    self.thread.post(lambda ids=sorted(unfinished): self._abort(ids))

    def stop(self) -> None:
        """End the engine thread (a request added later, or not yet added, raises in its caller) and wake every thread
        still waiting on a request's outputs with an error."""
        self.thread.stop()
        routes, self._routes = self._routes, {}  # wake the threads still waiting on those requests
        for outbox in {id(box): box for box in routes.values()}.values():
            outbox.put(RuntimeError("The server is shutting down."))

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
