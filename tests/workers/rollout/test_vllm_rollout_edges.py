# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The vLLM rollout's bookkeeping without an engine: the sampling settings each request gets (config, validation
overrides, the request's own), the seeds and budgets of admitted samples, and the rollout columns assembled from
finished groups (masks, truncation, versions, log-probs, row order)."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.workers.rollout.config import RolloutConfig
from verl.workers.rollout.request_loop import Group, RequestLoop, RolloutRequest, Sample
from verl.workers.rollout.vllm_rollout import VLLMRollout, request_seeds


EOS, PAD, TURN_END = 9, 0, 12


def _rollout(turn_end_ids: tuple[int, ...] = (), **fields) -> VLLMRollout:
    """A VLLMRollout without an engine: what sampling, admission and the rollout columns read."""
    rollout = VLLMRollout.__new__(VLLMRollout)
    rollout.config = dataclasses.replace(RolloutConfig(prompt_length=8, response_length=6), **fields)
    rollout.turn_end_ids = list(turn_end_ids)
    rollout.multimodal, rollout.processor, rollout.env, rollout.follows = False, None, None, False
    rollout.tokenizer = SimpleNamespace(unk_token_id=None)
    rollout._base_sampling = rollout._base_sampling_kwargs()
    rollout.pad_token_id, rollout.eos_token_ids = PAD, {EOS, *turn_end_ids}
    rollout.max_model_len = 14
    rollout.generate_calls = rollout.validate_calls = 0
    rollout.request_loop = RequestLoop(None, render=dict, name="async")
    return rollout


def test_the_configs_sampling_settings_reach_every_request() -> None:
    rollout = _rollout(temperature=0.7, top_p=0.9, top_k=20, ignore_eos=True, calculate_log_probs=True, n=3)
    kwargs = rollout.sampling_kwargs(RolloutRequest())
    assert {key: kwargs[key] for key in ("n", "temperature", "top_p", "top_k", "ignore_eos", "logprobs")} == {
        "n": 3,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "ignore_eos": True,
        "logprobs": 0,  # the sampled token's log-prob
    }
    assert kwargs["detokenize"] is False
    plain = _rollout().sampling_kwargs(RolloutRequest())
    assert plain["top_k"] in (0, -1) and plain["logprobs"] is None  # top_k=-1: no top-k (vLLM reads 0 and -1 so)


def test_validation_overrides_apply_to_validation_calls_only() -> None:
    rollout = _rollout(val_override_config={"temperature": 0.0, "n": 1, "top_k": -1}, n=4)
    training = rollout.sampling_kwargs(RolloutRequest())
    assert (training["temperature"], training["n"]) == (1.0, 4)
    validation = rollout.sampling_kwargs(RolloutRequest(validate=True))
    assert (validation["temperature"], validation["n"], validation["top_k"] <= 0) == (0.0, 1, True)
    remax = rollout.sampling_kwargs(RolloutRequest(validate=True, sampling={"temperature": 0.5}))
    assert remax["temperature"] == 0.5  # the request's own overrides go last


def test_stop_tokens_of_an_override_join_the_templates_end_of_turn() -> None:
    rollout = _rollout(turn_end_ids=(TURN_END,), val_override_config={"stop_token_ids": [3, 4]})
    assert rollout.sampling_kwargs(RolloutRequest())["stop_token_ids"] == [TURN_END]
    assert rollout.sampling_kwargs(RolloutRequest(validate=True))["stop_token_ids"] == [3, 4, TURN_END]


def test_the_media_placeholders_stay_blocked_whatever_a_request_biases() -> None:
    rollout = _rollout()
    rollout._base_sampling["logit_bias"] = {151655: -100.0}
    kwargs = rollout.sampling_kwargs(RolloutRequest(sampling={"logit_bias": {151655: 50.0, 7: 2.0}}))
    assert kwargs["logit_bias"] == {151655: -100.0, 7: 2.0}


def _prompts(count: int, budgets: list | None = None) -> DataProto:
    ids = torch.tensor([[PAD, PAD, 5 + row, 6, 7, 8, 9 + row, 3] for row in range(count)])
    mask = (torch.arange(8) >= 2).long().expand(count, -1).clone()
    non_tensors = {"uid": np.array([f"p{row}" for row in range(count)], dtype=object)}
    if budgets is not None:
        non_tensors["max_response_tokens"] = np.array(budgets, dtype=object)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        non_tensors=non_tensors,
    )


