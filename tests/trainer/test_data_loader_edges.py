# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of the data loaders (verl/trainer/data_loader.py): a resumed position's workers, checkpoints without a
loader file or a recorded shuffle, the default worker count, and a batch of the whole data set. A mutation audit
changed each line these pin and no other test failed."""

import itertools
import json
import logging
from types import SimpleNamespace

import datasets
import pytest
import torch

from verl.data.tokenizer import get_tokenizer
from verl.models.tiny_models import get_or_build_tiny_model
from verl.trainer.config import DataConfig
from verl.trainer.data_loader import (
    MEDIA_LOADER_WORKERS,
    create_dataloader,
    init_loader_worker,
    load_loader_state,
    loader_workers,
    resume_loader,
)


NUM_ROWS = 6


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return get_tokenizer(get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("tiny_models"))))


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    """train.jsonl with answers "0".."5"."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"Add {i} and {i}.", "answer": str(i)}) for i in range(NUM_ROWS)))
    return str(path)


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _config(train_file, **overrides) -> DataConfig:
    values = dict(
        train_files=train_file,
        val_files="",
        rollout_batch_size=2,
        max_prompt_length=32,
        min_pixels=None,
        max_pixels=None,
        seed=7,
    )
    values.update(overrides)
    return DataConfig(**values)


def _draw(loader, count: int) -> list[list[str]]:
    """`count` batches, across epochs, as the trainer draws them (a new iterator when one ends)."""
    drawn: list[list[str]] = []
    while len(drawn) < count:
        drawn += [
            list(batch.non_tensor_batch["ground_truth"]) for batch in itertools.islice(loader, count - len(drawn))
        ]
    return drawn


def _saved_after_one_batch(train_file, tokenizer, tmp_path, **overrides) -> tuple[str, list[list[str]]]:
    """(the loader file of a run stopped after its first batch, the batches an uninterrupted run draws)."""
    uninterrupted = _draw(create_dataloader(_config(train_file, **overrides), tokenizer, None)[0], 4)
    interrupted, _ = create_dataloader(_config(train_file, **overrides), tokenizer, None)
    next(iter(interrupted))
    loader_file = str(tmp_path / "dataloader.pt")
    torch.save(interrupted.state_dict(), loader_file)
    return loader_file, uninterrupted


def test_a_position_resumed_with_its_saved_workers_gets_the_workers_setup(train_file, tokenizer):
    """The saved worker count is kept; its workers leave Ctrl-C to the driver and run one thread, as a new run's."""
    saved, _ = create_dataloader(_config(train_file, dataloader_num_workers=2), tokenizer, None)
    next(iter(saved))
    resumed, _ = create_dataloader(_config(train_file, dataloader_num_workers=0), tokenizer, None)
    assert resumed.worker_init_fn is None
    load_loader_state(resumed, saved.state_dict())
    assert resumed.num_workers == 2 and resumed.worker_init_fn is init_loader_worker


def test_the_trainers_resume_keeps_a_position_saved_with_other_workers(train_file, tokenizer, tmp_path):
    loader_file, uninterrupted = _saved_after_one_batch(train_file, tokenizer, tmp_path, dataloader_num_workers=2)
    resumed, _ = create_dataloader(_config(train_file), tokenizer, None)  # data.dataloader_num_workers unset: 0
    resume_loader(resumed, loader_file, {"seed": 7, "shuffle": True}, _config(train_file), "ckpt")
    assert _draw(resumed, 3) == uninterrupted[1:]


def test_a_checkpoint_without_a_loader_file_starts_the_data_from_the_beginning(train_file, tokenizer, tmp_path):
    config = _config(train_file)
    resumed, _ = create_dataloader(config, tokenizer, None)
    resume_loader(resumed, str(tmp_path / "dataloader.pt"), {"seed": 7, "shuffle": True}, config, "ckpt")
    assert _draw(resumed, 3) == _draw(create_dataloader(config, tokenizer, None)[0], 3)


