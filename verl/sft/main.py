# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Supervised fine-tuning: `python -m verl.sft.main config=examples/sft.yaml key=value ...`.

The driver checks the config and every conversation before Ray starts, then drives a group of SFTWorker processes
(FSDP2) over the batches: one optimizer step per batch, the validation loss every trainer.val_freq steps,
checkpoints in the RL trainer's layout (resumed from the latest one, or trainer.load_checkpoint_path), and at the
end the model as a Hugging Face directory that the RL trainer takes as worker.actor.model.model_path.

Batches are drawn by index from a permutation of the rows seeded by data.seed and the epoch, so a resumed run sees
exactly the batches the uninterrupted run would have. Each checkpoint records the place in that order (the epoch and
its rows drawn), so a run resumed with another data.batch_size goes on where the saved one stopped.

--dry-run       print the fully resolved config as YAML and exit (no Ray, no model; with USE_MODELSCOPE_HUB=1 a
                ModelScope id is fetched, as every run's config check does)
--help-config   list every config key with its type and description; `--help-config optim lr` lists those whose
                name contains each word
"""

import functools
import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from verl.sft.config import RUN_DERIVED_KEYS, SFTConfig, load_sft_config
from verl.trainer.checkpointing import (
    CheckpointSaveError,
    CheckpointTracker,
    atomic_write,
    check_matches_run,
    check_written_by,
    checkpoint_size_estimate,
    log_checkpoint_plan,
    nothing_to_train,
    resume_hint,
    resume_path,
    save_step,
    saved_settings,
    step_dir,
    step_of,
    warn_if_data_changed,
    warn_if_settings_changed,
)
from verl.trainer.preemption import RunSignals, StopRequest, TrainingInterrupted, run_status
from verl.trainer.run_lock import CheckpointFolderError, RunLock
from verl.utils import stall_report
from verl.utils.cli import keep_local_ray_on_loopback, load_config_or_exit, use_writable_dirs_or_exit
from verl.utils.config import ConfigError, as_config_error, config_to_dict
from verl.utils.hub import weights_fingerprint
from verl.utils.module_loading import user_error_message


if TYPE_CHECKING:  # imported where used: Ray and huggingface_hub must not be imported before main() sets them up
    from verl.data.sft_dataset import SFTDataset

logger = logging.getLogger(__name__)


def epoch_order(num_rows: int, epoch: int, seed: int, shuffle: bool) -> list[int]:
    """Every row's index, in one epoch's order. It is drawn from (seed, epoch) together: seeded with seed + epoch,
    seed s's epoch e + 1 was seed s + 1's epoch e, so the runs of a seed sweep shared all but one epoch's order."""
    if not shuffle:
        return list(range(num_rows))
    key = int(np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0] >> 1)
    return torch.randperm(num_rows, generator=torch.Generator().manual_seed(key)).tolist()


def next_batch_start(position: tuple[int, int], num_rows: int, batch_size: int) -> tuple[int, int]:
    """Where the next batch starts, from `position` (an epoch and the rows of its order drawn so far): there, or at
    the next epoch's start where the epoch's rest cannot fill a batch (dropped: every step has the same size)."""
    epoch, drawn = position
    return (epoch, drawn) if drawn + batch_size <= num_rows else (epoch + 1, 0)


