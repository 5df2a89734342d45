# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The driver's checkpoint bookkeeping: latest and best checkpoints, and which to delete.
Each `global_step_N/` under trainer.save_checkpoint_path holds the roles (`actor/`, `critic/`; `ref/` when
algorithm.ref_sync_steps moves the reference), the dataloader state and `trainer_state.json`;
`checkpoint_tracker.json` names the latest and best steps and is replaced atomically, last, so a crash mid-save never
names a half-written checkpoint. The tracker's latest is what a run resumes from: a newer folder is an interrupted
save's or one of a run that started over or went back to an earlier step (it is replaced when the run gets there)."""

import copy
import json
import logging
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from verl.utils.checkpoint.integrity import damage, write_record
from verl.utils.files import atomic_write
from verl.utils.hub import safetensors_shapes, weights_fingerprint


if TYPE_CHECKING:
    from verl.models.config import LoraConfig


class SaveSettings(Protocol):
    """What the checkpoint plan reads of a run's trainer settings (verl.trainer.config's BaseTrainerConfig, which
    imports this module to check trainer.load_checkpoint_path)."""

    save_freq: int
    save_checkpoint_path: str


logger = logging.getLogger(__name__)

TRACKER_FILE = "checkpoint_tracker.json"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
# Keys of EasyR1's tracker (same file name, checkpoints in its own per-rank format).
EASYR1_TRACKER_KEYS = frozenset({"best_global_step", "best_val_reward_score", "last_global_step", "last_actor_path"})


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written; the previous one is intact and still the latest."""


@dataclass
class CheckpointTracker:
    last_global_step: int = 0
    best_global_step: int | None = None
    best_val_score: float | None = None
    val_scores: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, save_root: str) -> "CheckpointTracker | None":
        path = os.path.join(save_root, TRACKER_FILE)
        if not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            problem = None if isinstance(data, dict) else f"a JSON {type(data).__name__}, not an object"
        except json.JSONDecodeError as err:
            problem = str(err)
        if problem is not None:
            raise ValueError(
                f"Checkpoint tracker '{path}' is corrupt ({problem}); delete it (the run then finds its latest "
                "complete step), or set trainer.save_checkpoint_path to another directory."
            )
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if not unknown:
            return cls(**data)
        if set(unknown) <= EASYR1_TRACKER_KEYS:
            writer = f"was written by EasyR1 (its keys {unknown} are not this trainer's)"
        else:
            writer = f"has keys {unknown} that this trainer never writes, so another tool wrote it"
        raise ValueError(
            f"Checkpoint tracker '{path}' {writer}. The checkpoints beside it are in that tool's format, which this "
            "trainer cannot resume from; set trainer.save_checkpoint_path to a new directory so that they are not "
            "written over (export their weights with that tool's own model merger)."
        )

    @classmethod
    def resumed(cls, save_root: str, step: int) -> "CheckpointTracker":
        """The tracker of a run starting from `step` (0: from scratch): the saved one without the steps after `step`,
        which belong to a run this one replaces."""
        saved = cls.load(save_root) if step > 0 else None
        tracker = cls(last_global_step=step)
        for name, score in sorted((saved.val_scores if saved else {}).items(), key=lambda item: int(item[0])):
            if int(name) <= step:
                tracker.record(int(name), score)
        tracker.last_global_step = step
        return tracker

    def save(self, save_root: str) -> None:
        os.makedirs(save_root, exist_ok=True)
        atomic_write(os.path.join(save_root, TRACKER_FILE), lambda f: json.dump(asdict(self), f, indent=2))

    def record(self, step: int, val_score: float | None) -> None:
        self.last_global_step = step
        if val_score is not None:
            self.val_scores[str(step)] = val_score
            # a NaN score (SFT's val/loss of a diverged run) is never the best: as the first one, no later beat it
            if math.isfinite(val_score) and (self.best_val_score is None or val_score > self.best_val_score):
                self.best_val_score, self.best_global_step = val_score, step


def step_dir(save_root: str, step: int) -> str:
    return os.path.join(save_root, f"global_step_{step}")


def saved_steps(save_root: str) -> list[int]:
    if not os.path.isdir(save_root):
        return []
    return sorted(int(m.group(1)) for name in os.listdir(save_root) if (m := STEP_DIR.match(name)))


def is_complete(path: str) -> bool:
    """A resumable checkpoint: the actor's directory (renamed into place once written) and the trainer state
    (written after every worker's part)."""
    return os.path.isdir(os.path.join(path, "actor")) and os.path.isfile(os.path.join(path, "trainer_state.json"))


def find_last_checkpoint(save_root: str) -> str | None:
    """The checkpoint under `save_root` to resume from, or None when there is none.
    Normally the tracker's step; where it is damaged or gone, the newest complete and intact one before it; without a
    tracker the newest complete and intact global_step_N, so a run never restarts from 0 over existing checkpoints
    (each with a warning). If none is complete that is an error."""
    steps = saved_steps(save_root)
    complete = [step for step in steps if is_complete(step_dir(save_root, step))]
    tracker = CheckpointTracker.load(save_root)
    named = tracker.last_global_step if tracker is not None else None
    if not complete:
        if not steps:
            return None
        names = ", ".join(f"global_step_{step}" for step in steps)
        model_only = all(_weights_only(step_dir(save_root, step)) for step in steps)
        one = len(steps) == 1
        interrupted = f"{'lacks' if one else 'lack'} an actor directory or trainer_state.json (interrupted saves?)"
        reason = f"{'holds' if one else 'hold'} {MODEL_ONLY}" if model_only else interrupted
        raise RuntimeError(
            f"Cannot resume from '{save_root}': {names} {reason}. Start a new run in another "
            "trainer.save_checkpoint_path, or set trainer.find_last_checkpoint=false to start over here (the step "
            f"directories are overwritten){_from_weights(step_dir(save_root, steps[-1]))}."
        )
    before_named = [step for step in complete if named is None or step <= named]
    intact = _intact_steps(save_root, before_named or complete)
    if not intact:
        raise RuntimeError(
            f"Cannot resume from '{save_root}': every complete checkpoint is damaged (see the warnings above). "
            "Restore the files from a copy, start a new run in another trainer.save_checkpoint_path, or set "
            "trainer.find_last_checkpoint=false to start over here (the step directories are overwritten)."
        )
    newest = intact[-1]
    tracker_path = os.path.join(save_root, TRACKER_FILE)
    if named is None:
        logger.warning("No checkpoint tracker at %s; resuming from global_step_%d.", tracker_path, newest)
    elif newest != named:
        logger.warning(
            "Checkpoint tracker %s names step %d, which is not a complete and intact checkpoint; resuming from "
            "global_step_%d.",
            tracker_path,
            named,
            newest,
        )
    if named is not None and (later := [step for step in steps if step > newest]):
        logger.warning(
            "%s: later than the run's latest checkpoint (an interrupted save's, or a run's that started over or went "
            "back to an earlier step); not resumed from, and replaced when this run gets there.",
            ", ".join(f"global_step_{step}" for step in later),
        )
    return step_dir(save_root, newest)


def _weights_only(path: str) -> bool:
    """Whether the step at `path` is a save_model_only checkpoint: its actor's saved state has no optimizer (an
    interrupted full save either has no saved state yet, or has the optimizer's without trainer_state.json)."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        keys = FileSystemReader(os.path.join(path, "actor")).read_metadata().state_dict_metadata
    except Exception:  # no .metadata: the save did not get that far
        return False
    return not any(key.startswith("optimizer.") for key in keys)


def _intact_steps(save_root: str, complete: list[int]) -> list[int]:
    """`complete` up to its newest step matching its integrity record; damaged steps are warned about, left on disk."""
    for position, step in reversed(list(enumerate(complete))):
        problem = damage(step_dir(save_root, step))
        if problem is None:
            return complete[: position + 1]
        logger.warning(
            "Checkpoint global_step_%d is damaged: %s; it is skipped (left on disk until this run saves past it, "
            "which replaces it: copy it elsewhere now to restore its files).",
            step,
            problem,
        )
    return []


MODEL_ONLY = (
    "model weights only (trainer.save_model_only=true): no optimizer, data loader or trainer state to resume from"
)


def _from_weights(path: str) -> str:
    """The hint to start a new run from a checkpoint's weights, where it has an actor."""
    from verl.models.config import export_advice

    actor = os.path.join(path, "actor")
    if not os.path.isdir(actor):
        return ""
    return f"; to start a new run from its weights, {export_advice(actor, 'them', 'set worker.actor.model.model_path to')}"


def resume_hint(save_root: str, find_last: bool = True, explicit: str | None = None) -> str:
    """After a run stopped: where running the same command again starts (trainer.find_last_checkpoint `find_last`,
    trainer.load_checkpoint_path `explicit`), and the latest checkpoint under `save_root` when that is elsewhere."""
    try:
        latest = find_last_checkpoint(save_root)
    except (RuntimeError, ValueError) as err:  # weights-only, interrupted or damaged saves; another tool's tracker
        if find_last and explicit is None:
            return f"Running the same command again does not resume: {err}"
        latest = None
    if explicit is not None:
        if not os.path.isdir(explicit):  # removed since the run started (trainer.save_limit)
            gone = f"trainer.load_checkpoint_path={explicit} no longer exists (trainer.save_limit removed it)"
            where = f"set it to the latest checkpoint, {latest}" if latest else "start over"
            return f"Running the same command again fails: {gone}; to resume, {where}."
        again = f"Running the same command again starts from trainer.load_checkpoint_path={explicit} again"
        if latest is None or os.path.normpath(latest) == os.path.normpath(explicit):
            return f"{again}."
        return f"{again}; to resume, set it to the latest checkpoint, {latest}."
    if not find_last:
        later = (
            f"; the latest checkpoint is {latest} (resume from it with find_last_checkpoint=true)" if latest else ""
        )
        return f"With trainer.find_last_checkpoint=false running the same command again starts over{later}."
    if latest is None:
        return "No checkpoint of this run was saved: running the same command again starts over."
    return f"The latest checkpoint is {latest}: running the same command again resumes from it."


def resume_path(load_checkpoint_path: str | None, find_last: bool, save_root: str) -> str | None:
    """The checkpoint a run starts from: the explicit path (an error if damaged or not resumable), else with
    find_last the newest complete and intact one."""
    if load_checkpoint_path is None:
        return find_last_checkpoint(save_root) if find_last else None
    # the run's own tracker, whose scores up to the step it keeps (`CheckpointTracker.resumed`): a corrupt one or
    # another tool's stopped the run with a traceback once its workers had loaded the checkpoint
    CheckpointTracker.load(save_root)
    problem = damage(load_checkpoint_path)
    if problem is not None:
        raise RuntimeError(
            f"trainer.load_checkpoint_path={load_checkpoint_path!r} is damaged: {problem}. Restore it from a copy, "
            "or point trainer.load_checkpoint_path at an earlier global_step_N."
        )
    if not is_complete(load_checkpoint_path):
        # a save killed after the actor's part (before trainer_state.json) was called a save_model_only checkpoint
        if _weights_only(load_checkpoint_path):
            problem = f"it holds {MODEL_ONLY}{_from_weights(load_checkpoint_path)}"
        else:
            has_actor = os.path.isdir(os.path.join(load_checkpoint_path, "actor"))
            missing = "trainer_state.json" if has_actor else "an actor directory"
            problem = f"it lacks {missing} (an interrupted save?); point it at an earlier global_step_N"
        raise RuntimeError(f"Cannot resume from trainer.load_checkpoint_path={load_checkpoint_path!r}: {problem}.")
    saved_step = _saved_step(load_checkpoint_path)
    if saved_step is not None and saved_step != step_of(load_checkpoint_path):
        raise RuntimeError(
            f"trainer.load_checkpoint_path={load_checkpoint_path!r} holds the state after step {saved_step} "
            f"(its trainer_state.json), not after step {step_of(load_checkpoint_path)}: the folder was renamed, and "
            f"the run would count its steps from the wrong one. Name it global_step_{saved_step}."
        )
    return load_checkpoint_path


def read_trainer_state(path: str) -> dict[str, Any]:
    """The trainer_state.json of the checkpoint at `path`; {} where it is missing, unreadable or not an object."""
    try:
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _saved_step(path: str) -> int | None:
    """The step a checkpoint's trainer_state.json records (None where it cannot be read)."""
    step = read_trainer_state(path).get("global_step")
    return step if isinstance(step, int) else None


def started_from_other_weights(path: str, model_path: str | None) -> bool:
    """Whether `model_path` holds other weights than the run of the checkpoint at `path` started from (its
    trainer_state.json's `model_fingerprint`, `weights_fingerprint`); False where either is unknown."""
    recorded = read_trainer_state(path).get("model_fingerprint")
    current = weights_fingerprint(model_path) if recorded else None
    return current is not None and current != recorded


def _check_same_weights(path: str, model_path: str | None, adapters: bool, model_key: str, role: str) -> None:
    """The actor's model_path against the weights its run started from (`weights_fingerprint`, in trainer_state.json
    as `model_fingerprint`): LoRA adapters on other base weights are refused (they would train on as if nothing
    changed); a full model resumes its trained weights, with a warning that the reference is this model_path's."""
    if role != "actor" or not started_from_other_weights(path, model_path):
        return
    if adapters:
        raise RuntimeError(
            f"Cannot resume from {path}: its LoRA adapters were trained on other weights than {model_key}.model_path="
            f"{model_path} holds (a model of the same shapes: another version or fine-tune?). Point it at the base "
            "model the run started from, or start a new run in another trainer.save_checkpoint_path."
        )
    reference = (  # SFT (worker.model) has none: its resume said so all the same
        ", but a fixed reference model (the KL term) is this model_path's" if model_key != "worker.model" else ""
    )
    logger.warning(
        "%s.model_path=%s holds other weights than the run saved in %s started from: the run resumes its own trained "
        "weights%s.",
        model_key,
        model_path,
        path,
        reference,
    )


def check_written_by(path: str, trainer: str) -> None:
    """RuntimeError before any worker starts where the checkpoint at `path` was written by the other trainer (`trainer`
    is "rl" or "sft"; its trainer_state.json says so, or for older checkpoints the state RL alone keeps, `kl_ctrl`).
    RL resumed from an SFT checkpoint failed after the workers loaded it (KeyError 'kl_ctrl'); SFT resumed an RL one
    silently, with RL's step count and optimizer state."""
    from verl.models.config import export_advice

    state = read_trainer_state(path)
    written = state.get("trainer") or ("rl" if "kl_ctrl" in state else "sft" if "batch_size" in state else trainer)
    if written != trainer:
        names = {"rl": "an RL", "sft": "an SFT"}
        raise RuntimeError(
            f"Cannot resume from {path}: it is {names[written]} run's checkpoint, and this is {names[trainer]} run. "
            f"To start from its weights, {export_advice(os.path.join(path, 'actor'), 'them', 'point the model at')}"
            "; or start this run in another trainer.save_checkpoint_path."
        )


SHAPE_KEYS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
)
"""The text config's keys that fix the shapes of a model's weights: a checkpoint of another model cannot be loaded."""