def test_a_checkpoint_that_did_not_record_shuffle_keeps_its_position(train_file, tokenizer, tmp_path, caplog):
    """A trainer state without `shuffle` (saved before it was recorded) is taken to have the run's setting."""
    loader_file, uninterrupted = _saved_after_one_batch(train_file, tokenizer, tmp_path, shuffle=False)
    config = _config(train_file, shuffle=False)
    resumed, _ = create_dataloader(config, tokenizer, None)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        resume_loader(resumed, loader_file, {"seed": 7}, config, "ckpt")
    assert "new pass" not in caplog.text
    assert _draw(resumed, 3) == uninterrupted[1:]


def test_without_shuffle_a_changed_seed_is_not_warned_about(train_file, tokenizer, tmp_path, caplog):
    """data.seed orders the shuffle only: with data.shuffle=false it changes nothing, and nothing is said."""
    loader_file, uninterrupted = _saved_after_one_batch(train_file, tokenizer, tmp_path, shuffle=False)
    config = _config(train_file, shuffle=False, seed=8)
    resumed, _ = create_dataloader(config, tokenizer, None)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        resume_loader(resumed, loader_file, {"seed": 7, "shuffle": False}, config, "ckpt")
    assert "data.seed" not in caplog.text
    assert _draw(resumed, 3) == uninterrupted[1:]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_position_past_the_end_of_data_with_fewer_rows_starts_a_new_pass(
    train_file, tokenizer, tmp_path, caplog, workers, shuffle
):
    """A run resumed on data with fewer rows than its epoch had drawn (the data filtered between the runs): torchdata's
    sampler raised a bare StopIteration at the first step, after every worker had started, where a changed row count
    is to be warned about and the run to go on. A new pass starts, said."""
    saved, _ = create_dataloader(_config(train_file, shuffle=shuffle, dataloader_num_workers=workers), tokenizer, None)
    batches = iter(saved)
    next(batches), next(batches)  # 4 of the 6 rows drawn
    loader_file = str(tmp_path / "dataloader.pt")
    torch.save(saved.state_dict(), loader_file)
    smaller = tmp_path / "smaller.jsonl"
    smaller.write_text("\n".join(json.dumps({"prompt": f"Add {i} and {i}.", "answer": str(i)}) for i in range(3)))
    config = _config(str(smaller), shuffle=shuffle)
    resumed, _ = create_dataloader(config, tokenizer, None)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        resume_loader(resumed, loader_file, {"seed": 7, "shuffle": shuffle}, config, "ckpt")
    new_pass = "ckpt was saved 4 training prompts into its epoch, and the training data has 3 now: the data order"
    assert f"{new_pass} starts a new pass." in caplog.text
    assert _draw(resumed, 2) == _draw(create_dataloader(config, tokenizer, None)[0], 2)


def test_loader_workers_default_to_none_for_text_and_to_some_for_media():
    text, media = SimpleNamespace(has_media=False), SimpleNamespace(has_media=True)
    assert loader_workers(None, text) == 0
    assert loader_workers(None, media) == MEDIA_LOADER_WORKERS > 0
    assert loader_workers(0, media) == 0  # data.dataloader_num_workers=0: asked for, in the driver
    assert loader_workers(3, text) == 3


def test_a_text_runs_loader_has_no_workers_by_default(train_file, tokenizer):
    train, _ = create_dataloader(_config(train_file), tokenizer, None)
    assert train.num_workers == 0 and train.worker_init_fn is None


def test_a_batch_of_every_prompt_is_one_step_an_epoch(train_file, tokenizer):
    train, _ = create_dataloader(_config(train_file, rollout_batch_size=NUM_ROWS), tokenizer, None)
    assert [sorted(batch) for batch in _draw(train, 2)] == [[str(i) for i in range(NUM_ROWS)]] * 2


def test_a_generation_round_larger_than_the_data_is_named_by_its_key(train_file, tokenizer):
    config = _config(train_file, rollout_batch_size=8, mini_rollout_batch_size=8)
    with pytest.raises(
        ValueError, match=r"^data.mini_rollout_batch_size=8 is larger than the 6 usable training prompts"
    ):
        create_dataloader(config, tokenizer, None)
