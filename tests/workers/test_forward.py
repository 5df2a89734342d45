# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""forward_response and make_micro_batches in one process: trimmed padded rows, packed rows, padded budgets."""

import pytest
import torch

from tests.workers.fsdp_testing import make_text_batch, reference_outputs
from verl.models.config import ModelConfig
from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.utils.torch_functional import log_probs_from_logits
from verl.workers.actor.forward import forward_response, make_micro_batches, packing_is_exact, update_micro_batch_size


TEMPERATURE = 0.7


def head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"log_probs": log_probs_from_logits(logits.float() / TEMPERATURE, labels)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from verl.models.loading import build_model

    path = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("models")))
    return build_model(ModelConfig(model_path=path, enable_gradient_checkpointing=False)).eval()


def short_batch(extra: int = 8) -> DataProto:
    """A rollout batch widened by `extra` all-padding columns before the prompts and after the responses."""
    data = make_text_batch(seed=3, batch_size=6, prompt_len=12, response_len=10)
    batch = data.batch

    def widen(tensor: torch.Tensor) -> torch.Tensor:
        pad = torch.nn.functional.pad
        return torch.cat([pad(tensor[:, :12], (extra, 0)), pad(tensor[:, 12:], (0, extra))], dim=1)

    tensors = {key: widen(batch[key]) for key in ("input_ids", "attention_mask", "position_ids")}
    tensors["responses"] = torch.nn.functional.pad(batch["responses"], (0, extra))
    return DataProto.from_dict(tensors=tensors)


def test_padded_forward_trims_padding_columns_and_matches_the_full_forward(model):
    data = short_batch()
    reference = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    widths = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape), with_kwargs=True)
    try:
        out = forward_response(model, data, padding_free=False, head=head)["log_probs"]
    finally:
        hook.remove()
    assert out.shape == reference.shape
    assert (out - reference).abs().max() < 1e-5
    valid_columns = data.batch["attention_mask"].any(dim=0).sum().item()
    assert widths == [torch.Size([len(data), valid_columns])]  # all-padding columns never reach the model
    assert valid_columns <= data.batch["attention_mask"].shape[1] - 16


def test_packed_forward_matches_the_padded_forward(model):
    data = short_batch()
    assert packing_is_exact(model), "the default attention must be the varlen one"
    packed = forward_response(model, data, padding_free=True, head=head)["log_probs"]
    padded = forward_response(model, data, padding_free=False, head=head)["log_probs"]
    assert (packed - padded).abs().max() < 1e-5


def test_padded_micro_batches_group_by_length_and_restore_order(model):
    data = make_text_batch(seed=5, batch_size=12, prompt_len=12, response_len=10)
    micro, order = make_micro_batches(data, micro_batch_size=3, dynamic=True, padded=True)
    budget = 3 * data.batch["attention_mask"].shape[1]
    for part in micro:
        mask = part.batch["attention_mask"]
        width = int(mask[:, :12].sum(-1).max() + mask[:, 12:].sum(-1).max())
        assert len(part) * width <= budget
    outputs = torch.cat([forward_response(model, part, False, head)["log_probs"] for part in micro])[order]
    reference = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    assert (outputs - reference).abs().max() < 1e-5


def test_update_micro_batch_default_follows_the_device(monkeypatch):
    from verl.utils import device as device_utils

    assert update_micro_batch_size(3, 64, dynamic=False) == 3  # a configured size is used as it is
    monkeypatch.setattr(device_utils, "_device_type", "cpu")
    assert update_micro_batch_size(None, 64, dynamic=True) == 8
    assert update_micro_batch_size(None, 12, dynamic=False) == 6  # fixed splits: the largest divisor up to 8
    assert update_micro_batch_size(None, 7, dynamic=False) == 7
    # every micro-batch gathering the parameters itself: larger micro-batches
    assert update_micro_batch_size(None, 64, dynamic=True, gather_once=False) == 16
    assert update_micro_batch_size(None, 24, dynamic=False, gather_once=False) == 12
    monkeypatch.setattr(device_utils, "_device_type", "cuda")
    assert update_micro_batch_size(None, 64, dynamic=True) == 4
    assert update_micro_batch_size(None, 6, dynamic=False) == 3
