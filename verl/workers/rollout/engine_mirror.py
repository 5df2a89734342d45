# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One request loop for a tensor-parallel engine, in every mode: the group's first process runs it and its peers
repeat its engine calls.

The processes of a tensor-parallel engine must add, abort and step the same requests in the same order, or vLLM's
collectives mismatch; yet turns, admissions, weight loads and validation calls reach each process at its own moment.
So the first process runs the request loop and environments and records its engine calls in an `EngineLeader`;
before each step it sends the peers the calls since the last one (one gloo message per step), plus any other engine
work at the point it does its own. The peers (`follow`) only repeat those calls and run their own copy of the work.
"""

from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from verl.single_controller.base.worker_group import PeerFailed


_END = "end"
STOP = "stop"
"""The peers' `follow` returns: the engine is shut down (a rollout pool's worker closing)."""


class PeerStopped(PeerFailed):
    """The group's first process failed during the call; its peers stop with its error (the driver reports the first
    process's own)."""


class _RenderOnce:
    """A peer's `render`, run once for the requests sharing a prompt (as the first process renders a group's prompt
    once: images run the processor). A group's requests share one prompt object, and a message is pickled as one
    object, so they arrive sharing it."""

    def __init__(self, render: Callable[[dict[str, Any]], Any]) -> None:
        self.render = render
        self._tokens: Any = None
        self._rendered: Any = None

    def __call__(self, prompt: dict[str, Any]) -> Any:
        tokens = prompt.get("prompt_token_ids")
        if tokens is None or tokens is not self._tokens:  # the prompt's token list: the group's requests share it
            self._tokens, self._rendered = tokens, self.render(prompt)
        return dict(self._rendered) if isinstance(self._rendered, dict) else self._rendered


def _broadcast(message: Any, group: Any, src: int) -> Any:
    box = [message]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


class EngineLeader:
    """The first process's side: the request loop (`RequestLoop.mirror`) records each engine call here; `send` passes
    the recorded calls to the peers with what they run next. Requests are recorded before rendering (each peer renders
    its own) and with whether they carry the LoRA adapter (each peer adds its own)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.src = dist.get_global_rank(group, 0)
        self._calls: list[tuple[Any, ...]] = []

    def record(self, *call: Any) -> None:
        """An engine call the first process made: ("add", request_id, prompt, params, with_lora) or
        ("abort_request", request_ids)."""
        self._calls.append(call)

    def send(self, kind: str, *args: Any) -> None:
        """Have the peers run their handler for `kind` (see `follow`) here, after the calls recorded so far."""
        _broadcast((*self._calls, (kind, *args)), self.group, self.src)
        self._calls = []

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        """The call is over: the peers repeat the last calls (aborts of the unfinished requests) and return `result`,
        or raise PeerStopped with `error`."""
        self.send(_END, result, None if error is None else f"{type(error).__name__}: {error}")


def follow(
    llm: Any,
    render: Callable[[dict[str, Any]], Any],
    group: Any,
    lora_request: Callable[[], Any],
    handlers: dict[str, Callable[..., Any]] | None = None,
) -> Any:
    """On a peer: repeat the first process's engine calls (rendering its requests here) until it ends the call
    (return its result) or sends STOP (return None); other messages run their entry of `handlers`."""
    engine = llm.llm_engine
    src = dist.get_global_rank(group, 0)
    render = _RenderOnce(render)
    while True:
        for call in _broadcast(None, group, src):
            kind = call[0]
            if kind == "add":
                _, request_id, prompt, params, with_lora = call
                engine.add_request(
                    request_id, render(prompt), params, lora_request=lora_request() if with_lora else None
                )
            elif kind in ("abort_request", "step"):
                getattr(engine, kind)(*call[1:])
            elif kind == _END:
                _, result, failure = call
                if failure is not None:
                    raise PeerStopped(f"The first process of this tensor-parallel engine failed: {failure}")
                return result
            elif kind == STOP:
                return None
            elif handlers and kind in handlers:
                handlers[kind](*call[1:])
            else:
                raise RuntimeError(f"This tensor-parallel peer has no handler for the engine work {kind!r}; a bug.")