def saved_position(state: dict[str, Any], num_rows: int, batch_size: int) -> tuple[int, int]:
    """The data position of a checkpoint's trainer_state.json `state`: its `epoch` and `epoch_rows`; for a checkpoint
    written before they were kept, its step over the batches of the batch size and rows it was saved with."""
    epoch, drawn = state.get("epoch"), state.get("epoch_rows")
    if isinstance(epoch, int) and isinstance(drawn, int):
        return epoch, drawn
    size = state.get("batch_size", batch_size)
    epoch, offset = divmod(state["global_step"], max(1, state.get("train_rows", num_rows) // size))
    return epoch, offset * size


def build_datasets(config: SFTConfig) -> tuple["SFTDataset", "SFTDataset | None", Any]:
    from verl.data.sft_dataset import SFTDataError, SFTDataset
    from verl.data.tokenizer import eos_token_ids, get_processor, get_tokenizer
    from verl.models.config import tokenizer_beyond_model, vocabulary_refusal
    from verl.models.rope_index import load_model_config

    model, data = config.worker.model, config.data
    options = {"trust_remote_code": model.trust_remote_code, "override_chat_template": data.override_chat_template}
    try:  # a folder without tokenizer files, a config transformers cannot read: one line, as in the RL trainer
        tokenizer = get_tokenizer(model.tokenizer_path, **options)
        processor = get_processor(model.tokenizer_path, **options)  # the workers' too: data's pixels resize before it
        model_config = load_model_config(model.model_path, model.trust_remote_code)
        stop_ids = eos_token_ids(tokenizer, model.model_path)
    except (OSError, ValueError) as error:
        where = f"worker.model.tokenizer_path={model.tokenizer_path}, worker.model.model_path={model.model_path}"
        raise SFTDataError(f"The model or its tokenizer cannot be loaded ({where}): {error}") from None
    if problem := tokenizer_beyond_model(tokenizer, model_config):
        raise SFTDataError(vocabulary_refusal("worker.model.", model.model_path, model.tokenizer_path, problem))
    train = SFTDataset(data.train_files, tokenizer, processor, data, model_config, stop_ids)
    val = SFTDataset(data.val_files, tokenizer, processor, data, model_config, stop_ids) if data.val_files else None
    if len(train) < data.batch_size:
        raise SFTDataError(
            f"{train.source.description} has {len(train)} conversations, fewer than data.batch_size={data.batch_size}."
        )
    return train, val, tokenizer


def _collate(dataset: "SFTDataset", indices: list[int]) -> Any:
    from verl.data.sft_dataset import collate_sft

    return collate_sft([dataset[i] for i in indices])


def validate(worker_group: Any, dataset: "SFTDataset", batch_size: int) -> dict[str, float]:
    """Mean negative log-likelihood per assistant token over the validation set. A batch that does not divide among
    the workers is padded here with rows whose loss mask is empty, so no conversation counts twice."""
    total = tokens = 0.0
    indices = list(range(len(dataset)))
    for start in range(0, len(indices), batch_size):
        batch, pad = _collate(dataset, indices[start : start + batch_size]).pad_to_divisor(worker_group.world_size)
        if pad:
            batch.batch["response_mask"][-pad:] = 0
        per_rank = worker_group.eval_batch(batch)
        total += sum(rank["nll_sum"] for rank in per_rank)
        tokens += per_rank[0]["tokens"]
    return {"val/loss": total / max(tokens, 1.0)}


def run_sft(config: SFTConfig) -> dict[str, float]:
    """Train, holding the checkpoint folder (one run per folder); returns the last step's metrics (and the last
    validation loss)."""
    # A signal while the run starts or ends stops it at once; in the loop the step finishes and is saved first
    with RunLock(config.trainer.save_checkpoint_path) as lock, RunSignals().installed() as signals:
        return _train(config, signals, lock.record)


def _train(config: SFTConfig, signals: RunSignals, lock_record: bytes) -> dict[str, float]:
    from verl.data.sft_dataset import SFTDataError
    from verl.models.fsdp import param_dtype
    from verl.sft.worker import SFTWorker
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayWorkerGroup
    from verl.single_controller.ray.resource import RayResourcePool
    from verl.trainer.data_loader import warn_left_out  # imports huggingface_hub (through the dataset)
    from verl.trainer.node_check import check_nodes_see_run_files, local_paths
    from verl.trainer.ray_setup import start_ray, warn_if_alone
    from verl.utils.device import resolve_device_type
    from verl.utils.logger import Tracker
    from verl.utils.logger.backends import check_logger_services

    data, trainer = config.data, config.trainer
    train, val, _ = build_datasets(config)  # every conversation is checked before Ray starts
    device = resolve_device_type(trainer.device)
    steps_per_epoch = len(train) // data.batch_size
    total_steps = trainer.max_steps or steps_per_epoch * trainer.total_epochs
    warn_left_out("data.batch_size", data.batch_size, len(train), "conversations", data.shuffle)  # as verl's SFT
    model = config.worker.model
    lora = model.lora.rank > 0  # its checkpoints hold the adapters only: no size estimate, as in RL
    with as_config_error((RuntimeError, ValueError)):  # the checkpoint to resume from: looked up before Ray starts
        resume = resume_path(trainer.load_checkpoint_path, trainer.find_last_checkpoint, trainer.save_checkpoint_path)
        if resume is not None:
            check_written_by(resume, "sft")
            check_matches_run(resume, model.model_path, model.lora, "worker.model")
    if nothing_to_train(resume, total_steps, "trainer.max_steps, or trainer.total_epochs over the data"):
        if not export_owed(trainer, resume):
            return {}  # a finished run's command again: it neither trains past max_steps nor exports again
    with as_config_error(ValueError):  # online logging asked for explicitly, and its service cannot be reached
        # an unreachable wandb / swanlab logs offline, said before Ray starts
        check_logger_services(trainer.logger, trainer.project_name)
    weights = [(model.model_path, param_dtype(config.worker.fsdp).itemsize)]
    log_checkpoint_plan(trainer, None if lora else checkpoint_size_estimate(weights, False))
    warn_if_alone(trainer.nnodes)
    start_ray(device, trainer.nnodes * trainer.n_gpus_per_node, trainer.signal_grace_s)
    read = {"worker.model.model_path": model.model_path, "worker.model.tokenizer_path": model.tokenizer_path}
    read.update({"data.override_chat_template": data.override_chat_template, "the checkpoint to resume from": resume})
    check_nodes_see_run_files(trainer.save_checkpoint_path, lock_record, local_paths(read))
    pool = RayResourcePool(
        process_on_nodes=[trainer.n_gpus_per_node] * trainer.nnodes,
        use_gpu=device == "cuda",
        name_prefix=f"sft_{trainer.experiment_name}",
    )
    group = RayWorkerGroup(
        pool,
        RayClassWithInitArgs(
            SFTWorker, config=config.worker, device=device, override_chat_template=data.override_chat_template
        ),
        name_prefix=trainer.experiment_name,
        env=stall_report.env(trainer.stall_report_s),
    )
    root = trainer.save_checkpoint_path
    start = step_of(resume) if resume is not None else 0
    tracker, ended = None, None
    try:
        tracker = Tracker(
            trainer.logger,
            trainer.project_name,
            trainer.experiment_name,
            root,
            config_to_dict(config),
            start_step=start,
        )
        group.init_model(total_steps, data.seed)
        step = 0
        # what fixes the order of the rows (saved with each checkpoint, checked on resume)
        data_state = {"train_rows": len(train), "batch_size": data.batch_size, "seed": data.seed}
        data_state["shuffle"] = data.shuffle
        data_state["model_fingerprint"] = weights_fingerprint(model.model_path)  # the weights the run started from
        data_state["settings"] = saved_settings(config)  # compared on resume
        data_state.update(epoch=0, epoch_rows=0)  # the place in the data, after each step (`saved_position`)
        if resume is not None:
            logger.info("Resuming from %s", resume)
            group.load_checkpoint(os.path.join(resume, "actor"))
            with open(os.path.join(resume, "trainer_state.json"), encoding="utf-8") as f:
                state = json.load(f)
            step = state["global_step"]
            epoch, drawn = saved_position(state, len(train), data.batch_size)
            data_state.update(epoch=epoch, epoch_rows=drawn)
            order = {key: data_state[key] for key in ("seed", "shuffle")}
            warn_if_data_changed(state, len(train), resume, order)
            told = (*(f"data.{key}" for key in (*order, "batch_size")), *RUN_DERIVED_KEYS)  # (max_steps: the lr's)
            warn_if_settings_changed(state, config, resume, told)
            if state.get("batch_size", data.batch_size) != data.batch_size:  # the place in the data is kept
                logger.warning(
                    "data.batch_size=%d, and %s was saved with %d: the run resumes at step %d, where the saved run "
                    "stopped in the data, and its steps from there on take %d conversations each, so it ends at step "
                    "%d (total_epochs or max_steps count them) and the learning-rate schedule spans those steps.",
                    data.batch_size,
                    resume,
                    state["batch_size"],
                    step,
                    data.batch_size,
                    total_steps,
                )
        ckpt_tracker = CheckpointTracker.resumed(root, step)
        metrics: dict[str, float] = {}
        last_saved = first_step = step
        order_of = functools.lru_cache(maxsize=1)(  # an epoch's order, drawn once (a permutation of every row)
            lambda epoch: epoch_order(len(train), epoch, data.seed, data.shuffle)
        )
        resume = (trainer.find_last_checkpoint, trainer.load_checkpoint_path)
        # a signal: the step in flight finishes first
        with StopRequest(trainer.signal_grace_s, resume).installed() as stop:
            while True:
                done = step >= total_steps
                if stop.requested and (not done or stop.exit_at_once):  # (Ray's store lost: also after the last step)
                    unsaved = step > first_step and last_saved != step
                    last = functools.partial(
                        save, group, trainer, step, data_state, ckpt_tracker, metrics.get("val/loss"), False
                    )
                    stop.stop(step, unsaved, last, root)
                if done:
                    break
                position = (data_state["epoch"], data_state["epoch_rows"])
                epoch, drawn = next_batch_start(position, len(train), data.batch_size)
                try:
                    rows = _collate(train, order_of(epoch)[drawn : drawn + data.batch_size])
                except SFTDataError as error:  # a row changed since the check (an image removed): the last step saved
                    if step > last_saved:
                        failed = f"Step {step + 1}", f"a resume runs step {step + 1} again"
                        save_before_failed_step(group, trainer, step, data_state, ckpt_tracker, *failed)
                    error.checkpointed = step > 0  # this step's checkpoint: saved now, earlier, or resumed from
                    raise
                step += 1
                data_state.update(epoch=epoch, epoch_rows=drawn + data.batch_size)  # what a save after it records
                started = time.perf_counter()
                metrics = {**group.train_batch(rows)[0], "train/epoch": float(epoch)}
                seconds = time.perf_counter() - started
                tokens = float(rows.batch["attention_mask"].sum())
                metrics.update({"timing_s/step": seconds, "perf/throughput": tokens / seconds / group.world_size})
                is_last = step == total_steps
                if val is not None and ((trainer.val_freq > 0 and step % trainer.val_freq == 0) or is_last):
                    try:
                        metrics.update(validate(group, val, data.val_batch_size))
                    except SFTDataError as error:  # the same for a validation row: this step, trained, saved first
                        failed = f"The validation after step {step}", "a resume goes on after it"
                        save_before_failed_step(group, trainer, step, data_state, ckpt_tracker, *failed)
                        tracker.log(metrics, step=step)  # its row: a resume does not run it again
                        error.checkpointed = True
                        raise
                if (trainer.save_freq > 0 and step % trainer.save_freq == 0) or is_last:
                    ckpt_tracker = save(
                        group, trainer, step, data_state, ckpt_tracker, metrics.get("val/loss"), not is_last
                    )
                    last_saved = step
                tracker.log(metrics, step=step)
        if last_saved != step:
            save(group, trainer, step, data_state, ckpt_tracker, metrics.get("val/loss"), False)
        if trainer.export_hf_model:
            export(group, os.path.join(root, "huggingface"), step_dir(root, step), config.worker.model)
            logger.info("Exported the model to %s", os.path.join(root, "huggingface"))
        return metrics
    except BaseException as error:
        ended = error
        raise
    finally:
        signals.stopping()  # a signal from here on exits at once: nothing is left to save
        if tracker is not None:
            tracker.finish(run_status(ended))
        group.shutdown()
        pool.remove()


def export_owed(trainer: Any, resume: str) -> bool:
    """Whether a run with nothing to train (its checkpoint `resume` at the last step) still owes its export:
    trainer.export_hf_model and no <save_checkpoint_path>/huggingface, as when the run stopped while exporting (a kill,
    the OOM killer during the full weights' gather, a signal). Its command again said "Nothing to train" and exported
    nothing, so the RL run given that folder found no model; now it loads the checkpoint and exports it (said). An
    export older than the checkpoint is an earlier step's (a run extended with more steps, or started over, stopped
    while exporting: the earlier export is replaced only once the new one is whole): it was kept without a word, and
    the RL run started from that earlier step's weights; it is owed too."""
    path = os.path.join(trainer.save_checkpoint_path, "huggingface")
    if not trainer.export_hf_model:
        return False
    if not os.path.isdir(path):
        logger.warning(
            "%s holds no exported model (the run stopped while exporting it?): exporting %s now.", path, resume
        )
        return True
    if os.path.getmtime(path) >= os.path.getmtime(os.path.join(resume, "trainer_state.json")):
        return False
    logger.warning(
        "%s was exported before %s was saved: it holds an earlier step's model (the run stopped while exporting this "
        "one?); exporting it now.",
        path,
        resume,
    )
    return True


def export(group: Any, path: str, checkpoint: str, model: Any) -> None:
    """The workers' Hugging Face export to `path`; a write failure (a full disk) is a CheckpointSaveError naming the
    cause and the command that exports the checkpoint later in the same dtype (the one `model`'s folder declares)."""
    from verl.models.loading import declared_dtype, load_model_config
    from verl.utils.checkpoint.fsdp_checkpoint_manager import storage_error

    try:
        group.export_hf_model(path)
    except Exception as err:
        cause = storage_error(err)
        text = str(getattr(err, "cause", None) or err)
        if cause is None and "No space left on device" not in text:  # safetensors' own error is no OSError
            raise
        reason = cause.strerror if cause is not None and cause.strerror else "No space left on device"
        dtype = str(declared_dtype(load_model_config(model))).removeprefix("torch.")  # the merger's default is bf16
        raise CheckpointSaveError(
            f"Could not export the model to {path}: {reason}. The checkpoint {checkpoint} is saved: free space and "
            f"run the same command again, or export it with `python scripts/model_merger.py --local_dir "
            f"{os.path.join(checkpoint, 'actor')} --dtype {dtype}`."
        ) from None


def save(
    group: Any,
    trainer: Any,
    step: int,
    data_state: dict[str, Any],
    tracker: CheckpointTracker,
    val_loss: float | None,
    more: bool,
) -> CheckpointTracker:
    """`save_step` of the model, optimizer, step count and `data_state` (what fixes the rows' order); the tracker's
    best is the lowest validation loss. Returns the new tracker."""
    state = {"trainer": "sft", "global_step": step, **data_state}

    def write(path: str) -> None:
        os.makedirs(path, exist_ok=True)
        group.save_checkpoint(os.path.join(path, "actor"))
        atomic_write(os.path.join(path, "trainer_state.json"), lambda f: json.dump(state, f))

    score = None if val_loss is None else -val_loss
    return save_step(trainer.save_checkpoint_path, step, tracker, score, write, trainer.save_limit, more)


def save_before_failed_step(
    group: Any,
    trainer: Any,
    step: int,
    data_state: dict[str, Any],
    tracker: CheckpointTracker,
    failed: str,
    resume: str,
) -> None:
    """A batch of step `step + 1`, or of the validation after `step`, could not be built (`failed` names which; a
    row changed since the check, an image removed): save `step`, which the workers hold, so that a resume goes on from
    it (`resume` says how); the run stopped with every step since its last save lost (all of them with
    trainer.save_freq=-1, the default). A save that fails is logged: the row's error is the one to report."""
    try:
        save(group, trainer, step, data_state, tracker, None, False)
    except Exception as save_error:  # (a full disk)
        logger.error("Step %d could not be saved before stopping: %s", step, save_error)
        return
    logger.error(
        "%s stopped on its data (the error follows); step %d, which the workers hold, is saved to %s first: %s.",
        failed,
        step,
        step_dir(trainer.save_checkpoint_path, step),
        resume,
    )


USAGE = (
    "usage: python -m verl.sft.main config=path/to/sft.yaml [section.key=value ...] [--dry-run] "
    "[--help-config [WORD ...]]"
)


def main(argv: list[str] | None = None) -> int:
    config = load_config_or_exit(argv, USAGE, __doc__, SFTConfig, load_sft_config)
    if isinstance(config, int):
        return config
    keep_local_ray_on_loopback(config.trainer.nnodes)
    if use_writable_dirs_or_exit() is not None:
        return 2
    from verl.data.row_scan import ScanWorkerDied
    from verl.data.sft_dataset import SFTDataError
    from verl.models.loading import ModelLoadError
    from verl.single_controller.ray.base import WorkerDiedError
    from verl.trainer.ray_setup import SetupError
    from verl.utils.logger.tracker import LoggerStartError

    trainer = config.trainer
    where = (trainer.find_last_checkpoint, trainer.load_checkpoint_path)  # where the same command starts again
    try:
        run_sft(config)
    # a ConfigError: one that only running finds
    except (
        ConfigError,
        SFTDataError,
        ScanWorkerDied,
        CheckpointFolderError,
        LoggerStartError,
        SetupError,
        ModelLoadError,
    ) as err:
        print(
            f"{'Config error' if isinstance(err, ConfigError) else 'Error'}: {user_error_message(err)}",
            file=sys.stderr,
        )
        if getattr(err, "checkpointed", False):  # a row failing mid-run, after its step was saved: as RL says
            print(resume_hint(trainer.save_checkpoint_path, *where), file=sys.stderr)
            return 1  # as RL's exit for a row that fails once training runs (2: refused before any step)
        return 2
    except CheckpointSaveError as err:  # disk full or unwritable: the previous checkpoint is intact and latest
        print(f"Error: {err}", file=sys.stderr)
        return 1
    except WorkerDiedError as err:  # kill -9, the OOM killer
        print(f"Error: {err}\n{resume_hint(trainer.save_checkpoint_path, *where)}", file=sys.stderr)
        return 1
    except TrainingInterrupted as err:  # preemption or Ctrl-C: the workers are gone, the checkpoint is on disk
        return err.report(trainer.save_checkpoint_path, *where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
