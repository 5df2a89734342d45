# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import dataclasses
import json
import logging
import os
import signal
import warnings

import pytest
import torch

from verl.models.config import LoraConfig
from verl.trainer.checkpointing import (
    TRACKER_FILE,
    CheckpointTracker,
    atomic_write,
    check_matches_run,
    check_written_by,
    checkpoint_size_estimate,
    directory_bytes,
    discard_failed_save,
    find_last_checkpoint,
    remove_obsolete_checkpoints,
    resume_hint,
    resume_path,
    save_step,
    saved_parameters,
    saved_settings,
    saved_steps,
    space_warning,
    step_dir,
    step_of,
    warn_if_data_changed,
    warn_if_settings_changed,
)
from verl.trainer.preemption import TrainingInterrupted
from verl.utils.checkpoint.integrity import damage, write_record


def make_steps(root, steps, complete: bool = True):
    for step in steps:
        os.makedirs(os.path.join(step_dir(str(root), step), "actor"))
        if complete:
            (root / f"global_step_{step}" / "trainer_state.json").write_text("{}")


def test_tracker_round_trip_and_best(tmp_path):
    tracker = CheckpointTracker()
    tracker.record(1, 0.2)
    tracker.record(2, 0.5)
    tracker.record(3, 0.4)
    tracker.save(str(tmp_path))
    loaded = CheckpointTracker.load(str(tmp_path))
    assert loaded.last_global_step == 3 and loaded.best_global_step == 2 and loaded.best_val_score == 0.5
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_find_last_checkpoint_takes_the_newest_complete_step(tmp_path, caplog):
    root = str(tmp_path)
    assert find_last_checkpoint(root) is None  # nothing saved yet: a new run
    make_steps(tmp_path, [1, 2])
    make_steps(tmp_path, [3], complete=False)  # step 3 was being written when the run crashed
    tracker = CheckpointTracker()
    tracker.record(2, None)
    tracker.save(root)
    assert find_last_checkpoint(root) == step_dir(root, 2)
    assert "resuming" not in caplog.text

    os.remove(tmp_path / TRACKER_FILE)  # a lost tracker does not restart from step 0
    assert find_last_checkpoint(root) == step_dir(root, 2)
    assert f"No checkpoint tracker at {os.path.join(root, TRACKER_FILE)}; resuming from global_step_2" in caplog.text

    tracker.record(5, None)  # a stale tracker naming a deleted step
    tracker.save(root)
    assert find_last_checkpoint(root) == step_dir(root, 2)
    assert "names step 5" in caplog.text


def test_the_trackers_latest_is_resumed_not_a_later_run_it_replaced(tmp_path, caplog):
    """A run that started over (find_last_checkpoint=false) or went back (load_checkpoint_path) in a folder with
    later checkpoints: those are not resumed from, save_limit does not count or delete them, and the run's own
    scores and best step are not the replaced run's."""
    root = str(tmp_path)
    make_steps(tmp_path, [2, 4, 6, 8])
    old = CheckpointTracker()
    for step, score in ((2, 0.1), (4, 0.9), (6, 0.2), (8, 0.3)):
        old.record(step, score)
    old.save(root)
    tracker = CheckpointTracker.resumed(root, 2)  # trainer.load_checkpoint_path=.../global_step_2
    assert (tracker.last_global_step, tracker.best_global_step, tracker.val_scores) == (2, 2, {"2": 0.1})
    assert CheckpointTracker.resumed(root, 0) == CheckpointTracker()  # starting over keeps nothing of it
    for step, score in ((3, 0.5), (5, 0.4)):  # this run's saves
        tracker = save_step(root, step, tracker, score, lambda path: make_steps(tmp_path, [step_of(path)]), 2)
    # the replaced run's step 4, which this one passed, is gone; its 6 and 8 wait to be replaced
    assert tracker.best_global_step == 3 and saved_steps(root) == [3, 5, 6, 8]
    with caplog.at_level("WARNING"):
        assert find_last_checkpoint(root) == step_dir(root, 5)
    assert "global_step_6, global_step_8: later than the run's latest checkpoint" in caplog.text
    assert resume_hint(root).startswith(f"The latest checkpoint is {step_dir(root, 5)}")


