# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import io
import itertools
import json
import logging
import signal

import datasets
import pytest
import torch

from verl.data.tokenizer import get_tokenizer
from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.trainer import data_loader
from verl.trainer.config import DataConfig
from verl.trainer.data_loader import (
    create_dataloader,
    init_loader_worker,
    load_loader_state,
    resume_loader,
    saved_num_workers,
)


NUM_ROWS = 10


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return get_tokenizer(get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("tiny_models"))))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """train.jsonl with answers "0".."9" and val.jsonl with answers "v0".."v4"."""
    root = tmp_path_factory.mktemp("data")
    paths = {}
    for name, rows in (
        ("train", [{"prompt": f"Add {i} and {i}.", "answer": str(i), "id": i} for i in range(NUM_ROWS)]),
        ("val", [{"prompt": f"Check {i}.", "answer": f"v{i}", "id": i} for i in range(5)]),
    ):
        paths[name] = str(root / f"{name}.jsonl")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(row) for row in rows))
    return paths


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _config(files, **overrides) -> DataConfig:
    values = dict(
        train_files=files["train"],
        val_files=files["val"],
        rollout_batch_size=3,
        max_prompt_length=32,
        min_pixels=None,
        max_pixels=None,
        seed=7,
    )
    values.update(overrides)
    return DataConfig(**values)


def _answers(batch: DataProto) -> list[str]:
    return list(batch.non_tensor_batch["ground_truth"])


def _epochs(loader, num_epochs: int) -> list[list[list[str]]]:
    return [[_answers(batch) for batch in loader] for _ in range(num_epochs)]


