# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checkpoint bookkeeping that a mutation audit of verl/trainer/checkpointing.py found unpinned: the tracker's best
step on ties and across a resume, step folder names, the fallbacks of resume discovery, and save_limit's counts."""

import json
import logging
import os

import pytest

from verl.trainer.checkpointing import (
    TRACKER_FILE,
    CheckpointTracker,
    find_last_checkpoint,
    saved_steps,
    step_dir,
    step_of,
)


def make_steps(root, steps, complete: bool = True):
    for step in steps:
        os.makedirs(os.path.join(step_dir(str(root), step), "actor"))
        if complete:
            (root / f"global_step_{step}" / "trainer_state.json").write_text("{}")


def test_the_best_step_on_a_tie_is_the_earlier_one():
    tracker = CheckpointTracker()
    tracker.record(2, 0.5)
    tracker.record(4, 0.5)
    assert (tracker.best_global_step, tracker.best_val_score, tracker.last_global_step) == (2, 0.5, 4)


def test_a_nan_score_is_never_the_best_step(tmp_path):
    """A NaN first score (SFT's validation loss of a diverged step) stayed the best for good, since no score compares
    greater than NaN: save_limit then kept that checkpoint and the best step named it. It is recorded, never best."""
    tracker = CheckpointTracker()
    tracker.record(1, float("nan"))
    tracker.record(2, -3.0)
    tracker.record(3, float("nan"))
    assert (tracker.best_global_step, tracker.best_val_score) == (2, -3.0)
    tracker.save(str(tmp_path))
    resumed = CheckpointTracker.resumed(str(tmp_path), 3)
    assert (resumed.best_global_step, sorted(resumed.val_scores)) == (2, ["1", "2", "3"])


def test_a_resume_replays_the_scores_in_step_order_and_ends_at_its_step(tmp_path):
    """Steps sort as numbers ("10" before "2" as text), and the resumed step is the latest even without a score."""
    old = CheckpointTracker()
    for step, score in ((2, 0.5), (10, 0.5), (12, 0.1)):
        old.record(step, score)
    old.save(str(tmp_path))
    tracker = CheckpointTracker.resumed(str(tmp_path), 11)
    assert tracker == CheckpointTracker(
        last_global_step=11, best_global_step=2, best_val_score=0.5, val_scores={"2": 0.5, "10": 0.5}
    )


def test_starting_over_does_not_read_a_broken_tracker(tmp_path):
    """trainer.find_last_checkpoint=false over a corrupt tracker: the run starts from scratch, it does not fail."""
    (tmp_path / TRACKER_FILE).write_text("{not json")
    assert CheckpointTracker.resumed(str(tmp_path), 0) == CheckpointTracker()
    with pytest.raises(ValueError, match="is corrupt"):
        CheckpointTracker.resumed(str(tmp_path), 3)


def test_a_tracker_with_some_easyr1_keys_and_others_is_another_tools(tmp_path):
    (tmp_path / TRACKER_FILE).write_text(json.dumps({"last_global_step": 1, "last_actor_path": "x", "iteration": 3}))
    with pytest.raises(
        ValueError, match=r"has keys \['iteration', 'last_actor_path'\] that this trainer never writes"
    ):
        CheckpointTracker.load(str(tmp_path))


def test_only_exact_step_folder_names_are_steps(tmp_path):
    make_steps(tmp_path, [3])
    os.makedirs(tmp_path / "global_step_3.bak" / "actor")  # a user's copy beside it
    os.makedirs(tmp_path / "global_step_4x")
    assert saved_steps(str(tmp_path)) == [3]
    with pytest.raises(ValueError, match="must end with global_step_N"):
        step_of(str(tmp_path / "global_step_3.bak"))