def check_matches_run(
    path: str, model_path: str | None, lora: "LoraConfig", model_key: str = "worker.actor.model", role: str = "actor"
) -> None:
    """The checkpoint at `path` holds what this run trains, else RuntimeError before any worker starts: LoRA
    adapters of the same `lora` settings (rank, alpha, targets: other adapters would be dropped, rescaled or fail to
    load) or all weights as the run does, and a model of the same shapes as `model_path` (its config.json, local or
    in the Hub cache, against the copy the checkpoint keeps; unchecked where either is missing). `model_key` is the
    config section naming the model (the RL actor's or critic's, or SFT's worker.model); `role` the checkpoint's
    folder for it (actor, critic)."""
    from verl.models.config import read_model_config
    from verl.models.lora import changed_lora_settings, read_adapter_config

    weights = os.path.join(path, role, "huggingface")
    adapters = read_adapter_config(os.path.join(path, role)) is not None
    if adapters != (lora.rank > 0):
        held = "LoRA adapters only" if adapters else "a full model (no LoRA adapters)"
        run = "trains LoRA adapters" if lora.rank > 0 else "trains all weights"
        raise RuntimeError(
            f"Cannot resume from {path}: its {role} holds {held}, but this run {run}. Set {model_key}.lora as "
            "the checkpoint's run did, or start a new run in another trainer.save_checkpoint_path."
        )
    if adapters and (changed := changed_lora_settings(os.path.join(path, role), lora)):
        raise RuntimeError(
            f"Cannot resume from {path}: its LoRA adapters were trained with other {model_key}.lora settings "
            f"({'; '.join(changed)}). Set them as the checkpoint's run did, or start a new run in another "
            "trainer.save_checkpoint_path."
        )
    saved, wanted = read_model_config("checkpoint", weights), read_model_config(model_key, model_path)
    if saved is not None and wanted is not None:
        _check_same_shapes(path, model_path, model_key, saved, wanted)
    _check_same_weights(path, model_path, adapters, model_key, role)


