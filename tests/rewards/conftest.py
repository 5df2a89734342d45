# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures for the reward tests: the tiny tokenizer and rollout batches built from text (reward files:
`write_reward_file` in tests/conftest.py)."""

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from verl.models.tiny_models import build_tokenizer
from verl.protocol import DataProto


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return build_tokenizer()


def _make_batch(
    tokenizer: Any,
    prompts: list[str],
    responses: list[str],
    stop: list[bool] | None = None,
    prompt_length: int = 24,
    response_length: int = 16,
    non_tensors: dict[str, list[Any]] | None = None,
) -> DataProto:
    """A rollout batch as the trainer hands it to the reward manager: left-padded prompts, right-padded responses.

    A response that stops (stop[i], default True) ends with the EOS token, which counts as a valid token.
    """
    stop = stop or [True] * len(responses)
    pad = tokenizer.pad_token_id
    prompt_ids = torch.full((len(prompts), prompt_length), pad)
    prompt_mask = torch.zeros_like(prompt_ids)
    response_ids = torch.full((len(responses), response_length), pad)
    response_mask = torch.zeros_like(response_ids)
    for row, (prompt, response, stops) in enumerate(zip(prompts, responses, stop)):
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        assert len(ids) <= prompt_length, f"test prompt {prompt!r} needs {len(ids)} tokens"
        prompt_ids[row, prompt_length - len(ids) :] = torch.tensor(ids)
        prompt_mask[row, prompt_length - len(ids) :] = 1
        ids = tokenizer.encode(response, add_special_tokens=False) + ([tokenizer.eos_token_id] if stops else [])
        assert len(ids) <= response_length, f"test response {response!r} needs {len(ids)} tokens"
        response_ids[row, : len(ids)] = torch.tensor(ids)
        response_mask[row, : len(ids)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "response_mask": response_mask,
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=-1),
            "input_ids": torch.cat([prompt_ids, response_ids], dim=-1),
        },
        non_tensors=non_tensors,
    )


@pytest.fixture
def make_batch(tokenizer: Any) -> Callable[..., DataProto]:
    """_make_batch with the tiny tokenizer bound."""
    return functools.partial(_make_batch, tokenizer)
