# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Save and restore one FSDP2 role (model, optimizer, LR schedule, RNG, extra state) with torch.distributed.checkpoint,
loadable on any number of ranks. Writes go to `<path>.tmp`, renamed once all ranks have finished, so a crash mid-save
never leaves a complete-looking directory. `huggingface/` beside the shards holds config and tokenizer."""

import contextlib
import copy
import dataclasses
import logging
import os
import shutil
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from verl.models.lora import is_adapter_param, read_adapter_config, save_adapter_config
from verl.utils import device, quiet
from verl.utils.files import sync_folder


logger = logging.getLogger(__name__)

HF_SUBDIR = "huggingface"
"""Subdirectory with the Hugging Face config and tokenizer/processor, for model_merger and inspection."""

_METADATA_FILE = ".metadata"
_TRAINER_KEY = "trainer_state"


@dataclasses.dataclass
class _PickledState:
    """A value DCP stores as one pickled blob, not flattened into keys (LR schedule, extra state)."""

    value: Any = None


def _rng_key(rank: int) -> str:
    return f"rng_state_rank_{rank}"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _dcp(method: Any, state: dict[str, Any], path: str) -> None:
    """dcp.save or dcp.load of `state` at `path`, by every rank of the group or, outside one, by this process alone
    (torch's warning that it assumes one process silenced only then: the filter is process-wide while it lasts)."""
    if _distributed():
        method(state, checkpoint_id=path)
        return
    with quiet.one_process_checkpoint_io():
        method(state, checkpoint_id=path, no_dist=True)


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    if _distributed():
        dist.barrier()


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, read-only or unwritable path); the previous one is intact."""


def _fresh_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def storage_error(err: BaseException) -> OSError | None:
    """The OSError behind a failed write: raised directly, chained, in a CheckpointException's failures (DCP) or as
    the cause of a Ray task error (a worker's failure seen by the driver)."""
    seen: set[int] = set()
    stack = [err]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # ray.exceptions.RayTaskError: the worker's own exception
        if isinstance(cause, BaseException):
            stack.append(cause)
            continue
        if isinstance(current, OSError):
            return current
        stack.extend([current.__cause__, current.__context__])
        for failure in getattr(current, "failures", {}).values():  # DCP: rank -> (exception, stack summary)
            stack.append(failure[0] if isinstance(failure, tuple) else failure)
    return None


def _probe_write(directory: str, size: int = 1 << 20) -> OSError | None:
    """Try writing `size` bytes in `directory`: the OSError a full disk or an unwritable path gives, else None."""
    probe = os.path.join(directory, f".write_probe.{os.getpid()}")  # one per rank: ranks probe at the same time
    try:
        with open(probe, "wb") as f:
            f.write(bytes(size))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        return err
    finally:
        with contextlib.suppress(OSError):
            os.remove(probe)
    return None


def _attempt(run: bool, fn: Any, directory: str) -> OSError | None:
    """Call fn() when `run`; return the storage error it raised (others propagate). torch's zip writer reports a full
    disk as a RuntimeError, so a failure counts as a storage error too when a probe write in `directory` fails."""
    if not run:
        return None
    try:
        fn()
    except BaseException as err:  # DCP raises CheckpointException, a BaseException
        storage = storage_error(err)
        if storage is None and not isinstance(err, KeyboardInterrupt):
            storage = _probe_write(directory)
        if storage is None:
            raise
        return storage
    return None


def _any_failed(error: OSError | None) -> bool:
    """Whether any rank hit a storage error (collective: every rank calls it at the same point)."""
    failed = torch.tensor([0 if error is None else 1])
    if _distributed():
        dist.all_reduce(failed, op=dist.ReduceOp.MAX)  # a CPU tensor: the gloo part of the process group
    return bool(failed.item())


def has_checkpoint(path: str) -> bool:
    """True when `path` holds a complete checkpoint (its DCP metadata exists)."""
    return os.path.isfile(os.path.join(path, _METADATA_FILE))


def resume_schedule(scheduler: Any, saved: dict[str, Any], path: str) -> None:
    """Move `scheduler` (a LambdaLR of this run's config) to the saved state's step, setting the optimizer's lr to its
    value there; an INFO line says when the saved schedule differs (a run extended, or another lr)."""
    step = saved["last_epoch"]
    scheduler.last_epoch, scheduler._step_count = step, saved.get("_step_count", step + 1)
    lrs = [base * fn(step) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs):
        group["lr"] = lr
    scheduler._last_lr = lrs
    own = [getattr(fn, "__dict__", {}) for fn in scheduler.lr_lambdas]
    if saved.get("base_lrs") != scheduler.base_lrs or [dict(d or {}) for d in saved.get("lr_lambdas", [])] != own:
        if _rank() == 0:
            logger.info(
                "The LR schedule of %s (lr %s, %s) differs from this run's (lr %s, %s): from step %d on the lr is "
                "this run's config's (%s).",
                path,
                saved.get("base_lrs"),
                saved.get("lr_lambdas"),
                scheduler.base_lrs,
                own,
                step,
                lrs,
            )


class FSDPCheckpointManager:
    """Checkpoints of one role: an FSDP2 model and optionally its optimizer, LR scheduler, tokenizer and processor.
    `save` and `load` are collective. Tokenizer and processor are written, never read. LR schedule and extra state
    (the same on every rank) are saved once, RNG states per rank (a rank missing from the checkpoint keeps its own).
    A load restores the optimizer's state and the schedule's step; its settings (lr, weight decay, betas, the
    schedule's shape and length) stay this run's, so a resumed run with more steps or another lr follows its config."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        tokenizer: Any = None,
        processor: Any = None,
        adapter_only: bool = False,
    ) -> None:
        self.model, self.optimizer, self.lr_scheduler = model, optimizer, lr_scheduler
        self.tokenizer, self.processor = tokenizer, processor
        self.adapter_only = adapter_only
        """LoRA: save and load the adapter weights only (the frozen base weights come from the model path)."""

    def _model_part(self, model_state: dict[str, Any]) -> dict[str, Any]:
        if not self.adapter_only:
            return model_state
        return {name: value for name, value in model_state.items() if is_adapter_param(name)}

    def save(self, path: str, extra_state: dict[str, Any] | None = None, save_model_only: bool = False) -> None:
        """Write the checkpoint to `path` (replacing an older one) via `<path>.tmp` and a rename. `save_model_only`:
        weights only (no resuming). `extra_state`: any picklable dict, returned by `load`. A storage failure on any rank
        raises `CheckpointWriteError` on every rank, staging removed, `path` untouched."""
        path = os.path.abspath(path)
        staging = path + ".tmp"
        parent = os.path.dirname(path)
        error = _attempt(_rank() == 0, lambda: _fresh_dir(staging), parent)
        if not _any_failed(error):
            state = self._state_to_save(extra_state, save_model_only)
            error = _attempt(True, lambda: _dcp(dcp.save, state, staging), parent)
        if not _any_failed(error):
            error = _attempt(_rank() == 0, lambda: self._save_hf_files(staging), parent)
        if _any_failed(error):
            if _rank() == 0:
                shutil.rmtree(staging, ignore_errors=True)  # free the space a partial write took
            _barrier()
            reason = f"{error.strerror or error}" if error is not None else "another rank failed to write its part"
            raise CheckpointWriteError(error.errno if error is not None else 0, f"Could not write {path!r}: {reason}")
        if _rank() == 0:
            old = path + ".old"
            shutil.rmtree(old, ignore_errors=True)
            if os.path.exists(path):
                os.rename(path, old)
            os.rename(staging, path)
            sync_folder(parent)  # the rename reaches the disk before the old copy goes
            shutil.rmtree(old, ignore_errors=True)
        _barrier()
        logger.debug("Saved checkpoint to %s.", path)  # the driver logs the step's save once

    def _live_state(self, with_optimizer: bool) -> dict[str, Any]:
        """The model's (with_optimizer: and the optimizer's) state dicts, which DCP writes from or loads into."""
        if not with_optimizer:
            return {"model": self._model_part(get_model_state_dict(self.model))}
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": self._model_part(model_state), "optimizer": optim_state}

    def _state_to_save(self, extra_state: dict[str, Any] | None, save_model_only: bool) -> dict[str, Any]:
        state = self._live_state(with_optimizer=not save_model_only and self.optimizer is not None)
        if not save_model_only:
            scheduler = self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None
            state[_TRAINER_KEY] = _PickledState({"lr_scheduler": scheduler, "extra_state": dict(extra_state or {})})
            state[_rng_key(_rank())] = _PickledState(device.get_rng_state())
        return state

    def _save_hf_files(self, path: str) -> None:
        """The model's config, generation config and tokenizer/processor in `path`/huggingface (the export's side
        files); a LoRA run's adapter config in `path` itself, so that a merged export there loads as a plain model."""
        hf_dir = os.path.join(path, HF_SUBDIR)
        os.makedirs(hf_dir, exist_ok=True)
        from verl.data.tokenizer import stop_at_turn_end  # transformers: not on the entry modules' import path
        from verl.models.loading import exported_config

        generation_config = copy.deepcopy(getattr(self.model, "generation_config", None))
        stop_at_turn_end(generation_config, self.tokenizer)  # a base's EOS: the trained turns' end too (the merger's)
        config = exported_config(self.model)
        for part in (config, generation_config, self.tokenizer, self.processor):
            if part is not None:
                part.save_pretrained(hf_dir)
        source = getattr(config, "_name_or_path", "")
        if getattr(config, "auto_map", None) and os.path.isdir(source):  # a model of its own code: all of it
            for name in os.listdir(source):
                if name.endswith(".py") and not os.path.exists(os.path.join(hf_dir, name)):
                    shutil.copyfile(os.path.join(source, name), os.path.join(hf_dir, name))
        if self.adapter_only:
            save_adapter_config(self.model, path)

    def load(self, path: str, model_only: bool = False) -> dict[str, Any]:
        """Restore the state at `path` and return its extra_state ({} if none); `model_only` reads only the weights
        (resuming an optimizer from a save_model_only checkpoint is an error)."""
        path = os.path.abspath(path)
        if not has_checkpoint(path):
            raise FileNotFoundError(
                f"No checkpoint at {path!r} (missing {_METADATA_FILE}); give a directory written by "
                "FSDPCheckpointManager.save, e.g. .../global_step_N/actor."
            )
        saved_keys = set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)
        load_optimizer = self.optimizer is not None and not model_only
        if load_optimizer and not any(key.startswith("optimizer.") for key in saved_keys):
            raise ValueError(
                f"Checkpoint {path!r} has no optimizer state (it was saved with save_model_only); load it with "
                "model_only=True to take only the weights."
            )
        saved_adapter_only = read_adapter_config(path) is not None
        if saved_adapter_only != self.adapter_only:
            saved = "LoRA adapters only" if saved_adapter_only else "a full model (no LoRA adapters)"
            trains = "LoRA adapters" if self.adapter_only else "all weights"
            raise ValueError(
                f"Checkpoint {path!r} holds {saved}, but this run trains {trains}: set the model's lora settings "
                "(worker.actor.model.lora, or SFT's worker.model.lora) as the checkpoint's run did, or start from a "
                "fresh trainer.save_checkpoint_path."
            )
        state = self._live_state(with_optimizer=load_optimizer)
        fresh = _not_saved(state["optimizer"], saved_keys, path) if load_optimizer else []
        rng_key = _rng_key(_rank())
        if not model_only:  # the pickled parts this checkpoint has
            state.update({key: _PickledState() for key in (_TRAINER_KEY, rng_key) if key in saved_keys})
        _dcp(dcp.load, state, path)
        for place, key, value in fresh:  # what the checkpoint has none of keeps its fresh value
            place[key] = value
        options = StateDictOptions(strict=not self.adapter_only)  # adapters only: the base weights stay as loaded
        if load_optimizer:
            configured = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=options,
            )
            for group, settings in zip(self.optimizer.param_groups, configured):
                group.update(settings)  # the checkpoint's param-group settings give way to this run's config
        else:
            set_model_state_dict(self.model, state["model"], options=options)
        if model_only:
            return {}
        trainer_state = state[_TRAINER_KEY].value if _TRAINER_KEY in state else {}
        scheduler_state = trainer_state.get("lr_scheduler")
        if self.lr_scheduler is not None and scheduler_state is not None:
            resume_schedule(self.lr_scheduler, scheduler_state, path)
        if rng_key in state:
            device.set_rng_state(state[rng_key].value)
        else:
            logger.warning("Checkpoint %s has no RNG state for rank %d; keeping this rank's own.", path, _rank())
        return dict(trainer_state.get("extra_state", {}))