def _check_same_shapes(path: str, model_path: str | None, model_key: str, saved: dict, wanted: dict) -> None:
    saved_text, wanted_text = saved.get("text_config") or saved, wanted.get("text_config") or wanted
    differ = [
        f"{key} {saved_text[key]} there, {wanted_text[key]} here"
        for key in SHAPE_KEYS
        if key in saved_text and key in wanted_text and saved_text[key] != wanted_text[key]
    ]
    if differ:
        raise RuntimeError(
            f"Cannot resume from {path}: it was trained from another model than {model_key}.model_path="
            f"{model_path} ({'; '.join(differ)}). Point {model_key}.model_path at the checkpoint's model, or "
            "start a new run in another trainer.save_checkpoint_path."
        )


def warn_if_data_changed(state: dict, rows: int, path: str, order: dict[str, Any] | None = None) -> None:
    """On resume: warn when the training data has another number of rows than when `path` was saved (its
    trainer_state.json's `train_rows`), or, given `order` (SFT's batch size, seed and shuffle, which fix where in
    its epoch a step is), another of those: the saved position in the epoch then points into another order."""
    saved = state.get("train_rows")
    if saved is not None and saved != rows:
        logger.warning(
            "The training data has %d rows; %s was saved with %d. The run resumes at its step, but the current "
            "epoch's order is not the saved one: some of its rows may come twice and others not at all.",
            rows,
            path,
            saved,
        )
    if changed := [
        f"data.{key}={value} ({state[key]} there)"
        for key, value in (order or {}).items()
        if state.get(key, value) != value
    ]:
        logger.warning(
            "%s: %s was saved with other settings. The run resumes at its step, but the current epoch's order is not "
            "the saved one: some of its rows may come twice and others not at all.",
            ", ".join(changed),
            path,
        )