def _saved_state(path, keys) -> None:
    """A DCP checkpoint at `path` holding `keys` (as the actor's save writes them)."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # saved in this one process, as meant
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.save({key: torch.zeros(2) for key in keys}, checkpoint_id=str(path), no_dist=True)


def test_find_last_checkpoint_refuses_only_incomplete_steps(tmp_path):
    make_steps(tmp_path, [4], complete=False)
    _saved_state(tmp_path / "global_step_4" / "actor", ["model.w"])  # save_model_only's
    with pytest.raises(RuntimeError, match="global_step_4 holds model weights only.*trainer.find_last_checkpoint"):
        find_last_checkpoint(str(tmp_path))
    os.makedirs(tmp_path / "global_step_5")
    with pytest.raises(
        RuntimeError, match="global_step_4, global_step_5 lack an actor directory or trainer_state.json"
    ):
        find_last_checkpoint(str(tmp_path))
    # a first full save killed before trainer_state.json was called a save_model_only checkpoint
    other = tmp_path / "other"
    make_steps(other, [1], complete=False)
    _saved_state(other / "global_step_1" / "actor", ["model.w", "optimizer.state.w.exp_avg"])
    with pytest.raises(RuntimeError, match="global_step_1 lacks an actor directory or trainer_state.json"):
        find_last_checkpoint(str(other))


def test_an_explicit_checkpoint_that_cannot_resume_is_refused_before_the_workers_start(tmp_path):
    """Such a checkpoint used to fail in the worker, inside Ray, with a traceback asking for a keyword argument."""
    root = str(tmp_path)
    make_steps(tmp_path, [2], complete=False)  # saved with trainer.save_model_only=true
    actor = tmp_path / "global_step_2" / "actor"
    _saved_state(actor, ["model.w"])
    export = (
        f"export them with `python scripts/model_merger.py --local_dir {actor}`, then set "
        "worker.actor.model.model_path to "
    )
    for explicit in (step_dir(root, 2), None):  # named, or found as the newest
        with pytest.raises(RuntimeError, match=r"holds? model weights only \(trainer.save_model_only=true\)") as error:
            resume_path(explicit, True, root)
        assert export + str(actor / "huggingface") in str(error.value)
    os.makedirs(tmp_path / "global_step_3")
    with pytest.raises(RuntimeError, match="it lacks an actor directory"):
        resume_path(step_dir(root, 3), True, root)


def test_an_explicit_checkpoint_whose_save_was_interrupted_is_not_called_weights_only(tmp_path):
    """A full save killed after the actor's part, before trainer_state.json: its actor holds the optimizer's state.
    trainer.load_checkpoint_path at it was refused as a trainer.save_model_only checkpoint, with advice to export it."""
    root = str(tmp_path)
    make_steps(tmp_path, [1], complete=False)
    _saved_state(tmp_path / "global_step_1" / "actor", ["model.w", "optimizer.state.w.exp_avg"])
    with pytest.raises(RuntimeError) as error:
        resume_path(step_dir(root, 1), True, root)
    assert str(error.value) == (
        f"Cannot resume from trainer.load_checkpoint_path={step_dir(root, 1)!r}: it lacks trainer_state.json (an "
        "interrupted save?); point it at an earlier global_step_N."
    )


def test_a_checkpoint_is_refused_when_its_lora_setting_differs_from_the_run(tmp_path):
    root = str(tmp_path)
    make_steps(tmp_path, [1])
    check_matches_run(step_dir(root, 1), None, lora=LoraConfig())
    with pytest.raises(RuntimeError, match=r"holds a full model \(no LoRA adapters\), but this run trains LoRA"):
        check_matches_run(step_dir(root, 1), None, lora=LoraConfig(rank=8))
    actor = tmp_path / "global_step_1" / "actor"
    (actor / "huggingface").mkdir()
    for adapters in (actor, actor / "huggingface"):  # where checkpoints keep it; in huggingface/ before
        (adapters / "adapter_config.json").write_text("{}")
        check_matches_run(step_dir(root, 1), None, lora=LoraConfig(rank=8))
        with pytest.raises(RuntimeError, match="holds LoRA adapters only, but this run trains all weights"):
            check_matches_run(step_dir(root, 1), None, lora=LoraConfig())
        (adapters / "adapter_config.json").unlink()


def test_a_lora_checkpoint_is_refused_when_the_runs_lora_settings_differ(tmp_path):
    """Resuming with other targets dropped the trained adapters of the others, a new alpha rescaled them silently,
    and a new rank failed inside Ray with a size mismatch; each is now refused before Ray, naming the settings."""
    root = str(tmp_path)
    make_steps(tmp_path, [1])
    actor = tmp_path / "global_step_1" / "actor"
    (actor / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))  # older: no settings file
    check_matches_run(step_dir(root, 1), None, LoraConfig(rank=8, alpha=16, target_modules="q_proj"))
    with pytest.raises(RuntimeError, match=r"other worker.model.lora settings \(alpha=32 here, 16 there\)"):
        check_matches_run(step_dir(root, 1), None, LoraConfig(rank=8, alpha=32), "worker.model")
    saved = LoraConfig(rank=8, alpha=16, target_modules="q_proj,v_proj")
    (actor / "lora_settings.json").write_text(json.dumps(dataclasses.asdict(saved)))
    check_matches_run(step_dir(root, 1), None, saved)
    # the same targets spelt otherwise (another order, spaces): the same adapters, resumed (they were refused)
    check_matches_run(step_dir(root, 1), None, dataclasses.replace(saved, target_modules=" v_proj, q_proj"))
    with pytest.raises(RuntimeError, match=r"target_modules='q_proj' here, 'q_proj,v_proj' there"):
        check_matches_run(step_dir(root, 1), None, dataclasses.replace(saved, target_modules="q_proj"))
    with pytest.raises(RuntimeError, match=r"rank=4 here, 8 there; target_modules='all-linear' here, 'q_proj,v_proj'"):
        check_matches_run(step_dir(root, 1), None, LoraConfig(rank=4, alpha=16))


def test_lora_adapters_on_other_base_weights_are_refused_and_a_full_model_is_warned_about(tmp_path, caplog):
    """Adapters resumed on another model of the same shapes (a base model for its instruct version) trained on as if
    nothing changed; the run records a fingerprint of the weights it started from."""
    from safetensors.torch import save_file

    from verl.utils.hub import weights_fingerprint

    models = []
    for seed in (0, 1):
        folder = tmp_path / f"model{seed}"
        folder.mkdir()
        save_file(
            {"w": torch.randn(4, 4, generator=torch.Generator().manual_seed(seed))}, str(folder / "m.safetensors")
        )
        models.append(str(folder))
    assert (
        weights_fingerprint(models[0]) != weights_fingerprint(models[1]) and weights_fingerprint(str(tmp_path)) is None
    )
    make_steps(tmp_path / "run", [1])
    step = step_dir(str(tmp_path / "run"), 1)
    with open(os.path.join(step, "trainer_state.json"), "w") as f:
        json.dump({"global_step": 1, "model_fingerprint": weights_fingerprint(models[0])}, f)
    check_matches_run(step, models[0], LoraConfig())
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        check_matches_run(step, models[1], LoraConfig())
    assert "holds other weights than the run saved in" in caplog.text and "reference model" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):  # SFT's: no reference model
        check_matches_run(step, models[1], LoraConfig(), "worker.model")
    assert "resumes its own trained weights." in caplog.text and "reference" not in caplog.text
    lora = LoraConfig(rank=8, alpha=16)
    with open(os.path.join(step, "actor", "adapter_config.json"), "w") as f:
        json.dump({"r": 8, "lora_alpha": 16}, f)
    check_matches_run(step, models[0], lora)
    with pytest.raises(RuntimeError, match=r"LoRA adapters were trained on other weights than worker.actor.model"):
        check_matches_run(step, models[1], lora)


def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(tmp_path):
    """Such a resume used to fail in the workers, inside Ray, with "Missing key in checkpoint state_dict"."""
    root = str(tmp_path)
    make_steps(tmp_path, [1])
    saved = tmp_path / "global_step_1" / "actor" / "huggingface"
    saved.mkdir()
    shape = {"model_type": "qwen2", "hidden_size": 256, "num_hidden_layers": 4, "vocab_size": 2112}
    (saved / "config.json").write_text(json.dumps({**shape, "dtype": "float32"}))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**shape, "dtype": "bfloat16"}))  # another dtype: the same shapes
    check_matches_run(step_dir(root, 1), str(model), lora=LoraConfig())
    check_matches_run(step_dir(root, 1), "Org/not-in-the-cache", lora=LoraConfig())  # nothing to compare with
    (model / "config.json").write_text(json.dumps({**shape, "num_hidden_layers": 6, "vocab_size": 4096}))
    with pytest.raises(
        RuntimeError,
        match=r"from another model .*vocab_size 2112 there, 4096 here; num_hidden_layers 4 there, 6 here\)",
    ):
        check_matches_run(step_dir(root, 1), str(model), lora=LoraConfig())
    # a vision-language model's text config decides
    (saved / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "text_config": shape}))
    (model / "config.json").write_text(
        json.dumps({"model_type": "qwen2_5_vl", "text_config": {**shape, "hidden_size": 512}})
    )
    with pytest.raises(RuntimeError, match="hidden_size 256 there, 512 here"):
        check_matches_run(step_dir(root, 1), str(model), lora=LoraConfig())
    # the critic's checkpoint against worker.critic.model (another critic failed inside the workers' load)
    critic = tmp_path / "global_step_1" / "critic" / "huggingface"
    critic.mkdir(parents=True)
    (critic / "config.json").write_text(json.dumps({**shape, "hidden_size": 128}))
    (model / "config.json").write_text(json.dumps(shape))
    with pytest.raises(RuntimeError, match=r"another model than worker.critic.model.model_path=.*hidden_size 128 th"):
        check_matches_run(step_dir(root, 1), str(model), LoraConfig(), "worker.critic.model", role="critic")


def test_corrupt_tracker_names_file(tmp_path):
    (tmp_path / TRACKER_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=TRACKER_FILE):
        CheckpointTracker.load(str(tmp_path))


def test_an_explicit_checkpoint_beside_a_corrupt_tracker_is_refused_before_the_workers_start(tmp_path):
    """trainer.load_checkpoint_path set (to a step of this folder, around its broken tracker, or of another run's):
    the run's tracker was read only once the workers had loaded the checkpoint, and stopped it with a traceback."""
    other = tmp_path / "other"
    make_steps(other, [2])
    run = tmp_path / "run"
    make_steps(run, [1])
    for explicit in (step_dir(str(run), 1), step_dir(str(other), 2)):
        (run / TRACKER_FILE).write_text("{not json")
        with pytest.raises(ValueError, match=f"Checkpoint tracker '{run / TRACKER_FILE}' is corrupt"):
            resume_path(explicit, True, str(run))
        (run / TRACKER_FILE).write_text(json.dumps({"last_global_step": 1, "last_actor_path": "x"}))  # EasyR1's
        with pytest.raises(ValueError, match="was written by EasyR1"):
            resume_path(explicit, True, str(run))
        (run / TRACKER_FILE).unlink()
        assert resume_path(explicit, True, str(run)) == explicit


def test_tracker_that_is_not_an_object_is_corrupt(tmp_path):
    (tmp_path / TRACKER_FILE).write_text("[3]")
    with pytest.raises(ValueError, match=r"is corrupt \(a JSON list, not an object\)"):
        CheckpointTracker.load(str(tmp_path))


def test_easyr1_tracker_is_named_not_a_type_error(tmp_path):
    # What EasyR1 leaves in its save directory: its tracker, and per-rank torch.save files under global_step_N/actor.
    actor = tmp_path / "global_step_20" / "actor"
    os.makedirs(actor)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    easyr1_tracker = {
        "best_global_step": 10,
        "best_val_reward_score": 0.4321,
        "last_global_step": 20,
        "last_actor_path": str(actor),
    }
    (tmp_path / TRACKER_FILE).write_text(json.dumps(easyr1_tracker, indent=2))
    for load in (CheckpointTracker.load, find_last_checkpoint):
        with pytest.raises(ValueError, match="written by EasyR1") as info:
            load(str(tmp_path))
        message = str(info.value)
        assert str(tmp_path / TRACKER_FILE) in message
        assert "['best_val_reward_score', 'last_actor_path']" in message
        assert "set trainer.save_checkpoint_path to a new directory" in message and message.endswith(".")


def test_tracker_of_an_unknown_tool_names_its_keys(tmp_path):
    (tmp_path / TRACKER_FILE).write_text(json.dumps({"last_global_step": 3, "iteration": 3}))
    with pytest.raises(ValueError, match=r"has keys \['iteration'\] that this trainer never writes"):
        CheckpointTracker.load(str(tmp_path))


def test_save_limit_keeps_newest_and_best(tmp_path):
    make_steps(tmp_path, [1, 2, 3, 4, 5])
    tracker = CheckpointTracker(last_global_step=5, best_global_step=2)
    removed = remove_obsolete_checkpoints(str(tmp_path), 2, tracker)
    assert removed == [1, 3]
    assert saved_steps(str(tmp_path)) == [2, 4, 5]
    assert remove_obsolete_checkpoints(str(tmp_path), -1, tracker) == []


def test_save_limit_keeps_the_newest_checkpoint_a_run_can_resume_from(tmp_path):
    """trainer.save_model_only turned on mid-run: its weights-only saves pushed out the one full checkpoint."""
    make_steps(tmp_path, [1, 2])
    make_steps(tmp_path, [3, 4], complete=False)  # weights only: no trainer state
    tracker = CheckpointTracker(last_global_step=4)
    assert remove_obsolete_checkpoints(str(tmp_path), 1, tracker) == [1, 3]
    assert saved_steps(str(tmp_path)) == [2, 4] and find_last_checkpoint(str(tmp_path)).endswith("global_step_2")


def test_save_limit_never_removes_the_latest_for_leftovers(tmp_path):
    """Leftovers of interrupted saves (no actor directory) neither count towards the limit nor push out the only
    usable checkpoint; those older than the latest are cleaned up."""
    make_steps(tmp_path, [3])
    for step in (2, 4, 5):  # interrupted saves: the step directory was made, the actor never renamed into place
        os.makedirs(step_dir(str(tmp_path), step))
    tracker = CheckpointTracker(last_global_step=3)
    assert remove_obsolete_checkpoints(str(tmp_path), 1, tracker) == [2]
    assert saved_steps(str(tmp_path)) == [3, 4, 5]
    make_steps(tmp_path, [6])
    tracker.last_global_step = 6
    assert remove_obsolete_checkpoints(str(tmp_path), 1, tracker) == [3, 4, 5]
    assert saved_steps(str(tmp_path)) == [6]


def test_discard_failed_save_keeps_the_latest(tmp_path):
    make_steps(tmp_path, [1, 2])
    tracker = CheckpointTracker(last_global_step=1)
    discard_failed_save(str(tmp_path), 2, tracker)
    assert saved_steps(str(tmp_path)) == [1]
    discard_failed_save(str(tmp_path), 1, tracker)  # a failed re-save of the latest step: the workers kept it
    assert saved_steps(str(tmp_path)) == [1]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = str(tmp_path / "trainer_state.json")
    atomic_write(path, lambda f: f.write("old"))

    def fail(f):
        f.write("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(path, fail)
    assert open(path).read() == "old"
    assert os.listdir(tmp_path) == ["trainer_state.json"]


def test_atomic_write_syncs_the_file_then_the_rename(tmp_path, monkeypatch):
    """A synced write flushes the file before the rename and its folder after it (without the folder's sync, a power
    loss can keep the old entry, or none, though the new file's data reached the disk)."""
    synced, real_fsync = [], os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = str(tmp_path / "trainer_state.json")
    atomic_write(path, lambda f: f.write("new"))
    assert synced == [str(tmp_path / ".trainer_state.json.tmp"), str(tmp_path)]
    synced.clear()
    atomic_write(path, lambda f: f.write("newer"), sync=False)
    assert synced == [] and open(path).read() == "newer"


def test_step_of():
    assert step_of("/a/b/global_step_12/") == 12
    with pytest.raises(ValueError, match="global_step_N"):
        step_of("/a/b/checkpoint")


def _saved_step(root, step: int, shard_bytes: int = 4096) -> str:
    """A complete step as the trainer leaves it: the actor's shards and metadata, the trainer state, then the record."""
    path = step_dir(str(root), step)
    os.makedirs(os.path.join(path, "actor"))
    (root / f"global_step_{step}" / "actor" / "__0_0.distcp").write_bytes(os.urandom(shard_bytes))
    (root / f"global_step_{step}" / "actor" / ".metadata").write_bytes(b"metadata")
    (root / f"global_step_{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    write_record(path)
    return path


def test_a_damaged_newest_checkpoint_is_named_and_the_previous_intact_one_resumed(tmp_path, caplog):
    """A shard truncated after the save (a copy that stopped, a quota): resuming used to pick the step and die in
    torch.distributed.checkpoint on the workers, naming neither the step nor the file."""
    root = str(tmp_path)
    _saved_step(tmp_path, 1)
    newest = _saved_step(tmp_path, 2)
    tracker = CheckpointTracker()
    tracker.record(2, None)
    tracker.save(root)
    assert find_last_checkpoint(root) == newest
    shard = os.path.join(newest, "actor", "__0_0.distcp")
    with open(shard, "r+b") as f:
        f.truncate(1000)
    with caplog.at_level("WARNING"):
        assert find_last_checkpoint(root) == step_dir(root, 1)
    assert f"Checkpoint global_step_2 is damaged: {shard} is 1000 bytes, truncated from the 4096 bytes" in caplog.text
    assert "names step 2, which is not a complete and intact checkpoint; resuming from global_step_1" in caplog.text
    assert os.path.isfile(shard)  # left as it is: nothing is deleted
    with pytest.raises(RuntimeError, match=rf"trainer.load_checkpoint_path='{newest}' is damaged: {shard} is 1000"):
        resume_path(newest, True, root)  # asked for explicitly: no silent fallback
    assert resume_path(step_dir(root, 1), True, root) == step_dir(root, 1)


def test_a_changed_or_missing_file_is_damage_and_every_step_damaged_stops_the_run(tmp_path):
    path = _saved_step(tmp_path, 3)
    assert damage(path) is None
    (tmp_path / "global_step_3" / "trainer_state.json").write_text('{"global_step": 9}')  # same size, other bytes
    assert damage(path) == f"{path}/trainer_state.json has changed since the save (its CRC-32 differs)"
    os.remove(os.path.join(path, "actor", ".metadata"))
    assert damage(path, under="actor") == f"{path}/actor/.metadata is missing"
    with pytest.raises(RuntimeError, match="every complete checkpoint is damaged"):
        find_last_checkpoint(str(tmp_path))


def test_a_checkpoint_without_a_record_is_still_resumed(tmp_path):
    make_steps(tmp_path, [4])  # written before integrity records existed
    assert find_last_checkpoint(str(tmp_path)) == step_dir(str(tmp_path), 4)


class _StubActorGroup:
    """The actor worker group's checkpoint calls: 100-byte shards written, the reference paths loaded recorded."""

    def __init__(self) -> None:
        self.loaded: list[str | None] = []

    def save_checkpoint(self, path: str, model_only: bool, reference_path: str | None) -> None:
        for folder in filter(None, (path, reference_path)):  # a reference that ref_sync_steps moves: saved too
            os.makedirs(folder)
            with open(os.path.join(folder, "__0_0.distcp"), "wb") as f:
                f.write(b"w" * 100)

    def load_checkpoint(self, path: str, reference_path: str | None) -> None:
        self.loaded.append(reference_path)


def _stub_trainer(root, ref_sync_steps: int, kl_coef: float = 0.1, rollout_batch_size: int = 4):  # noqa: ANN001
    """The driver's checkpoint code (RayPPOTrainer's save and load) on stub workers and a real data loader."""
    from types import SimpleNamespace

    from torchdata.stateful_dataloader import StatefulDataLoader

    from verl.algorithms.kl import get_kl_controller
    from verl.trainer.config import PPOConfig
    from verl.trainer.ray_trainer import RayPPOTrainer

    config = PPOConfig()
    config.trainer.save_checkpoint_path, config.trainer.save_model_only, config.trainer.save_limit = (
        str(root),
        False,
        0,
    )
    config.algorithm.ref_sync_steps = ref_sync_steps
    config.data.seed, config.data.shuffle, config.data.rollout_batch_size = 1, False, rollout_batch_size
    state = SimpleNamespace(
        config=config,
        global_step=1,
        total_steps=3,
        ckpt_tracker=CheckpointTracker(),
        actor_rollout_ref_wg=_StubActorGroup(),
        use_critic=False,
        use_reference=True,
        reference_moved=ref_sync_steps > 0,
        train_dataloader=StatefulDataLoader(list(range(8)), batch_size=rollout_batch_size),
        _loader_state_to_save=None,
        kl_ctrl=get_kl_controller("fixed", kl_coef, 0.1, 100),
        entropy_ctrl=None,
        model_fingerprint=None,
        resume_from=None,
    )
    for name in ("_write_checkpoint", "_write_run_state", "_save_checkpoint", "_load_checkpoint"):
        setattr(state, name, getattr(RayPPOTrainer, name).__get__(state))
    return state


def test_the_trainer_records_every_file_of_a_step_before_the_tracker(tmp_path):
    _stub_trainer(tmp_path, ref_sync_steps=2)._save_checkpoint(None)
    with open(tmp_path / "global_step_1" / "integrity.json", encoding="utf-8") as f:
        files = json.load(f)["files"]
    assert sorted(files) == ["actor/__0_0.distcp", "dataloader.pt", "ref/__0_0.distcp", "trainer_state.json"]
    assert files["actor/__0_0.distcp"]["size"] == 100
    state_file = tmp_path / "global_step_1" / "trainer_state.json"
    saved = {
        "trainer": "rl",
        "model_fingerprint": None,
        "global_step": 1,
        "train_rows": 8,
        "seed": 1,
        "shuffle": False,
        "rollout_batch_size": 4,
        "kl_ctrl": {"value": 0.1},
    }
    state = json.loads(state_file.read_text())
    assert state.pop("settings")["algorithm.ref_sync_steps"] == 2  # every setting, compared on resume
    assert state == saved
    assert CheckpointTracker.load(str(tmp_path)).last_global_step == 1


def test_a_resume_keeps_a_moved_reference_and_the_configs_fixed_kl_and_says_a_new_round_size(tmp_path, caplog):
    """A reference that ref_sync_steps moved was saved only while ref_sync_steps > 0: resumed with it at 0, the next
    checkpoints had none, and the resume after them went back to the model path's reference. A fixed KL coefficient
    came from the checkpoint, not the config. A new rollout_batch_size changed the run's length unsaid."""
    _stub_trainer(tmp_path, ref_sync_steps=2)._save_checkpoint(None)  # step 1, with ref/
    resumed = _stub_trainer(tmp_path, ref_sync_steps=0, kl_coef=0.05, rollout_batch_size=2)
    resumed.resume_from = step_dir(str(tmp_path), 1)
    with caplog.at_level(logging.WARNING):
        resumed._load_checkpoint()
    assert resumed.actor_rollout_ref_wg.loaded == [os.path.join(resumed.resume_from, "ref")]
    assert resumed.reference_moved and resumed.kl_ctrl.value == 0.05  # the config's, not the saved 0.1
    assert "data.rollout_batch_size=2, and" in caplog.text and "so it ends at step 3" in caplog.text
    settings = [record.getMessage() for record in caplog.records if "with settings other than" in record.getMessage()]
    assert len(settings) == 1 and "algorithm.ref_sync_steps=0 (2 there)" in settings[0], caplog.text
    assert "rollout_batch_size" not in settings[0]  # said by its own warning
    resumed.global_step = 2
    resumed._save_checkpoint(None)
    assert os.path.isfile(tmp_path / "global_step_2" / "ref" / "__0_0.distcp")  # saved on: the next resume has it


def test_a_checkpoint_s_size_is_estimated_from_the_model_files(tmp_path):
    from verl.models.tiny_models import count_parameters, get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    params = count_parameters(model)["total"]
    assert saved_parameters(model) == params > 10**6
    assert saved_parameters(str(tmp_path)) is None  # a folder without weights
    assert saved_parameters("no-such-org/no-such-model") is None  # not in the local Hub cache
    assert checkpoint_size_estimate([(model, 4)], save_model_only=True) == 4 * params
    assert checkpoint_size_estimate([(model, 4), (model, 2)], save_model_only=False) == 3 * 6 * params
    assert checkpoint_size_estimate([(model, 4), (str(tmp_path), 4)], save_model_only=True) is None


def test_space_warning_when_the_next_checkpoint_would_not_fit(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_bytes(b"x" * 1000)
    (tmp_path / "two").write_bytes(b"x" * 24)
    assert directory_bytes(str(tmp_path)) == 1024
    not_made = str(tmp_path / "not" / "made" / "yet")  # the free space of the disk it will be on
    assert space_warning(not_made, 1024, "A checkpoint") is None
    warning = space_warning(not_made, 2**60, "A checkpoint")
    assert warning.startswith(f"A checkpoint takes {2**30:.2f} GiB, and ") and f"free at {not_made}: " in warning
    assert "trainer.save_limit" in warning


def test_the_hint_after_a_failure_reads_past_another_tools_tracker(tmp_path):
    """A run that never reads the tracker (find_last_checkpoint=false) starts beside EasyR1's; when it then failed,
    the hint's look at the tracker raised inside the error handler: a chained traceback, not the one-line error."""
    root = str(tmp_path)
    with open(os.path.join(root, TRACKER_FILE), "w", encoding="utf-8") as f:
        json.dump({"last_global_step": 3, "last_actor_path": "x"}, f)
    assert resume_hint(root, find_last=False) == (
        "With trainer.find_last_checkpoint=false running the same command again starts over."
    )
    assert resume_hint(root).startswith("Running the same command again does not resume: ")
    assert "EasyR1" in resume_hint(root)


def test_the_cli_says_where_a_failed_run_resumes_from(tmp_path):
    root = str(tmp_path)
    assert resume_hint(root) == "No checkpoint of this run was saved: running the same command again starts over."
    make_steps(tmp_path, [2, 4])
    make_steps(tmp_path, [6], complete=False)  # a save the failure interrupted
    assert resume_hint(root) == (
        f"The latest checkpoint is {step_dir(root, 4)}: running the same command again resumes from it."
    )
    latest = step_dir(root, 4)
    assert resume_hint(root, find_last=False) == (
        "With trainer.find_last_checkpoint=false running the same command again starts over; the latest checkpoint is "
        f"{latest} (resume from it with find_last_checkpoint=true)."
    )
    again = f"Running the same command again starts from trainer.load_checkpoint_path={step_dir(root, 2)} again"
    assert (
        resume_hint(root, explicit=step_dir(root, 2))
        == f"{again}; to resume, set it to the latest checkpoint, {latest}."
    )
    assert resume_hint(root, explicit=latest).endswith(f"load_checkpoint_path={latest} again.")
    # the explicit start removed by save_limit since: "starts from ... again" was wrong, the rerun failed
    assert resume_hint(root, explicit=step_dir(root, 1)) == (
        f"Running the same command again fails: trainer.load_checkpoint_path={step_dir(root, 1)} no longer exists "
        f"(trainer.save_limit removed it); to resume, set it to the latest checkpoint, {latest}."
    )
    stop = TrainingInterrupted(signal.SIGTERM, 4, latest)
    assert str(stop).endswith("Run the same command again to resume.") and "Run the same" not in stop.stopped
    weights_only = tmp_path / "weights_only"
    make_steps(weights_only, [2], complete=False)  # trainer.save_model_only=true: not resumable
    _saved_state(weights_only / "global_step_2" / "actor", ["model.w"])
    hint = resume_hint(str(weights_only))
    assert hint.startswith("Running the same command again does not resume: Cannot resume from"), hint
    assert "global_step_2 hold" in hint and "trainer.save_model_only" in hint


def test_a_resume_with_another_number_of_training_rows_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        warn_if_data_changed({"global_step": 3, "train_rows": 48}, 48, "/ckpt/global_step_3")
        warn_if_data_changed({"global_step": 3}, 50, "/ckpt/global_step_3")  # saved before the count was recorded
        assert caplog.text == ""
        warn_if_data_changed({"global_step": 3, "train_rows": 48}, 50, "/ckpt/global_step_3")
    assert "The training data has 50 rows; /ckpt/global_step_3 was saved with 48." in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        order = {"batch_size": 8, "seed": 1, "shuffle": True}
        warn_if_data_changed({"train_rows": 48, **order}, 48, "/ckpt/global_step_3", order)
        warn_if_data_changed({"train_rows": 48}, 48, "/ckpt/global_step_3", order)  # saved before they were recorded
        assert caplog.text == ""
        warn_if_data_changed({"train_rows": 48, **order, "batch_size": 4}, 48, "/ckpt/global_step_3", order)
    assert "data.batch_size=8 (4 there): /ckpt/global_step_3 was saved with other settings" in caplog.text


def test_a_resume_with_other_settings_names_them_once(caplog):
    """A run resumed with other settings than the one that saved its checkpoint went on without a word (a changed
    learning rate or KL estimator is then found in the curves, if at all); its bookkeeping (trainer.*) may change."""
    from verl.trainer.config import PPOConfig

    config = PPOConfig()
    state = {"global_step": 3, "settings": saved_settings(config)}
    assert state["settings"]["worker.actor.optim.lr"] == config.worker.actor.optim.lr
    json.dumps(state)  # as trainer_state.json keeps it
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        config.trainer.max_steps, config.trainer.save_freq = 9, 2
        config.data.filter_overlong_prompts_workers = 8  # how many processes scan the prompts: not what is trained
        warn_if_settings_changed(state, config, "/ckpt/global_step_3")
        warn_if_settings_changed({"global_step": 3}, config, "/ckpt/global_step_3")  # saved before they were kept
        assert caplog.text == ""
        config.worker.actor.optim.lr, config.algorithm.kl_penalty = 5e-7, "kl"
        config.data.rollout_batch_size = 2 * config.data.rollout_batch_size
        config.worker.reward.reward_function_kwargs = {"strict": True}  # a free-form mapping, empty there
        config.trainer.critic_warmup = 2  # trainer.*, but it changes what is trained
        warn_if_settings_changed(state, config, "/ckpt/global_step_3", told=("data.rollout_batch_size",))
    assert len(caplog.records) == 1, caplog.text
    message = caplog.records[0].getMessage()
    assert "/ckpt/global_step_3 with settings other than the run that saved it" in message
    assert f"worker.actor.optim.lr=5e-07 ({json.dumps(PPOConfig().worker.actor.optim.lr)} there)" in message
    assert f"algorithm.kl_penalty=kl ({PPOConfig().algorithm.kl_penalty} there)" in message
    assert 'worker.reward.reward_function_kwargs={"strict": true} ({} there)' in message
    assert "trainer.critic_warmup=2 (0 there)" in message
    assert "rollout_batch_size" not in message and "max_steps" not in message and "save_freq" not in message


def test_a_renamed_checkpoint_folder_is_refused(tmp_path):
    """global_step_3 copied as global_step_1 resumed as step 1 with step 3's weights, optimizer and data position."""
    make_steps(tmp_path, [1])
    (tmp_path / "global_step_1" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    with pytest.raises(RuntimeError, match=r"holds the state after step 3 .* not after step 1.*Name it global_step_3"):
        resume_path(step_dir(str(tmp_path), 1), True, str(tmp_path))
    (tmp_path / "global_step_1" / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    assert resume_path(step_dir(str(tmp_path), 1), True, str(tmp_path)) == step_dir(str(tmp_path), 1)


def test_a_checkpoint_of_the_other_trainer_is_refused_before_ray_starts(tmp_path):
    """RL from an SFT checkpoint failed after the workers loaded it (KeyError 'kl_ctrl'); SFT took an RL one."""
    rl, sft, old_rl, old_sft = (tmp_path / name / "global_step_2" for name in ("rl", "sft", "old_rl", "old_sft"))
    for step, state in (
        (rl, {"trainer": "rl", "global_step": 2, "kl_ctrl": {}}),
        (sft, {"trainer": "sft", "global_step": 2, "batch_size": 4}),
        (old_rl, {"global_step": 2, "kl_ctrl": {}}),  # written before the field: told apart by what each keeps
        (old_sft, {"global_step": 2, "batch_size": 4}),
    ):
        (step / "actor").mkdir(parents=True)
        (step / "trainer_state.json").write_text(json.dumps(state))
    for path, written in ((rl, "rl"), (sft, "sft"), (old_rl, "rl"), (old_sft, "sft")):
        check_written_by(str(path), written)
        other = "sft" if written == "rl" else "rl"
        with pytest.raises(RuntimeError, match=rf"Cannot resume from .*: it is an {written.upper()} run's checkpoint"):
            check_written_by(str(path), other)
    with pytest.raises(RuntimeError, match=r"model_merger.py --local_dir .*sft/global_step_2/actor`, then point"):
        check_written_by(str(sft), "rl")