def test_a_tracker_naming_a_step_before_every_complete_one_resumes_the_newest(tmp_path, caplog):
    """The tracker's step is gone and no complete checkpoint precedes it: the newest complete one, not an error."""
    make_steps(tmp_path, [3, 6])
    CheckpointTracker(last_global_step=1).save(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert find_last_checkpoint(str(tmp_path)) == step_dir(str(tmp_path), 6)
    assert "names step 1, which is not a complete and intact checkpoint; resuming from global_step_6" in caplog.text
    assert "later than the run's latest checkpoint" not in caplog.text  # 3 and 6 are not after the resumed 6


def test_without_a_tracker_later_interrupted_saves_are_not_called_a_replaced_runs(tmp_path, caplog):
    make_steps(tmp_path, [2])
    make_steps(tmp_path, [3], complete=False)
    with caplog.at_level(logging.WARNING):
        assert find_last_checkpoint(str(tmp_path)) == step_dir(str(tmp_path), 2)
    assert "No checkpoint tracker" in caplog.text and "later than the run's latest checkpoint" not in caplog.text


def test_the_hint_to_start_from_weights_names_the_newest_steps_actor(tmp_path):
    make_steps(tmp_path, [2, 5], complete=False)  # interrupted saves: an actor folder, no trainer state
    with pytest.raises(RuntimeError) as error:
        find_last_checkpoint(str(tmp_path))
    message = str(error.value)
    assert "global_step_2, global_step_5 lack an actor directory or trainer_state.json" in message
    assert os.path.join(step_dir(str(tmp_path), 5), "actor") in message
    assert os.path.join(step_dir(str(tmp_path), 2), "actor") not in message


def test_a_step_folder_without_an_actor_gets_no_hint_to_start_from_its_weights(tmp_path):
    os.makedirs(step_dir(str(tmp_path), 5))  # the save never got as far as the actor
    with pytest.raises(RuntimeError) as error:
        find_last_checkpoint(str(tmp_path))
    assert str(error.value).endswith(
        "set trainer.find_last_checkpoint=false to start over here (the step directories are overwritten)."
    )
    assert "model_merger" not in str(error.value)


def test_a_hint_for_a_run_that_did_not_resume_by_itself_ignores_unresumable_leftovers(tmp_path):
    """Only a run that resumes by itself (find_last_checkpoint=true, no load_checkpoint_path) is told that the folder
    does not resume; with an explicit checkpoint or find_last_checkpoint=false the hint is theirs."""
    from verl.trainer.checkpointing import resume_hint

    root = tmp_path / "run"
    os.makedirs(step_dir(str(root), 3))  # an interrupted save: find_last_checkpoint raises
    explicit = str(tmp_path / "elsewhere" / "global_step_7")
    os.makedirs(explicit)
    assert resume_hint(str(root)).startswith("Running the same command again does not resume: Cannot resume from")
    assert resume_hint(str(root), explicit=explicit) == (
        f"Running the same command again starts from trainer.load_checkpoint_path={explicit} again."
    )
    assert resume_hint(str(root), find_last=False) == (
        "With trainer.find_last_checkpoint=false running the same command again starts over."
    )


def test_a_hint_for_a_removed_explicit_checkpoint_without_a_later_one_says_start_over(tmp_path):
    from verl.trainer.checkpointing import resume_hint

    gone = step_dir(str(tmp_path), 1)
    assert resume_hint(str(tmp_path), explicit=gone) == (
        f"Running the same command again fails: trainer.load_checkpoint_path={gone} no longer exists "
        "(trainer.save_limit removed it); to resume, start over."
    )


def test_an_explicit_checkpoint_with_a_trailing_slash_is_the_latest(tmp_path):
    from verl.trainer.checkpointing import resume_hint

    make_steps(tmp_path, [4])
    explicit = step_dir(str(tmp_path), 4) + os.sep
    assert resume_hint(str(tmp_path), explicit=explicit) == (
        f"Running the same command again starts from trainer.load_checkpoint_path={explicit} again."
    )


def test_without_find_last_checkpoint_a_run_starts_over_beside_its_checkpoints(tmp_path):
    from verl.trainer.checkpointing import resume_path

    make_steps(tmp_path, [2])
    assert resume_path(None, False, str(tmp_path)) is None
    assert resume_path(None, True, str(tmp_path)) == step_dir(str(tmp_path), 2)


def test_a_checkpoint_folder_renamed_to_a_later_step_is_refused(tmp_path):
    from verl.trainer.checkpointing import resume_path

    make_steps(tmp_path, [5])
    (tmp_path / "global_step_5" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    with pytest.raises(RuntimeError, match="holds the state after step 2 .*not after step 5.*Name it global_step_2"):
        resume_path(step_dir(str(tmp_path), 5), True, str(tmp_path))


def test_an_unreadable_trainer_state_reads_as_empty(tmp_path):
    from verl.trainer.checkpointing import read_trainer_state

    make_steps(tmp_path, [1])
    (tmp_path / "global_step_1" / "trainer_state.json").write_text("{truncated")
    assert read_trainer_state(step_dir(str(tmp_path), 1)) == {}
    (tmp_path / "global_step_1" / "trainer_state.json").write_text("[1, 2]")
    assert read_trainer_state(step_dir(str(tmp_path), 1)) == {}
    assert read_trainer_state(str(tmp_path / "missing")) == {}


def test_a_trainer_state_whose_step_is_not_a_number_is_not_compared_with_the_folder(tmp_path):
    from verl.trainer.checkpointing import resume_path

    make_steps(tmp_path, [5])
    (tmp_path / "global_step_5" / "trainer_state.json").write_text(json.dumps({"global_step": "5"}))
    assert resume_path(step_dir(str(tmp_path), 5), True, str(tmp_path)) == step_dir(str(tmp_path), 5)


def _model(folder, seed: int) -> str:
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    save_file({"w": torch.randn(2, 2, generator=torch.Generator().manual_seed(seed))}, str(folder / "m.safetensors"))
    return str(folder)


def test_other_weights_are_told_only_for_the_actor_and_only_where_both_fingerprints_are_known(tmp_path, caplog):
    from verl.models.config import LoraConfig
    from verl.trainer.checkpointing import check_matches_run, started_from_other_weights
    from verl.utils.hub import weights_fingerprint

    first, second = _model(tmp_path / "first", 0), _model(tmp_path / "second", 1)
    make_steps(tmp_path / "run", [1])
    step = step_dir(str(tmp_path / "run"), 1)
    assert not started_from_other_weights(step, second)  # saved before fingerprints were kept: unknown
    with open(os.path.join(step, "trainer_state.json"), "w") as f:
        json.dump({"global_step": 1, "model_fingerprint": weights_fingerprint(first)}, f)
    assert started_from_other_weights(step, second) and not started_from_other_weights(step, first)
    assert not started_from_other_weights(step, "Org/not-in-the-cache")  # no weights to fingerprint here
    os.makedirs(os.path.join(step, "critic"))
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        check_matches_run(step, second, LoraConfig(), "worker.critic.model", role="critic")
    assert "holds other weights" not in caplog.text


def test_which_trainer_wrote_a_checkpoint_is_its_states_word_first(tmp_path):
    from verl.trainer.checkpointing import check_written_by

    for name, state in (("rl", {"trainer": "rl", "global_step": 2}), ("unknown", {"global_step": 2})):
        (tmp_path / name / "actor").mkdir(parents=True)
        (tmp_path / name / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(RuntimeError, match="it is an RL run's checkpoint, and this is an SFT run"):
        check_written_by(str(tmp_path / "rl"), "sft")
    check_written_by(str(tmp_path / "unknown"), "sft")  # neither trainer's own state: not refused
    check_written_by(str(tmp_path / "unknown"), "rl")


@pytest.mark.parametrize(
    "key", ["model_type", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads"]
)
def test_each_shape_key_that_differs_refuses_the_checkpoint(tmp_path, key):
    from verl.models.config import LoraConfig
    from verl.trainer.checkpointing import check_matches_run

    make_steps(tmp_path, [1])
    shape = {
        "model_type": "qwen2",
        "vocab_size": 2112,
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    saved = tmp_path / "global_step_1" / "actor" / "huggingface"
    saved.mkdir()
    (saved / "config.json").write_text(json.dumps(shape))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**shape, key: "llama" if key == "model_type" else 1}))
    with pytest.raises(RuntimeError, match=f"from another model .*{key} {shape[key]} there, "):
        check_matches_run(step_dir(str(tmp_path), 1), str(model), lora=LoraConfig())
    (model / "config.json").write_text(json.dumps({k: v for k, v in shape.items() if k != key}))
    check_matches_run(step_dir(str(tmp_path), 1), str(model), lora=LoraConfig())  # unknown here: not compared


def test_a_rank_one_lora_run_is_a_lora_run(tmp_path):
    from verl.models.config import LoraConfig
    from verl.trainer.checkpointing import check_matches_run

    make_steps(tmp_path, [1])
    with pytest.raises(RuntimeError, match=r"holds a full model \(no LoRA adapters\), but this run trains LoRA"):
        check_matches_run(step_dir(str(tmp_path), 1), None, lora=LoraConfig(rank=1, alpha=2))


def test_a_long_setting_is_shortened_to_80_characters_keeping_both_ends():
    from verl.trainer.checkpointing import _short

    assert _short("x" * 80) == "x" * 80
    text = "a" * 40 + "b" * 41  # 81 characters
    assert _short(text) == "a" * 38 + "..." + "b" * 39 and len(_short(text)) == 80
    assert _short([1, 2]) == "[1, 2]"


def test_nothing_to_train_once_the_resumed_step_is_the_last():
    from verl.trainer.checkpointing import nothing_to_train

    assert nothing_to_train("/runs/a/global_step_5", 5, "trainer.max_steps")
    assert nothing_to_train("/runs/a/global_step_6", 5, "trainer.max_steps")
    assert not nothing_to_train("/runs/a/global_step_4", 5, "trainer.max_steps")
    assert not nothing_to_train(None, 5, "trainer.max_steps")


def _no_space(path: str):
    import errno

    os.makedirs(os.path.join(path, "actor"), exist_ok=True)  # a partial save
    raise OSError(errno.ENOSPC, "No space left on device", os.path.join(path, "actor", "__0_0.distcp"))


def _write(path: str) -> None:
    os.makedirs(os.path.join(path, "actor"), exist_ok=True)
    with open(os.path.join(path, "trainer_state.json"), "w") as f:
        f.write("{}")


def test_a_save_that_runs_out_of_space_removes_its_partial_step_and_names_the_latest(tmp_path):
    from verl.trainer.checkpointing import CheckpointSaveError, save_step

    root = str(tmp_path)
    with pytest.raises(CheckpointSaveError) as first:  # the first save: no earlier checkpoint
        save_step(root, 1, CheckpointTracker(), None, _no_space)
    assert str(first.value) == (
        f"Could not save the checkpoint of step 1: No space left on device "
        f"({os.path.join(step_dir(root, 1), 'actor', '__0_0.distcp')}); no earlier checkpoint. Free space and run "
        "again, or set trainer.save_checkpoint_path to a writable directory and run again."
    )
    assert saved_steps(root) == [] and CheckpointTracker.load(root) is None
    tracker = save_step(root, 2, CheckpointTracker(), 0.5, _write)
    with pytest.raises(CheckpointSaveError) as second:
        save_step(root, 3, tracker, None, _no_space)
    assert f"; {step_dir(root, 2)} is intact and still the latest. Free space and run again to resume, or " in str(
        second.value
    )
    assert saved_steps(root) == [2] and CheckpointTracker.load(root).last_global_step == 2


def test_a_failed_re_save_of_the_latest_step_keeps_its_files(tmp_path):
    """The workers replace a step's files atomically: a re-save of the tracker's latest step (a run stopped right after
    saving it) does not remove it first, nor after failing."""
    from verl.trainer.checkpointing import CheckpointSaveError, save_step

    root = str(tmp_path)
    tracker = save_step(root, 2, CheckpointTracker(), None, _write)
    with pytest.raises(CheckpointSaveError):
        save_step(root, 2, tracker, None, _no_space)
    assert find_last_checkpoint(root) == step_dir(root, 2)
    assert os.path.isfile(os.path.join(step_dir(root, 2), "trainer_state.json"))


def test_a_leftover_folder_of_the_step_being_saved_is_cleared_first(tmp_path):
    from verl.trainer.checkpointing import save_step

    root = str(tmp_path)
    os.makedirs(os.path.join(step_dir(root, 3), "actor"))
    (tmp_path / "global_step_3" / "actor" / "stale.distcp").write_text("a replaced run's")
    save_step(root, 3, CheckpointTracker(last_global_step=2), None, _write)
    assert sorted(os.listdir(step_dir(root, 3))) == ["actor", "integrity.json", "trainer_state.json"]
    assert os.listdir(os.path.join(step_dir(root, 3), "actor")) == []


def test_the_tracker_names_a_step_only_after_its_files_and_record(tmp_path, monkeypatch):
    import errno

    from verl.trainer import checkpointing
    from verl.trainer.checkpointing import CheckpointSaveError, save_step

    root = str(tmp_path)
    tracker = save_step(root, 1, CheckpointTracker(), None, _write)
    with pytest.raises(CheckpointSaveError):  # the files failed
        save_step(root, 2, tracker, None, _no_space)
    assert CheckpointTracker.load(root).last_global_step == 1

    def full(path: str, under: str = "") -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpointing, "write_record", full)
    with pytest.raises(CheckpointSaveError):  # the integrity record failed
        save_step(root, 2, tracker, None, _write)
    assert CheckpointTracker.load(root).last_global_step == 1 and saved_steps(root) == [1]


def test_a_save_error_that_is_not_storage_propagates_unchanged(tmp_path):
    from verl.trainer.checkpointing import save_step

    def broken(path: str) -> None:
        raise ValueError("a bug in the writer")

    with pytest.raises(ValueError, match="a bug in the writer"):
        save_step(str(tmp_path), 1, CheckpointTracker(), None, broken)


def test_only_a_save_with_more_to_come_warns_about_the_next_ones_room(tmp_path, monkeypatch, caplog):
    import collections

    from verl.trainer import checkpointing
    from verl.trainer.checkpointing import save_step

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpointing.shutil, "disk_usage", lambda path: usage(10, 10, 0))
    root = str(tmp_path)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        tracker = save_step(root, 1, CheckpointTracker(), None, _write, more_to_come=False)
        assert "the next save would fail" not in caplog.text
        save_step(root, 2, tracker, None, _write, more_to_come=True)
    assert f"Checkpoint {step_dir(root, 2)} takes " in caplog.text and "the next save would fail" in caplog.text


