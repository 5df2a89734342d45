# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Train and validation data loaders whose position is checkpointed: a StatefulDataLoader over a seeded, stateful
RandomSampler, so a resumed run draws exactly the batch the interrupted one would have next."""

import logging
import os
import warnings
from typing import Any

import torch
from torch.utils.data import SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from verl.data.dataset import RLHFDataset
from verl.protocol import collate_fn
from verl.trainer.config import DataConfig
from verl.utils.child_signals import reset_child_signals


logger = logging.getLogger(__name__)

# torchdata's StatefulDataLoader calls torch.set_vital, deprecated in torch 2.13: a warning per epoch, not actionable.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)


def init_loader_worker(worker_id: int) -> None:
    """In each loader worker: one torch thread, and the driver's signal handlers undone (`reset_child_signals`).
    A forked worker cannot use the driver's OpenMP pool (its first parallel op would hang in libgomp); torch's own
    setter is called since a vLLM engine in the process no-ops `torch.set_num_threads`."""
    torch._C.set_num_threads(1)
    reset_child_signals()


def saved_num_workers(state: dict[str, Any]) -> int:
    """The worker count a StatefulDataLoader state was saved with (0: in the driver process; torchdata 0.11 layout)."""
    snapshot = state.get("_snapshot")
    return 0 if snapshot is None else len(snapshot["_worker_snapshots"])


def epoch_position(state: dict[str, Any]) -> int | None:
    """The rows a StatefulDataLoader state had drawn of its epoch (torchdata 0.11 layout, with or without workers);
    None where it does not say."""
    snapshot = state.get("_snapshot")
    main = state if snapshot is None else snapshot.get("_main_snapshot") or {}
    position = (main.get("_sampler_iter_state") or {}).get("samples_yielded")
    return position if isinstance(position, int) else None


def load_loader_state(loader: StatefulDataLoader, state: dict[str, Any]) -> None:
    """Put `loader` at the saved position; torchdata resumes only with the saved worker count, so that count is kept
    (with a warning) rather than fail or lose the place."""
    saved = saved_num_workers(state)
    if saved != loader.num_workers:
        logger.warning(
            "The checkpoint's data-loader position was saved with data.dataloader_num_workers=%d; this run keeps %d "
            "instead of %d (torchdata cannot move a position to another worker count). A new run uses the setting.",
            saved,
            saved,
            loader.num_workers,
        )
        loader.num_workers = saved
        loader.worker_init_fn = init_loader_worker if saved else None
        if saved and loader.prefetch_factor is None:  # left unset by a loader built without workers
            loader.prefetch_factor = 2
    loader.load_state_dict(state)


def resume_loader(
    loader: StatefulDataLoader, loader_file: str, saved: dict[str, Any], data: DataConfig, path: str
) -> None:
    """Put the RL train `loader` where checkpoint `path` left it (`loader_file`; `saved` its trainer state, with the
    data.seed and data.shuffle it was saved with). A changed data.shuffle starts a new pass (the saved position is
    another sampler's: torchdata failed on the first batch with a bare AssertionError, or drew the epoch's trained rows
    again), and so does a position past the end of data that has fewer rows now (torchdata failed on the first batch
    with a bare StopIteration); a changed seed is said to take effect in new runs only (the saved generator goes on)."""
    if saved.get("shuffle", data.shuffle) != data.shuffle:
        logger.warning(
            "data.shuffle=%s, and %s was saved with %s: the data order starts a new pass (the saved epoch's rows not "
            "yet trained are not taken first).",
            data.shuffle,
            path,
            saved["shuffle"],
        )
        return
    if not os.path.isfile(loader_file):
        return
    state = torch.load(loader_file, weights_only=True)
    position, rows = epoch_position(state), len(loader.dataset)
    if position is not None and position > rows:  # torchdata's sampler stopped with a bare StopIteration at step 1
        logger.warning(
            "%s was saved %d training prompts into its epoch, and the training data has %d now: the data order starts "
            "a new pass.",
            path,
            position,
            rows,
        )
        return
    load_loader_state(loader, state)
    if data.shuffle and saved.get("seed", data.seed) != data.seed:
        logger.warning(
            "data.seed=%d, and %s was saved with %d: the saved shuffle order goes on (a seed takes effect in a new "
            "run only).",
            data.seed,
            path,
            saved["seed"],
        )


_DATASET_OPTIONS = (
    "prompt_key answer_key image_key video_key tools_key image_dir video_fps video_max_frames max_prompt_length "
    "format_prompt "
    "override_chat_template chat_template_kwargs min_pixels max_pixels filter_overlong_prompts "
    "filter_overlong_prompts_workers skip_bad_rows allow_paths_outside_image_dir"
).split()
"""The DataConfig fields RLHFDataset takes under the same names."""


MEDIA_LOADER_WORKERS = 2

ONE_VALIDATION_BATCH_ROWS = 4096
"""A validation set larger than this in one batch (data.val_batch_size=-1) is warned about."""


def loader_workers(configured: int | None, dataset: Any) -> int:
    """data.dataloader_num_workers, or when unset MEDIA_LOADER_WORKERS for data with media, else 0 (text is cheap;
    a worker would only hold memory)."""
    if configured is not None:
        return configured
    return MEDIA_LOADER_WORKERS if getattr(dataset, "has_media", False) else 0


def create_dataloader(
    config: DataConfig,
    tokenizer: Any,
    processor: Any,
    limit_images: int = 0,
    tools: list[dict[str, Any]] | None = None,
) -> tuple[StatefulDataLoader, StatefulDataLoader | None]:
    """(train loader, validation loader or None without data.val_files).
    Train batches hold data.mini_rollout_batch_size prompts if set (one generation round), else rollout_batch_size;
    an epoch's last incomplete batch is dropped. Validation is unshuffled; val_batch_size=-1 means one batch.
    `limit_images` (worker.rollout.limit_images, 0 for none) makes a row with more images a data error here rather
    than in the engine."""

    def build_dataset(source: str) -> RLHFDataset:
        options = {name: getattr(config, name) for name in _DATASET_OPTIONS}
        return RLHFDataset(source, tokenizer, processor, limit_images=limit_images, tools=tools, **options)

    train_dataset = build_dataset(config.train_files)
    batch_size = config.mini_rollout_batch_size or config.rollout_batch_size
    key = "data.mini_rollout_batch_size" if config.mini_rollout_batch_size else "data.rollout_batch_size"
    if len(train_dataset) < batch_size:
        raise ValueError(
            f"{key}={batch_size} is larger than the {len(train_dataset)} usable training prompts of "
            f"{config.train_files!r}; lower it or add data."
        )
    warn_left_out(key, batch_size, len(train_dataset), "training prompts", config.shuffle)
    if config.shuffle:
        sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(config.seed))
    else:
        sampler = SequentialSampler(train_dataset)
    num_workers = loader_workers(config.dataloader_num_workers, train_dataset)
    train_dataloader = _loader(train_dataset, batch_size, num_workers, sampler=sampler, drop_last=True)
    if not config.val_files:
        return train_dataloader, None
    val_dataset = build_dataset(config.val_files)
    val_batch_size = len(val_dataset) if config.val_batch_size == -1 else config.val_batch_size
    if val_batch_size <= 0:
        raise ValueError(f"data.val_batch_size must be positive or -1 (the whole set), got {config.val_batch_size}.")
    if val_batch_size > ONE_VALIDATION_BATCH_ROWS:  # measured: 50,000 prompts of 2,048 tokens, +5.7 GB in the driver
        media = ", their images and videos decoded at once" if val_dataset.has_media else ""
        tensors = val_batch_size * config.max_prompt_length * 3 * 8  # ids, mask and positions, 8 bytes a token each
        logger.warning(
            "data.val_batch_size=%d puts the %d validation prompts in one batch, built in the driver before any is "
            "generated%s (its prompt tensors alone: %.1f GB); set data.val_batch_size (e.g. 512) to validate in "
            "batches.",
            config.val_batch_size,
            len(val_dataset),
            media,
            tensors / 1e9,
        )
    # One batch is needed at once: workers could not get ahead, and would only add the cost of sending it over.
    val_workers = (
        loader_workers(config.dataloader_num_workers, val_dataset) if len(val_dataset) > val_batch_size else 0
    )
    val_dataloader = _loader(val_dataset, val_batch_size, val_workers, shuffle=False, drop_last=False)
    return train_dataloader, val_dataloader


def warn_left_out(key: str, batch_size: int, rows: int, what: str, shuffle: bool) -> None:
    """Warn when full batches (every step has the same size) leave rows out of each epoch; with shuffle off they are
    the same rows every epoch, never trained (RL and SFT)."""
    if left_out := rows % batch_size:
        logger.warning(
            "%s=%d leaves %d of the %d %s out of each epoch (%s); choose a batch size that divides the data to train "
            "on every one.",
            key,
            batch_size,
            left_out,
            rows,
            what,
            "other ones each epoch" if shuffle else "the same last ones every epoch, with data.shuffle=false",
        )


def _loader(dataset: Any, batch_size: int, num_workers: int, **kwargs: Any) -> StatefulDataLoader:
    """A resumable loader; its workers leave Ctrl-C and SIGTERM to the trainer."""
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        worker_init_fn=init_loader_worker if num_workers else None,
        collate_fn=collate_fn,
        **kwargs,
    )