def test_train_batches_are_seeded_shuffles_without_the_incomplete_tail(files, tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        train, _ = create_dataloader(_config(files), tokenizer, None)
    assert "data.rollout_batch_size=3 leaves 1 of the 10 training prompts out of each epoch (other ones" in caplog.text
    batch = next(iter(train))
    assert isinstance(batch, DataProto) and len(batch) == 3
    assert batch.batch["input_ids"].shape == (3, 32) and batch.batch["position_ids"].shape == (3, 32)
    assert batch.meta_info == {}  # settings reach the workers through their config, never in the batch
    assert list(batch.non_tensor_batch["id"]) == [int(answer) for answer in _answers(batch)]
    train, _ = create_dataloader(_config(files), tokenizer, None)
    epochs = _epochs(train, 3)
    for epoch in epochs:
        assert len(epoch) == NUM_ROWS // 3  # the 10th prompt does not make a full batch: dropped
        seen = [answer for batch in epoch for answer in batch]
        assert len(set(seen)) == 9
    assert epochs[0] != epochs[1] != epochs[2]  # a new order every epoch
    assert epochs[0][0] != [str(i) for i in range(3)]  # shuffled, not file order
    again, _ = create_dataloader(_config(files), tokenizer, None)
    assert _epochs(again, 3) == epochs  # the same seed gives the same sequence
    other_seed, _ = create_dataloader(_config(files, seed=8), tokenizer, None)
    assert _epochs(other_seed, 1) != epochs[:1]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        in_order, _ = create_dataloader(_config(files, shuffle=False), tokenizer, None)
    assert _epochs(in_order, 1) == [[["0", "1", "2"], ["3", "4", "5"], ["6", "7", "8"]]]
    assert "(the same last ones every epoch, with data.shuffle=false)" in caplog.text  # "9" is never trained
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        mini, _ = create_dataloader(_config(files, mini_rollout_batch_size=2), tokenizer, None)
    assert "leaves" not in caplog.text  # 2 divides the 10 prompts
    assert [len(batch) for batch in mini] == [2] * 5


def test_validation_is_in_file_order_and_minus_one_is_the_whole_set(files, tokenizer, caplog, monkeypatch):
    _, val = create_dataloader(_config(files), tokenizer, None)
    assert [_answers(batch) for batch in val] == [["v0", "v1", "v2", "v3", "v4"]]
    assert "in one batch" not in caplog.text
    # a large set in one batch is built in the driver at once (50,000 prompts: 92 s and +1.6 GB): said
    monkeypatch.setattr(data_loader, "ONE_VALIDATION_BATCH_ROWS", 4)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
        create_dataloader(_config(files), tokenizer, None)
        assert "data.val_batch_size=-1 puts the 5 validation prompts in one batch" in caplog.text
        caplog.clear()
        create_dataloader(_config(files, val_batch_size=4), tokenizer, None)
        assert "in one batch" not in caplog.text
    _, val = create_dataloader(_config(files, val_batch_size=2), tokenizer, None)
    assert [_answers(batch) for batch in val] == [["v0", "v1"], ["v2", "v3"], ["v4"]]  # the tail is kept
    _, val = create_dataloader(_config(files, val_files=""), tokenizer, None)
    assert val is None


@pytest.mark.parametrize(
    "stop_after, after_exhaustion, num_workers",
    [
        (1, False, 0),
        (3, False, 0),
        (3, True, 0),
        (4, False, 0),
        (7, False, 0),
        (9, True, 0),
        (1, False, 2),
        (3, True, 2),
        (4, False, 2),
        (7, False, 2),
    ],
)
def test_resumed_loader_continues_with_the_same_next_batch(
    files, tokenizer, stop_after, after_exhaustion, num_workers
):
    """Draw `stop_after` batches, save the state, and check a new loader restored from it draws what comes next.

    after_exhaustion saves the state once the epoch's loop has ended (3 batches per epoch), not inside it. With
    loader workers, batches are prepared ahead of the one yielded: the state must still point at the next one.
    """
    config = _config(files, dataloader_num_workers=num_workers)
    reference, _ = create_dataloader(config, tokenizer, None)
    uninterrupted = [batch for epoch in _epochs(reference, 4) for batch in epoch]

    interrupted, _ = create_dataloader(config, tokenizer, None)
    drawn, state = 0, None
    while state is None:
        for batch in interrupted:
            assert _answers(batch) == uninterrupted[drawn]
            drawn += 1
            if drawn == stop_after and not after_exhaustion:
                state = interrupted.state_dict()
                break
        if drawn == stop_after and after_exhaustion:
            state = interrupted.state_dict()

    buffer = io.BytesIO()  # the state goes through a checkpoint file
    torch.save(state, buffer)
    buffer.seek(0)
    resumed, _ = create_dataloader(config, tokenizer, None)
    resumed.load_state_dict(torch.load(buffer, weights_only=False))
    continued = []
    while len(continued) < len(uninterrupted) - stop_after:
        continued += [_answers(batch) for batch in resumed]
    assert continued == uninterrupted[stop_after:]


def test_batch_larger_than_the_dataset_is_an_error(files, tokenizer):
    with pytest.raises(ValueError, match=r"data.rollout_batch_size=11 is larger than the 10 usable training prompts"):
        create_dataloader(_config(files, rollout_batch_size=11), tokenizer, None)


def _draw(loader, count: int) -> list[list[str]]:
    """`count` batches, across epochs, as the trainer draws them (a new iterator when one ends)."""
    drawn: list[list[str]] = []
    while len(drawn) < count:
        drawn += [_answers(batch) for batch in itertools.islice(loader, count - len(drawn))]
    return drawn


@pytest.mark.parametrize("saved_with, resumed_with", [(2, 0), (0, 2)])
def test_a_position_resumes_with_the_worker_count_it_was_saved_with(
    files, tokenizer, saved_with, resumed_with, caplog
):
    """torchdata cannot move a position between worker counts: the saved count is kept, and the run says so."""
    reference, _ = create_dataloader(_config(files, dataloader_num_workers=saved_with), tokenizer, None)
    uninterrupted = _draw(reference, 8)
    interrupted, _ = create_dataloader(_config(files, dataloader_num_workers=saved_with), tokenizer, None)
    iterator = iter(interrupted)
    for _ in range(2):
        next(iterator)
    state = interrupted.state_dict()
    assert saved_num_workers(state) == saved_with
    resumed, _ = create_dataloader(_config(files, dataloader_num_workers=resumed_with), tokenizer, None)
    with caplog.at_level(logging.WARNING):
        load_loader_state(resumed, state)
    assert f"saved with data.dataloader_num_workers={saved_with}; this run keeps {saved_with}" in caplog.text
    assert resumed.num_workers == saved_with
    assert _draw(resumed, 6) == uninterrupted[2:]


def test_validation_uses_workers_only_when_it_has_several_batches(files, tokenizer):
    train, val = create_dataloader(_config(files, dataloader_num_workers=2), tokenizer, None)
    assert train.num_workers == 2 and train.worker_init_fn is init_loader_worker
    assert val.num_workers == 0  # data.val_batch_size=-1: one batch, nothing to prepare ahead
    _, val = create_dataloader(_config(files, dataloader_num_workers=2, val_batch_size=2), tokenizer, None)
    assert val.num_workers == 2
    assert [_answers(batch) for batch in val] == [["v0", "v1"], ["v2", "v3"], ["v4"]]


def test_loader_workers_leave_ctrl_c_to_the_driver_and_end_on_sigterm():
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    threads = torch.get_num_threads()
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as the fit loop's StopRequest installs it
        init_loader_worker(0)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # how torch ends a worker that does not stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        torch._C.set_num_threads(threads)


class _ParallelRows(torch.utils.data.Dataset):
    """Rows whose making runs torch ops large enough to be split over threads (an image processor's rescale)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return (torch.rand(2000, 2000) * 2.0).to(torch.float64).sum()


def test_loader_workers_run_parallel_ops_after_a_vllm_engine_replaced_set_num_threads(monkeypatch):
    """A worker forked from a process with an OpenMP pool of several threads hangs in its first parallel op unless it
    runs on one thread; the loader's own torch.set_num_threads(1) is a no-op once a vLLM engine was built in the
    process (vLLM's CPU worker replaces it). Measured: without init_loader_worker the loader timed out."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    threads = torch.get_num_threads()
    torch._C.set_num_threads(2)
    try:
        (torch.rand(4000, 4000) * 3.0).sum()  # the parent's pool of two threads
        monkeypatch.setattr(torch, "set_num_threads", lambda count: None)  # as vLLM's CPU worker leaves it
        loader = StatefulDataLoader(
            _ParallelRows(), batch_size=2, num_workers=2, worker_init_fn=init_loader_worker, timeout=60
        )
        assert [batch.shape for batch in loader] == [(2,), (2,)]
    finally:
        torch._C.set_num_threads(threads)


class _RowFailsWhenLoaded(torch.utils.data.Dataset):
    """A row that passed the scan but fails when its batch is built (its image removed since)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        from verl.data.dataset import DatasetRowError

        raise DatasetRowError(f"file 'train.jsonl', row {index}, key 'images': image 0 cannot be read")


def test_a_row_error_from_a_loader_worker_reads_as_its_own_message():
    """torch re-raises a worker's error with the worker's traceback in its text; the CLI prints the row's message
    alone (`user_error_message`). Fails if torch changes how it wraps the error."""
    from verl.data.dataset import DatasetRowError
    from verl.utils.module_loading import user_error_message

    loader = torch.utils.data.DataLoader(_RowFailsWhenLoaded(), batch_size=2, num_workers=1)
    with pytest.raises(DatasetRowError) as error:
        next(iter(loader))
    assert "Original Traceback" in str(error.value)
    assert user_error_message(error.value) == "file 'train.jsonl', row 0, key 'images': image 0 cannot be read"


def test_a_resume_with_another_shuffle_or_seed_keeps_going_and_says_so(files, tokenizer, tmp_path, caplog):
    """The trainer's resume (`resume_loader`, with the seed and shuffle the checkpoint's trainer state holds): a
    shuffled position loaded into an unshuffled loader failed on the first batch with a bare AssertionError, an
    unshuffled one in a shuffled loader drew the epoch's trained rows again, and a changed seed went unmentioned."""
    shuffled, _ = create_dataloader(_config(files), tokenizer, None)
    uninterrupted = _draw(shuffled, 3)
    interrupted, _ = create_dataloader(_config(files), tokenizer, None)
    iterator = iter(interrupted)
    next(iterator)
    loader_file = str(tmp_path / "dataloader.pt")
    torch.save(interrupted.state_dict(), loader_file)
    saved = {"seed": 7, "shuffle": True}
    for overrides, message, expected in (
        ({}, None, uninterrupted[1:]),
        ({"seed": 8}, "data.seed=8, and ckpt was saved with 7: the saved shuffle order goes on", uninterrupted[1:]),
        (
            {"shuffle": False},
            "data.shuffle=False, and ckpt was saved with True: the data order starts a new pass",
            None,
        ),
    ):
        config = _config(files, **overrides)
        resumed, _ = create_dataloader(config, tokenizer, None)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="verl.trainer.data_loader"):
            resume_loader(resumed, loader_file, saved, config, "ckpt")
        assert message in caplog.text if message else "saved with" not in caplog.text
        fresh, _ = create_dataloader(config, tokenizer, None)
        assert _draw(resumed, 2) == (expected or _draw(fresh, 2))