def test_admitted_samples_seed_as_llm_generate_does_and_validation_draws_its_own_stream() -> None:
    rollout = _rollout(n=3, seed=11)
    rollout.generate_calls = 4
    rollout.admit(_prompts(2), RolloutRequest(version=2), seed_rank=1)
    rows = request_seeds(11, 1, 4, 2)
    groups = list(rollout.request_loop.groups.values())
    assert [[s.seed for s in g.samples] for g in groups] == [[row + j for j in range(3)] for row in rows]
    assert [g.admitted_version for g in groups] == [2, 2] and rollout.generate_calls == 5
    assert [s.index for g in groups for s in g.samples] == list(range(6))
    rollout.validate_calls = 7
    rollout.admit(_prompts(1), RolloutRequest(validate=True), seed_rank=1)
    (validation,) = [g for g in rollout.request_loop.groups.values() if g not in groups]
    first = request_seeds(11, 1, 7, 1, stream=1)[0]
    assert [s.seed for s in validation.samples] == [first, first + 1, first + 2]
    assert rollout.validate_calls == 8 and rollout.generate_calls == 5  # validation never shifts training's seeds
    rollout.config.val_override_config = {"seed": 99}
    rollout.admit(_prompts(1), RolloutRequest(validate=True), seed_rank=0)
    seeded = list(rollout.request_loop.groups.values())[-1]
    assert seeded.samples[0].seed == request_seeds(99, 0, 8, 1, stream=1)[0]  # val_override_config.seed
    greedy = _rollout(n=1, val_override_config={"temperature": 0})
    greedy.admit(_prompts(1), RolloutRequest(validate=True), seed_rank=0)
    assert [s.seed for g in greedy.request_loop.groups.values() for s in g.samples] == [None]


def test_row_caps_limit_a_response_up_to_the_calls_length() -> None:
    rollout = _rollout()
    rollout.admit(_prompts(3, [2, None, 50]), RolloutRequest(), seed_rank=0)
    assert [g.budget for g in rollout.request_loop.groups.values()] == [2, 6, 6]
    staged = _rollout()
    staged.admit(_prompts(2, [5, None]), RolloutRequest(response_length=4), seed_rank=0)
    assert [g.budget for g in staged.request_loop.groups.values()] == [4, 4]
    with pytest.raises(ValueError, match="row 0 has max_response_tokens=0"):
        _rollout().admit(_prompts(1, [0]), RolloutRequest(), seed_rank=0)


def test_a_validation_min_tokens_above_a_requests_budget_stops_at_the_budget() -> None:
    """val_override_config.min_tokens within the response length was accepted, and a request with less room (a row's
    max_response_tokens, an episode turn's max_tokens_per_turn or the room its earlier turns left) failed inside every
    worker at the first validation: vLLM refuses min_tokens > max_tokens."""
    rollout = _rollout(val_override_config={"min_tokens": 4})
    _, _, make_params, _ = rollout.request_sampling(RolloutRequest(validate=True), rollout.request_loop)
    assert make_params(6, 1).min_tokens == 4
    assert (make_params(2, 1).min_tokens, make_params(2, 1).max_tokens) == (2, 2)
    _, _, training, _ = rollout.request_sampling(RolloutRequest(), rollout.request_loop)
    assert training(2, 1).min_tokens == 0


def test_a_requests_response_length_may_be_the_configured_one_and_no_more() -> None:
    rollout = _rollout()
    assert rollout.call_response_length(RolloutRequest()) == 6
    assert rollout.call_response_length(RolloutRequest(response_length=6)) == 6
    assert rollout.call_response_length(RolloutRequest(response_length=1)) == 1
    for value in (0, 7, True, 2.0):
        with pytest.raises(ValueError, match="response_length"):
            rollout.call_response_length(RolloutRequest(response_length=value))


def test_a_prompt_must_leave_room_for_a_token_of_response() -> None:
    rollout = _rollout()
    rows = DataProto.from_dict(
        tensors={"input_ids": torch.ones(1, 14, dtype=torch.long), "attention_mask": torch.ones(1, 14)},
        non_tensors={"raw_prompt_ids": np.array([list(range(13))], dtype=object)},
    )
    assert rollout._engine_inputs(rows) == [{"prompt_token_ids": list(range(13))}]
    rows.non_tensor_batch["raw_prompt_ids"] = np.array([list(range(14))], dtype=object)
    with pytest.raises(ValueError, match="Prompt row 0 has 14 tokens"):
        rollout._engine_inputs(rows)


