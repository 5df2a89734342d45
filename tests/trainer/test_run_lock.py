# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One run per checkpoint folder: a second run refuses, naming the holder; a dead run's lock is taken over."""

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.model_folders import config_only_model
from verl.trainer.run_lock import LOCK_FILE, CheckpointFolderError, CheckpointFolderInUse, RunLock


def hold(folder) -> subprocess.Popen:
    """Another process (another run) that holds the folder until it is killed."""
    code = textwrap.dedent(f"""
        import time
        from verl.trainer.run_lock import RunLock
        RunLock({str(folder)!r}).acquire()
        print("held", flush=True)
        time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_run_refuses_naming_the_holder_and_takes_over_once_it_is_dead(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    holder = hold(folder)
    try:
        with pytest.raises(CheckpointFolderInUse) as error:
            RunLock(str(folder)).acquire()
        assert f"pid {holder.pid} on host {socket.gethostname()}" in str(error.value)
        assert "trainer.save_checkpoint_path" in str(error.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with caplog.at_level(logging.INFO, logger="verl.trainer.run_lock"):
        with RunLock(str(folder)):  # the kernel dropped the dead run's lock: no clean-up needed
            assert f'"pid": {os.getpid()}' in (folder / LOCK_FILE).read_text()
    assert f"pid {holder.pid}" in caplog.text and "has ended" in caplog.text
    assert (folder / LOCK_FILE).read_text() == ""  # released: no holder recorded
    with RunLock(str(folder)):  # and free again
        pass


def test_a_copy_of_a_held_folder_is_free_and_says_whose_lock_record_it_has(tmp_path, caplog):
    """`cp -r` of a running run's folder copies its lock record: the copy is free (no process holds its lock), and
    the message said the recorded run "has ended" while it ran on the original."""
    import shutil

    folder = tmp_path / "checkpoints"
    holder = hold(folder)
    try:
        shutil.copytree(folder, tmp_path / "copy")
        with caplog.at_level(logging.INFO, logger="verl.trainer.run_lock"):
            with RunLock(str(tmp_path / "copy")):
                pass
        assert f"pid {holder.pid}" in caplog.text and "whose process is alive: this folder was copied" in caplog.text
        assert "has ended" not in caplog.text
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_folder_that_cannot_be_made_is_refused_naming_the_key(tmp_path):
    # what the config's check cannot see: a place whose parent is a writable-looking directory that refuses new
    # folders (as under /proc), or a parent that is a file
    (tmp_path / "a_file").write_text("")
    for folder, reason in (
        ("/proc/verl-no-such-run", "No such file or directory"),
        (tmp_path / "a_file" / "run", "Not a directory"),
    ):
        with pytest.raises(CheckpointFolderError, match="trainer.save_checkpoint_path") as error:
            RunLock(str(folder)).acquire()
        assert f"The checkpoint folder {folder} cannot be used: {reason}" in str(error.value)
        assert not isinstance(error.value, CheckpointFolderInUse)


def test_the_trainer_refuses_a_held_folder_before_anything_starts(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    config_only_model(tmp_path / "model")
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    folder = tmp_path / "run"
    holder = hold(folder)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "verl.trainer.main",
                f"data.train_files={tmp_path / 'train.jsonl'}",
                f"worker.actor.model.model_path={tmp_path / 'model'}",
                f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
                "data.rollout_batch_size=8",
                "worker.actor.global_batch_size=4",
                "worker.rollout.n=2",
                "trainer.n_gpus_per_node=2",
                f"trainer.save_checkpoint_path={folder}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"Another run is using the checkpoint folder {folder}: pid {holder.pid}" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Started a local Ray" not in result.stderr + result.stdout