def _not_saved(optim: dict[str, Any], saved_keys: set[str], path: str) -> list[tuple[dict[str, Any], str, Any]]:
    """Take out of `optim` (the optimizer's state dict, which torch fills for every parameter and DCP loads into) what
    the checkpoint has no value for, and return it as (container, key, value) to put back after the load, fresh as in
    the run that saved:
    - parameters no step gave a gradient (a vision tower on text data, its LoRA adapters) have no state; loading them
      failed the resume ("Missing key in checkpoint state_dict");
    - a state entry or param-group setting of another optimizer (optim.strategy or the weights' dtype changed between
      save and resume: BF16AdamW's `compensation` of a bf16 weight, which starts at zero; torch AdamW's `amsgrad`,
      `foreach`, ... settings, which this run's config sets anyway) failed it the same way; the moments and step
      counts both keep are the checkpoint's."""
    prefixes = {key[:i] for key in saved_keys if key.startswith("optimizer.state.") for i in _dots(key)}
    missing = [name for name in optim["state"] if f"optimizer.state.{name}" not in prefixes]
    if missing:
        logger.info(
            "%s has no optimizer state for %d parameter(s) that no step trained (%s%s); they start afresh.",
            path,
            len(missing),
            ", ".join(missing[:3]),
            ", ..." if len(missing) > 3 else "",
        )
    taken = [(optim["state"], name, optim["state"][name]) for name in missing]
    unstepped = set(missing)
    stepped = {name: values for name, values in optim["state"].items() if name not in unstepped}
    entries = [
        (values, key)
        for name, values in stepped.items()
        for key in values
        if f"optimizer.state.{name}.{key}" not in saved_keys
    ]
    settings = [
        (group, key)
        for index, group in enumerate(optim["param_groups"])
        for key in group
        if key != "params" and f"optimizer.param_groups.{index}.{key}" not in saved_keys
    ]
    if entries and _rank() == 0:  # (the param-group settings alone are this run's config's either way: no word)
        logger.warning(
            "%s was saved by another optimizer (optim.strategy or the weights' dtype changed?): it has no %s; they "
            "start afresh, and the moments and step counts are the checkpoint's.",
            path,
            ", ".join(sorted({f"'{key}'" for _, key in entries})),
        )
    taken += [(place, key, place[key]) for place, key in (*entries, *settings)]
    for place, key, _ in taken:
        del place[key]
    return taken


def _dots(key: str) -> list[int]:
    return [i for i, char in enumerate(key) if char == "."]
