# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The request loop against a scripted stand-in for vLLM's engine: what a resumed sample asks the engine for (its
tokens so far, the rest of its budget, a fresh seed), how the engine's outputs are recorded (truncation, versions,
log-probs) and which groups a call returns, in which order."""

from types import SimpleNamespace

import pytest

from verl.workers.rollout.request_loop import RequestLoop, resume_seed


class _Engine:
    """Records `add_request` and `abort_request`; `step` returns the outputs queued with `emit`."""

    def __init__(self) -> None:
        self.added: dict[str, tuple] = {}
        self.aborted: list[str] = []
        self.queued: list = []

    def add_request(self, request_id, engine_input, params, lora_request=None) -> None:
        self.added[request_id] = (engine_input, params)

    def abort_request(self, request_ids) -> None:
        self.aborted += list(request_ids)

    def has_unfinished_requests(self) -> bool:
        return bool(self.queued)

    def step(self) -> list:
        outputs, self.queued = self.queued, []
        return outputs


def _output(request_id: str, ids: list[int], finished: bool, reason: str | None, logprobs=None):
    completion = SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=reason)
    return SimpleNamespace(request_id=request_id, outputs=[completion], finished=finished)


def _loop() -> tuple[RequestLoop, _Engine]:
    engine = _Engine()
    return RequestLoop(SimpleNamespace(llm_engine=engine), render=lambda prompt: dict(prompt)), engine


def _params(max_tokens: int, seed: int | None) -> tuple[int, int | None]:
    return max_tokens, seed


def test_a_resumed_sample_continues_from_its_tokens_with_the_rest_of_its_budget_and_a_fresh_seed():
    loop, engine = _loop()
    loop.admit({"prompt_token_ids": [1, 2, 3]}, None, [40, 41], version=0, budget=10)
    assert loop.submit(0, _params) == 2
    (first, second) = list(engine.added)
    assert engine.added[first] == ({"prompt_token_ids": [1, 2, 3]}, (10, 40))
    assert engine.added[second] == ({"prompt_token_ids": [1, 2, 3]}, (10, 41))
    loop.record([_output(first, [7, 8, 9, 5], False, None), _output(second, [6], False, None)], version=0)
    loop.suspend()  # a step boundary: both stop, keeping their tokens
    assert sorted(engine.aborted) == sorted([first, second]) and loop.active == {}
    engine.added.clear()
    assert loop.submit(1, _params) == 2
    (again, other) = list(engine.added)
    prompt, (max_tokens, seed) = engine.added[again]
    assert prompt["prompt_token_ids"] == [1, 2, 3, 7, 8, 9, 5]  # prefilled with what it generated before
    assert max_tokens == 10 - 4  # the budget counts the tokens it has
    assert seed == resume_seed(40, 4) and seed != 40
    assert engine.added[other] == ({"prompt_token_ids": [1, 2, 3, 6]}, (9, resume_seed(41, 1)))
    samples = loop.groups[0].samples
    assert [sample.resumed for sample in samples] == [1, 1]


def test_a_pause_under_the_same_weights_continues_the_sample_but_is_not_counted_as_resumed():
    """A round of a step that ends before a sample does (data.mini_rollout_batch_size, online filtering), or a rollout
    pool's validation or ReMax call, stops it under the weights it goes on with: async/resumed_share counted it as
    continued after a weight sync, in a step whose tokens were all of one version. Only a new version counts."""
    loop, engine = _loop()
    loop.admit({"prompt_token_ids": [1, 2]}, None, [40], version=0, budget=10)
    loop.submit(0, _params)
    (first,) = list(engine.added)
    loop.record([_output(first, [7, 8], False, None)], version=0)
    loop.suspend()  # the round's groups were complete: this one stops
    engine.added.clear()
    assert loop.submit(0, _params) == 1  # the next round, same weights: it goes on from its tokens
    (again,) = list(engine.added)
    assert engine.added[again][0]["prompt_token_ids"] == [1, 2, 7, 8]
    sample = loop.groups[0].samples[0]
    assert sample.resumed == 0
    loop.record([_output(again, [9], False, None)], version=0)
    loop.suspend()  # the step's end; the next one samples under version 1
    loop.submit(1, _params)
    assert sample.resumed == 1 and sample.versions == [0, 0, 0]


def test_outputs_are_recorded_with_their_version_log_probs_and_how_they_ended():
    loop, engine = _loop()
    loop.admit({"prompt_token_ids": [1]}, None, [3, 4], version=0, budget=3)
    loop.submit(0, _params)
    (cut, stopped) = list(engine.added)
    logprobs = [{7: SimpleNamespace(logprob=-0.5)}, {8: SimpleNamespace(logprob=-1.5)}]
    assert not loop.record([_output(cut, [7, 8], False, None, logprobs)], version=2)
    complete = loop.record(
        [
            _output(cut, [9], True, "length", [{9: SimpleNamespace(logprob=-2.5)}]),
            _output(stopped, [5], True, "stop", [{5: SimpleNamespace(logprob=-0.25)}]),
        ],
        version=3,
    )
    assert complete
    first, second = loop.groups[0].samples
    assert (first.tokens, first.versions, first.logprobs) == ([7, 8, 9], [2, 2, 3], [-0.5, -1.5, -2.5])
    assert first.finished and first.cut  # the length budget ended it: truncated
    assert (second.tokens, second.logprobs) == ([5], [-0.25])
    assert second.finished and not second.cut  # a stop token ended it


def test_a_step_returns_its_quota_of_groups_in_admission_order():
    """Earliest deadlines are picked, but returned in the order they were admitted (older groups first)."""
    loop, _ = _loop()
    for version in (1, 0):  # group 0 admitted at version 1, group 1 at version 0: group 1's deadline comes first
        loop.admit({"prompt_token_ids": [1]}, None, [5], version, budget=4)
    for group in loop.groups.values():
        group.samples[0].finished = True
    assert loop.pick(2, 1, 3) == [1, 0]
    assert [group.key for group in loop.run(quota=2, version=1, make_params=None, max_staleness=3)] == [0, 1]


def test_fewer_complete_groups_than_the_quota_are_not_a_step():
    loop, _ = _loop()
    for _ in range(3):
        loop.admit({"prompt_token_ids": [1]}, None, [5, 6], 0, budget=4)
    for sample in loop.groups[0].samples:
        sample.finished = True
    loop.groups[1].samples[0].finished = True  # half a group is not complete
    assert loop.pick(2, 0, 2) is None  # only group 0 is complete
    assert loop.pick(1, 0, 2) == [0]


def test_a_quota_one_above_the_groups_held_is_refused():
    loop, _ = _loop()
    loop.admit({"prompt_token_ids": [1]}, None, [5], 0, budget=4)
    with pytest.raises(ValueError, match="holding 1 groups cannot complete 2 of them"):
        loop.check_quota(2, 0, None)
    loop.check_quota(1, 0, None)
