# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A checkpoint that cannot be written (a really full disk: a small tmpfs) fails cleanly and keeps the old one."""

import errno
import os

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl.utils.checkpoint.fsdp_checkpoint_manager import CheckpointWriteError, FSDPCheckpointManager, storage_error


def _trained_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A small Qwen2 (about 0.4 M parameters: 4.5 MiB with Adam's moments) after one optimizer step."""
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=1024,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = Qwen2ForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(input_ids=torch.randint(0, 1024, (2, 8)), labels=torch.randint(0, 1024, (2, 8))).loss.backward()
    optimizer.step()
    return model, optimizer


def test_full_disk_keeps_the_previous_checkpoint(small_disk):
    disk = small_disk(7 * 1024)  # one checkpoint fits, a second copy beside it does not
    model, optimizer = _trained_model()
    manager = FSDPCheckpointManager(model, optimizer)
    path = os.path.join(disk.path, "actor")
    manager.save(path, extra_state={"step": 1})
    saved = {name: value.clone() for name, value in model.state_dict().items()}

    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    with pytest.raises(CheckpointWriteError, match="No space left on device") as failure:
        manager.save(path, extra_state={"step": 2})
    assert failure.value.errno == errno.ENOSPC
    assert sorted(os.listdir(disk.path)) == ["actor"]  # the partial staging directory is gone, its space freed

    extra = manager.load(path)
    assert extra == {"step": 1}
    for name, value in model.state_dict().items():
        assert torch.equal(value, saved[name]), name


def test_storage_error_is_found_behind_wrappers():
    cause = OSError(errno.EROFS, "Read-only file system")
    try:
        try:
            raise cause
        except OSError as err:
            raise RuntimeError("save failed") from err
    except RuntimeError as wrapped:
        assert storage_error(wrapped) is cause
    assert storage_error(ValueError("not storage")) is None
