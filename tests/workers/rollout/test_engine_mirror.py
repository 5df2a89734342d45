# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""engine_mirror's protocol over a real two-process gloo group: the peer repeats the first process's engine calls in
their order (steps, requests with their rendered prompts and adapters, aborts, other work between steps), returns
the call's result, stops with the first process's error, and refuses work it has no handler for. The engine here is
a recorder of the calls it gets; the vLLM engines' own run is tests/workers/rollout/test_tensor_parallel_cpu.py."""

import pytest

from tests.workers.fsdp_testing import init_rank, spawn


class _Recorder:
    """What the mirror drives: `llm.llm_engine` with vLLM's request methods, each call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.llm_engine = self

    def add_request(self, request_id, prompt, params, lora_request=None):
        self.calls.append(("add", request_id, prompt, params, lora_request))

    def abort_request(self, request_ids):
        self.calls.append(("abort", list(request_ids)))

    def has_unfinished_requests(self):
        return True

    def step(self):
        self.calls.append(("step",))
        return []


class _Loop:
    """The first process's request loop as far as the mirror sees it (RequestLoop's `_add`, `suspend`, `step`):
    each engine call recorded for the peers, then made on its own engine with its own rendering."""

    def __init__(self, engine, render, leader) -> None:
        self.engine, self.render, self.leader = engine, render, leader

    def add(self, request_id, prompt, params, lora_request=None):
        self.leader.record("add", request_id, prompt, params, lora_request is not None)
        self.engine.add_request(request_id, self.render(prompt), params, lora_request=lora_request)

    def abort(self, request_ids):
        self.leader.record("abort_request", request_ids)
        self.engine.abort_request(request_ids)

    def step(self):
        self.leader.send("step")
        self.engine.step()


def _script(loop) -> None:
    """The first process's side: a call with two steps and work between them, then a failed call, then STOP."""
    loop.add("r0", {"prompt_token_ids": [1, 2]}, {"max_tokens": 3})
    loop.add("r1", {"prompt_token_ids": [3]}, {"max_tokens": 1}, lora_request="adapter")
    group_prompt = {"prompt_token_ids": [5, 6]}  # a group's requests are recorded with one prompt: rendered once
    loop.engine.add_request("g0", ("rendered", (5, 6)), {"seed": 0}, lora_request=None)
    loop.leader.record("add", "g0", group_prompt, {"seed": 0}, False)
    loop.engine.add_request("g1", ("rendered", (5, 6)), {"seed": 1}, lora_request=None)
    loop.leader.record("add", "g1", group_prompt, {"seed": 1}, False)
    loop.step()
    loop.leader.send("load", 7)
    loop.abort(["r0"])
    loop.step()
    loop.leader.end({"batch": "rows"})
    loop.add("r2", {"prompt_token_ids": [4]}, {"max_tokens": 2})
    loop.leader.end(error=KeyError("no tool"))
    loop.leader.send("noop")
    loop.leader.send("unheard of")


def _member(rank: int, world_size: int, port: int) -> None:
    init_rank(rank, world_size, port)
    import torch.distributed as dist

    from verl.workers.rollout.engine_mirror import STOP, EngineLeader, PeerStopped, follow

    group = dist.new_group([0, 1], backend="gloo")
    engine = _Recorder()

    renders = []

    def render(prompt):
        renders.append(tuple(prompt["prompt_token_ids"]))
        return ("rendered", tuple(prompt["prompt_token_ids"]))

    if rank == 0:
        _script(_Loop(engine, render, EngineLeader(group)))
        EngineLeader(group).send(STOP)
        calls = engine.calls
    else:
        loads = []
        handlers = {"load": loads.append, "noop": lambda: None}
        assert follow(engine, render, group, lambda: "adapter", handlers) == {"batch": "rows"}
        assert loads == [7]
        with pytest.raises(PeerStopped, match=r"failed: KeyError: 'no tool'"):
            follow(engine, render, group, lambda: "adapter", handlers)
        with pytest.raises(RuntimeError, match=r"no handler for the engine work 'unheard of'"):
            follow(engine, render, group, lambda: "adapter", handlers)
        assert follow(engine, render, group, lambda: "adapter", handlers) is None  # STOP
        calls = engine.calls
    # the same engine calls in the same order on both, rendered prompts and the adapter included
    gathered = [None, None]
    dist.all_gather_object(gathered, calls, group=group)
    assert gathered[0] == gathered[1]
    assert gathered[0] == [
        ("add", "r0", ("rendered", (1, 2)), {"max_tokens": 3}, None),
        ("add", "r1", ("rendered", (3,)), {"max_tokens": 1}, "adapter"),
        ("add", "g0", ("rendered", (5, 6)), {"seed": 0}, None),
        ("add", "g1", ("rendered", (5, 6)), {"seed": 1}, None),
        ("step",),
        ("abort", ["r0"]),
        ("step",),
        ("add", "r2", ("rendered", (4,)), {"max_tokens": 2}, None),
    ]
    if rank == 1:
        assert renders == [(1, 2), (3,), (5, 6), (4,)]  # the peer renders the group's shared prompt once
    dist.barrier()
    dist.destroy_process_group()  # both ranks' gloo groups end together (one left alive at exit may abort)


def test_the_peer_repeats_the_first_processs_engine_calls_and_ends_with_it():
    spawn(_member, 2)