def test_leftovers_without_an_actor_do_not_count_towards_the_save_limit(tmp_path):
    from verl.trainer.checkpointing import remove_obsolete_checkpoints

    make_steps(tmp_path, [1, 3])
    os.makedirs(step_dir(str(tmp_path), 2))  # an interrupted save
    assert remove_obsolete_checkpoints(str(tmp_path), 2, CheckpointTracker(last_global_step=3)) == [2]
    assert saved_steps(str(tmp_path)) == [1, 3]


def test_a_folders_size_counts_every_file_in_it(tmp_path):
    from verl.trainer.checkpointing import directory_bytes

    (tmp_path / "actor").mkdir()
    for name, size in (("a", 100), ("b", 20), ("c", 3)):
        (tmp_path / "actor" / name).write_bytes(b"x" * size)
    assert directory_bytes(str(tmp_path)) == 123


def test_the_plan_of_save_freq_zero_saves_at_the_end_only_and_a_model_only_run_is_logged_as_one(tmp_path, caplog):
    from types import SimpleNamespace

    from verl.trainer.checkpointing import checkpoint_plan, log_checkpoint_plan

    trainer = SimpleNamespace(save_freq=0, save_checkpoint_path=str(tmp_path))
    assert checkpoint_plan(trainer) == (
        f"Checkpoints go to {tmp_path} (model, optimizer and data-loader state, at the end)."
    )
    assert checkpoint_plan(trainer, 0) == checkpoint_plan(trainer)  # an unknown size says nothing of it
    with caplog.at_level(logging.INFO, logger="verl.trainer.checkpointing"):
        log_checkpoint_plan(trainer, None, model_only=True)
    assert f"Checkpoints go to {tmp_path} (model weights only, at the end)." in caplog.text


def test_a_checkpoint_that_fits_exactly_gets_no_warning_and_an_unmade_folder_is_on_its_nearest_parents_disk(
    tmp_path, monkeypatch
):
    import collections

    from verl.trainer import checkpointing
    from verl.trainer.checkpointing import space_warning

    asked = []

    def disk_usage(path):
        asked.append(path)
        return collections.namedtuple("usage", "total used free")(4096, 0, 4096)

    monkeypatch.setattr(checkpointing.shutil, "disk_usage", disk_usage)
    assert space_warning(str(tmp_path / "run"), 4096, "A checkpoint") is None
    assert asked == [str(tmp_path)]
    assert space_warning(str(tmp_path / "run"), 4097, "A checkpoint").startswith("A checkpoint takes 0.00 GiB")
