# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the SFT config and driver (verl/sft/config.py, main.py) that the main SFT tests leave open (found by a
mutation audit of verl/sft)."""

import re

import pytest

from verl.utils.config import ConfigError


@pytest.fixture
def base(tmp_path) -> list[str]:
    (tmp_path / "train.jsonl").write_text("{}\n")
    return [f"data.train_files={tmp_path / 'train.jsonl'}", "worker.model.model_path=Qwen/Qwen2-0.5B"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.response_key=a", "data.prompt_key and data.response_key go together"),
        ("data.val_batch_size=0", "Config key 'data.val_batch_size' must be positive, got 0."),
        ("worker.max_grad_norm=0", "Config key 'worker.max_grad_norm' must be positive, got 0.0."),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(base, override, message) -> None:
    from verl.sft.config import load_sft_config

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_sft_config([*base, override])


def test_an_empty_model_path_is_named(tmp_path) -> None:
    from verl.sft.config import load_sft_config

    (tmp_path / "train.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=re.escape("worker.model.model_path is empty; give a local model directory")):
        load_sft_config([f"data.train_files={tmp_path / 'train.jsonl'}"])


def test_a_relative_template_file_is_made_absolute_and_dropout_is_kept_by_default(base, tmp_path, monkeypatch) -> None:
    """The workers may run in another directory: a relative template path there would be read as template text."""
    from verl.sft.config import load_sft_config

    (tmp_path / "chat.jinja").write_text("{{ messages }}")
    monkeypatch.chdir(tmp_path)
    config = load_sft_config([*base, "data.override_chat_template=chat.jinja"])
    assert config.data.override_chat_template == str(tmp_path / "chat.jinja")
    assert config.worker.model.disable_dropout is False  # supervised trainers keep the model's dropout


def test_fewer_conversations_than_one_batch_are_refused_before_ray(tmp_path) -> None:
    import json

    from verl.data.sft_dataset import SFTDataError
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.config import load_sft_config
    from verl.sft.main import build_datasets

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(row) for _ in range(3)) + "\n")
    args = [f"data.train_files={tmp_path / 'train.jsonl'}", f"worker.model.model_path={model}"]
    with pytest.raises(SFTDataError, match=r"has 3 conversations, fewer than data.batch_size=4\."):
        build_datasets(load_sft_config([*args, "data.batch_size=4", "trainer.device=cpu"]))
    train, val, _ = build_datasets(load_sft_config([*args, "data.batch_size=3", "trainer.device=cpu"]))
    assert len(train) == 3 and val is None


class TwoRanks:
    """A worker group of two ranks whose NLL is 1 per assistant token: each rank sums its half of the batch and, as
    SFTWorker.eval_batch, reports the batch's global token count."""

    world_size = 2

    def __init__(self) -> None:
        self.batches = []

    def eval_batch(self, batch) -> list[dict[str, float]]:
        self.batches.append(batch)
        mask = batch.batch["response_mask"].float()
        half = len(mask) // 2
        tokens = mask.sum().item()
        return [
            {"nll_sum": mask[:half].sum().item(), "tokens": tokens},
            {"nll_sum": mask[half:].sum().item(), "tokens": tokens},
        ]


def test_validation_counts_each_conversation_once_over_the_ranks(tmp_path) -> None:
    from sft_testing import data_config

    from verl.data.sft_dataset import SFTDataset
    from verl.data.tokenizer import get_tokenizer
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.main import validate

    tokenizer = get_tokenizer(get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
    rows = [
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "word " * n}]}
        for n in (1, 2, 3)
    ]
    dataset = SFTDataset(rows, tokenizer, None, data_config(max_length=64))
    group = TwoRanks()
    assert validate(group, dataset, batch_size=3) == {"val/loss": 1.0}
    (batch,) = group.batches
    masks = batch.batch["response_mask"]
    assert len(masks) == 4 and masks[3].sum() == 0  # the row padding the batch to the ranks is not learned
    assert [int(mask.sum()) for mask in masks[:3]] == [sum(dataset.encode(i)["loss_mask"][1:]) for i in range(3)]


def test_the_best_checkpoint_is_the_one_with_the_lowest_validation_loss(tmp_path) -> None:
    import json
    import os
    from types import SimpleNamespace

    from verl.sft.main import save
    from verl.trainer.checkpointing import CheckpointTracker

    class Writes:
        def save_checkpoint(self, path: str) -> None:
            os.makedirs(path, exist_ok=True)

    trainer = SimpleNamespace(save_checkpoint_path=str(tmp_path), save_limit=-1)
    tracker = CheckpointTracker.resumed(str(tmp_path), 0)
    for step, val_loss in ((1, 2.0), (2, 0.5), (3, 1.0)):
        tracker = save(Writes(), trainer, step, {"seed": 1}, tracker, val_loss, step < 3)
    assert tracker.best_global_step == 2 and tracker.last_global_step == 3
    state = json.loads((tmp_path / "global_step_3" / "trainer_state.json").read_text())
    assert state == {"trainer": "sft", "global_step": 3, "seed": 1}


def test_a_bad_row_stops_the_command_with_one_line_and_exit_code_2(tmp_path, capsys) -> None:
    import json

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.main import main

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    row = {"messages": [{"role": "user", "content": "Hi"}]}
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    args = [f"data.train_files={tmp_path / 'train.jsonl'}", f"worker.model.model_path={model}", "data.batch_size=1"]
    assert main([*args, "trainer.device=cpu", f"trainer.save_checkpoint_path={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "the conversation has no assistant message to learn from" in err, err
