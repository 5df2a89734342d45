# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of the run lock (verl/trainer/run_lock.py): a released folder is free for another process at once, a file
system without record locks decides by the recorded holder, and an unreadable or longer earlier record does not
spoil the lock. A mutation audit changed each line these pin and no other test failed."""

import errno
import json
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.trainer.test_run_lock import hold
from verl.trainer import run_lock
from verl.trainer.run_lock import LOCK_FILE, CheckpointFolderInUse, RunLock


def _acquire_elsewhere(folder) -> subprocess.CompletedProcess:
    """Another process (a run started from another terminal) that takes the folder and ends."""
    code = textwrap.dedent(f"""
        from verl.trainer.run_lock import RunLock
        RunLock({str(folder)!r}).acquire()
        print("took it", flush=True)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_a_released_folder_is_free_for_another_process_while_this_one_goes_on(tmp_path):
    """A notebook or a sweep whose run ended keeps its process: the folder must be free for a run started elsewhere."""
    folder = tmp_path / "run"
    with RunLock(str(folder)):
        refused = _acquire_elsewhere(folder)
    assert refused.returncode != 0 and "CheckpointFolderInUse" in refused.stderr
    took = _acquire_elsewhere(folder)
    assert took.returncode == 0 and took.stdout == "took it\n", took.stderr[-2000:]


def test_the_refusal_says_when_the_holding_run_started(tmp_path):
    holder = hold(tmp_path / "run")
    try:
        with pytest.raises(CheckpointFolderInUse) as error:
            RunLock(str(tmp_path / "run")).acquire()
    finally:
        holder.kill()
        holder.wait()
    assert re.search(rf"pid {holder.pid} on host \S+, started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\. ", str(error.value))


@pytest.fixture
def no_record_locks(monkeypatch):
    """A file system without record locks (some NFS mounts): lockf fails with ENOLCK."""

    def lockf(fd, how):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(run_lock.fcntl, "lockf", lockf)


def _record(folder, pid: int, host: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_FILE).write_text(json.dumps({"pid": pid, "host": host, "started": 1.0}))


def test_without_record_locks_a_live_holder_on_this_host_is_refused(tmp_path, no_record_locks):
    folder = tmp_path / "run"
    _record(folder, os.getppid(), socket.gethostname())  # a live process of this host, not this one
    with pytest.raises(CheckpointFolderInUse) as error:
        RunLock(str(folder)).acquire()
    assert f"pid {os.getppid()} on host {socket.gethostname()}" in str(error.value)
    assert "this file system has no locks" not in str(error.value)  # it runs here: nothing to delete by hand


def test_without_record_locks_a_holder_on_another_host_is_refused_naming_the_file(tmp_path, no_record_locks):
    folder = tmp_path / "run"
    _record(folder, _dead_pid(), "another-host.example")  # its pid means nothing here
    with pytest.raises(CheckpointFolderInUse) as error:
        RunLock(str(folder)).acquire()
    assert "on host another-host.example" in str(error.value)
    assert f"this file system has no locks: if that run has ended, delete {folder / LOCK_FILE}" in str(error.value)


def test_without_record_locks_a_dead_holder_on_this_host_is_taken_over(tmp_path, no_record_locks):
    folder = tmp_path / "run"
    _record(folder, _dead_pid(), socket.gethostname())
    with RunLock(str(folder)):
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("content", [b"\xff\xfe not text", b"not json {", b"[1, 2]"], ids=["bytes", "text", "list"])
def test_an_unreadable_lock_record_is_taken_over(tmp_path, content):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / LOCK_FILE).write_bytes(content)
    with RunLock(str(folder)) as lock:
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
        assert (folder / LOCK_FILE).read_bytes() == lock.record


def test_a_longer_earlier_record_is_replaced_whole(tmp_path):
    """What the next run reads to name the holder (and the other nodes compare) is this run's record alone."""
    folder = tmp_path / "run"
    _record(folder, _dead_pid(), "a-much-longer-host-name-than-this-machine-has." * 4)
    with RunLock(str(folder)) as lock:
        record = (folder / LOCK_FILE).read_bytes()
    assert record == lock.record
    assert set(json.loads(record)) == {"pid", "host", "started"}


def test_a_folder_copied_from_another_hosts_run_says_that_run_has_ended_here(tmp_path, caplog):
    """A pid recorded on another host says nothing of this host's processes: not "whose process is alive"."""
    folder = tmp_path / "run"
    _record(folder, os.getppid(), "another-host.example")  # a live pid here, but the record is another host's
    with caplog.at_level(logging.INFO, logger="verl.trainer.run_lock"):
        with RunLock(str(folder)):
            pass
    assert f"pid {os.getppid()} on host another-host.example) that has ended" in caplog.text


def test_a_lock_error_that_is_not_a_missing_lock_is_raised(tmp_path, monkeypatch):
    """Only a file system without record locks goes on by the recorded holder; another error (EIO) is not a free
    folder."""

    def lockf(fd, how):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(run_lock.fcntl, "lockf", lockf)
    with pytest.raises(OSError, match=os.strerror(errno.EIO)):
        RunLock(str(tmp_path / "run")).acquire()


def test_a_second_run_of_this_process_is_refused_and_the_first_keeps_the_folder(tmp_path):
    """A record lock is the process's: a second RunLock of this process (a notebook, a sweep's threads) was granted
    the folder, and its release dropped the first run's lock, so another process took the folder mid-run."""
    folder = tmp_path / "checkpoints"
    first = RunLock(str(folder))
    first.acquire()
    try:
        with pytest.raises(CheckpointFolderInUse, match=rf"pid {os.getpid()} on host .*this process holds it"):
            RunLock(str(tmp_path / "." / "checkpoints")).acquire()  # the same folder, spelled otherwise
        assert "took it" not in _acquire_elsewhere(folder).stdout  # still the first run's
    finally:
        first.release()
    with RunLock(str(folder)):  # free again once the first run ends
        assert "took it" not in _acquire_elsewhere(folder).stdout
    assert "took it" in _acquire_elsewhere(folder).stdout