def _finished(tokens: list[int], cut: bool, versions: list[int], resumed: int = 0) -> Sample:
    sample = Sample(seed=None, tokens=tokens, versions=versions, finished=True, cut=cut, resumed=resumed)
    sample.logprobs = [-0.5 - i for i in range(len(tokens))]
    return sample


def test_rollout_columns_of_finished_groups() -> None:
    rollout = _rollout(n=2, calculate_log_probs=True)
    prompts = _prompts(2)
    groups = [
        Group(0, {}, prompts[0:1], 0, [_finished([4, EOS], False, [1, 1]), _finished([4, 5, 6, 7, 8, 4], True, [1] * 6)], 6),
        Group(1, {}, prompts[1:2], 0, [_finished([], False, []), _finished([5, EOS, 6], False, [2, 3, 3], 1)], 6),
    ]  # fmt: skip
    out = rollout.groups_to_rollout(groups, 2, 6)
    assert list(out.non_tensor_batch["uid"]) == ["p0", "p0", "p1", "p1"]  # each prompt's n responses together
    assert torch.equal(out.batch["prompts"], prompts.batch["input_ids"][[0, 0, 1, 1]])
    assert out.batch["responses"].tolist() == [
        [4, EOS, PAD, PAD, PAD, PAD],
        [4, 5, 6, 7, 8, 4],
        [PAD] * 6,
        [5, EOS, 6, PAD, PAD, PAD],  # ignore_eos wrote past the EOS: not part of the answer
    ]
    expected_mask = [[1, 1, 0, 0, 0, 0], [1] * 6, [0] * 6, [1, 1, 0, 0, 0, 0]]
    assert out.batch["response_mask"].tolist() == expected_mask
    assert out.batch["attention_mask"][:, 8:].tolist() == expected_mask
    assert out.batch["attention_mask"][:, :8].tolist() == prompts.batch["attention_mask"][[0, 0, 1, 1]].tolist()
    # the length budget cut it, or nothing was generated: truncated; a stop token ended the others
    assert out.batch["rollout_truncated"].tolist() == [False, True, True, False]
    assert out.batch["rollout_versions"].tolist() == [
        [1, 1, -1, -1, -1, -1],
        [1] * 6,
        [-1] * 6,
        [2, 3, -1, -1, -1, -1],  # the token after the EOS is outside the mask: no version
    ]
    log_probs = out.batch["rollout_log_probs"]
    assert log_probs[3].tolist() == [-0.5, -1.5, 0.0, 0.0, 0.0, 0.0]
    assert log_probs[1].tolist() == [-0.5, -1.5, -2.5, -3.5, -4.5, -5.5]
    assert out.batch["rollout_resumed"].tolist() == [0, 0, 0, 1]
    assert out.batch["position_ids"][0, 8:].tolist() == [6, 7, 8, 9, 10, 11]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_model_len": 127}, r"rollout.max_model_len=127 is shorter than prompt_length \+ response_length = 128"),
        ({"max_num_batched_tokens": 127}, r"max_num_batched_tokens=127 must be at least max_model_len=128 on CPU"),
        ({"prompt_length": 0}, r"rollout.prompt_length=0 and rollout.response_length=28 must be positive"),
        ({"response_length": 0}, r"rollout.response_length=0 must be positive"),
    ],
)
def test_engine_settings_one_short_of_what_a_sequence_needs_are_refused(monkeypatch, fields, message) -> None:
    import verl.workers.rollout.vllm_rollout as vllm_rollout

    monkeypatch.setattr(vllm_rollout, "on_gpu", lambda: False)
    monkeypatch.setattr(vllm_rollout.dist, "is_initialized", lambda: False)
    config = dataclasses.replace(RolloutConfig(prompt_length=100, response_length=28), **fields)
    with pytest.raises(ValueError, match=message):
        vllm_rollout.build_engine_kwargs("/models/x", config, multimodal=False)
    exact = dataclasses.replace(RolloutConfig(prompt_length=100, response_length=28), max_num_batched_tokens=128)
    kwargs = vllm_rollout.build_engine_kwargs("/models/x", dataclasses.replace(exact, max_model_len=128), False)
    assert (kwargs["max_model_len"], kwargs["max_num_batched_tokens"]) == (128, 128)  # exactly enough is enough