RESUME_FREE_KEYS = ("trainer.", "data.filter_overlong_prompts_workers")
"""Settings a resumed run changes without a word: its bookkeeping (length, paths, loggers, save and validation
schedules, the processes of the prompt scan), but for the trainer's keys that change what it trains
(`RESUME_TOLD_TRAINER_KEYS`)."""

RESUME_TOLD_TRAINER_KEYS = ("trainer.critic_warmup", "trainer.device", "trainer.nnodes", "trainer.n_gpus_per_node")


def saved_settings(config: Any) -> dict[str, Any]:
    """The run's settings as trainer_state.json keeps them (`settings`): dotted key of each field -> value, as JSON
    reads it back (a free-form mapping, such as a function's keyword arguments, is one value), secrets masked."""
    from dataclasses import is_dataclass

    from verl.utils.config import config_to_dict

    def leaves(node: Any, values: dict[str, Any], prefix: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for item in fields(node):
            value = getattr(node, item.name)
            if is_dataclass(value):
                found.update(leaves(value, values[item.name], f"{prefix}{item.name}."))
            else:
                found[f"{prefix}{item.name}"] = values[item.name]
        return found

    return json.loads(json.dumps(leaves(config, config_to_dict(config), ""), default=str))


def warn_if_settings_changed(state: dict, config: Any, path: str, told: tuple[str, ...] = ()) -> None:
    """On resume: one warning naming the settings (not the bookkeeping `RESUME_FREE_KEYS`, nor the keys `told`, which
    have warnings of their own or follow another key) whose value differs from the run that saved `path`, as kept in
    its trainer_state.json (`settings`; none in checkpoints of before they were kept). Keys one version has and the
    other does not are left out."""
    saved = state.get("settings")
    if not isinstance(saved, dict):
        return
    now = saved_settings(config)
    changed = [
        f"{key}={_short(now[key])} ({_short(value)} there)"
        for key, value in saved.items()
        if key in now
        and now[key] != value
        and key not in told
        and (not key.startswith(RESUME_FREE_KEYS) or key in RESUME_TOLD_TRAINER_KEYS)
    ]
    if changed:
        logger.warning(
            "Resuming from %s with settings other than the run that saved it: %s. The weights, optimizer state and "
            "data position are the saved ones; the run goes on with the settings it has now.",
            path,
            "; ".join(changed),
        )


def _short(value: Any) -> str:
    """A value in a line: its middle left out past 80 characters (two paths differ at their end)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else f"{text[:38]}...{text[-39:]}"


def step_of(path: str) -> int:
    match = STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    if match is None:
        raise ValueError(f"Checkpoint path '{path}' must end with global_step_N.")
    return int(match.group(1))


def nothing_to_train(resumed: str | None, total_steps: int, totals: str) -> bool:
    """True (with a warning) when the checkpoint a run resumes from (`resumed`) is already at its last step, as when a
    finished run's command runs again; `totals` names the keys that set `total_steps`."""
    if resumed is None or step_of(resumed) < total_steps:
        return False
    logger.warning(
        "Nothing to train: the run resumes from %s, at step %d, and trains %d step(s) in all (%s). Raise them to "
        "train further, or set trainer.save_checkpoint_path to another folder to start a new run.",
        resumed,
        step_of(resumed),
        total_steps,
        totals,
    )
    return True


def save_step(
    save_root: str,
    step: int,
    tracker: CheckpointTracker,
    score: float | None,
    write: Callable[[str], None],
    save_limit: int = -1,
    more_to_come: bool = False,
) -> CheckpointTracker:
    """Save `step` as global_step_N (RL and SFT): `write(path)` writes its files, then their integrity record, then
    the tracker names it the latest. A storage failure (disk full, unwritable) removes the partial files and raises
    CheckpointSaveError, the previous checkpoint intact and latest. Then the folders between the previous latest and
    `step` go (a replaced run's or an interrupted save's), and the checkpoints past `save_limit`, and with
    `more_to_come` a warning says when the disk has no room for another. Returns the tracker naming the step."""
    path = step_dir(save_root, step)
    if os.path.isdir(path) and step != tracker.last_global_step:
        shutil.rmtree(path)  # left by an interrupted save or a run resumed from an earlier step: not a mix
    saved = copy.deepcopy(tracker)
    saved.record(step, score)
    try:
        write(path)
        write_record(path)
        saved.save(save_root)
    except Exception as err:
        from verl.utils.checkpoint.fsdp_checkpoint_manager import storage_error

        cause = storage_error(err)
        if cause is None:
            raise
        discard_failed_save(save_root, step, tracker)
        last = tracker.last_global_step
        previous = f"{step_dir(save_root, last)} is intact and still the latest" if last else "no earlier checkpoint"
        elsewhere = (
            f"resume in a writable directory: trainer.save_checkpoint_path=<it> with "
            f"trainer.load_checkpoint_path={step_dir(save_root, last)}"
            if last
            else "set trainer.save_checkpoint_path to a writable directory and run again"
        )
        raise CheckpointSaveError(
            f"Could not save the checkpoint of step {step}: {cause.strerror or cause} ({cause.filename or path}); "
            f"{previous}. Free space and run again{' to resume' if last else ''}, or {elsewhere}."
        ) from err
    for passed in saved_steps(save_root):  # a replaced run's (or an interrupted save's) between the two latest
        if tracker.last_global_step < passed < step:
            shutil.rmtree(step_dir(save_root, passed), ignore_errors=True)
    remove_obsolete_checkpoints(save_root, save_limit, saved)
    logger.info("Saved checkpoint %s", path)
    if more_to_come:
        warn_if_no_room(save_root, directory_bytes(path), f"Checkpoint {path}")
    return saved


def remove_obsolete_checkpoints(save_root: str, save_limit: int, tracker: CheckpointTracker) -> list[int]:
    """Keep the newest `save_limit` checkpoints with weights, the best one, the tracker's latest and the newest one a
    run can resume from (`is_complete`: weights-only saves after trainer.save_model_only was turned on would push it
    out); return the removed steps. Leftovers of interrupted saves never count towards the limit (removed once older
    than the latest); folders after the latest (an earlier run's this one replaces) are left until the run gets
    there."""
    if save_limit <= 0:
        return []
    steps = [step for step in saved_steps(save_root) if step <= tracker.last_global_step]
    usable = [step for step in steps if os.path.isdir(os.path.join(step_dir(save_root, step), "actor"))]
    keep = set(usable[-save_limit:]) | {tracker.last_global_step}
    resumable = [step for step in usable if is_complete(step_dir(save_root, step))]
    keep.update(resumable[-1:])
    if tracker.best_global_step is not None:
        keep.add(tracker.best_global_step)
    removed = [step for step in steps if step not in keep]
    for step in removed:
        shutil.rmtree(step_dir(save_root, step), ignore_errors=True)
    return removed


def discard_failed_save(save_root: str, step: int, tracker: CheckpointTracker) -> None:
    """Remove what a failed save of `step` left, unless the tracker names that step (then it is an earlier complete
    save the workers replace atomically)."""
    if step != tracker.last_global_step:
        shutil.rmtree(step_dir(save_root, step), ignore_errors=True)


def directory_bytes(path: str) -> int:
    """The size of the files under `path`."""
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def saved_parameters(model_path: str) -> int | None:
    """Parameters in the safetensors files of a model directory, or of a Hub id already in the local cache (read from
    the files' headers, no tensor); None where there are none to read."""
    return sum(math.prod(shape) for shape in safetensors_shapes(model_path).values()) or None


def checkpoint_size_estimate(models: list[tuple[str, int]], save_model_only: bool) -> int | None:
    """About how many bytes a checkpoint takes: each trained model's (path, bytes per parameter) parameters, three
    times over with the optimizer state (AdamW's two moments); None when a model's parameters cannot be counted."""
    counts = [saved_parameters(path) for path, _ in models]
    if None in counts:
        return None
    return sum(count * size * (1 if save_model_only else 3) for count, (_, size) in zip(counts, models))


def checkpoint_plan(trainer: SaveSettings, size: int | None = None, model_only: bool = False) -> str:
    """One console line: where the checkpoints of a run with `trainer` settings (RL or SFT) go, what they hold, when,
    and about how large each is (`size`, bytes)."""
    when = f"every {trainer.save_freq} steps and at the end" if trainer.save_freq > 0 else "at the end"
    what = "model weights only" if model_only else "model, optimizer and data-loader state"
    about = f"; about {size / 2**30:.2f} GiB each" if size else ""
    return f"Checkpoints go to {trainer.save_checkpoint_path} ({what}, {when}{about})."


def log_checkpoint_plan(trainer: SaveSettings, size: int | None, model_only: bool = False) -> None:
    """The checkpoint plan's line, and a warning when one checkpoint would not fit in the free space where it goes."""
    logger.info(checkpoint_plan(trainer, size, model_only))
    warn_if_no_room(trainer.save_checkpoint_path, size)


def warn_if_no_room(save_root: str, size: int | None, what: str = "One checkpoint of this run") -> None:
    """Log `space_warning` when a checkpoint of `size` bytes (None: unknown, nothing said) would not fit."""
    warning = size and space_warning(save_root, size, what)
    if warning:
        logger.warning(warning)


def space_warning(save_root: str, size: int, what: str) -> str | None:
    """A warning when the disk of `save_root` has less than `size` bytes free: `what` (the next checkpoint, said as
    the caller knows its size) would not fit."""
    existing = os.path.abspath(save_root)
    while not os.path.exists(existing):  # a folder not made yet: the disk of its nearest existing parent
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if free >= size:
        return None
    return (
        f"{what} takes {size / 2**30:.2f} GiB, and {free / 2**30:.2f} GiB are free at {save_root}: the next save would "
        "fail (the run then stops, its latest checkpoint intact). Free space now, lower trainer.save_limit, or set "
        "trainer.save_checkpoint_path to a larger disk."
    )
