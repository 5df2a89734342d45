# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Dedicated uids for concurrent runs (as root): one slot per run, claimed with a lock file so that trainer processes
on one machine never share a uid; every process of a uid is killed in one step."""

import fcntl
import functools
import os
import pwd
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass

import psutil

from verl.rewards.sandbox.limits import SandboxUnavailable


UID_BASE = 60000
"""As root, run slot N runs as uid and gid UID_BASE + N (uids that exist in the user database are skipped)."""
MAX_SLOTS = 1000
SLOT_DIRECTORIES = ("/run/verl-sandbox-slots", "/tmp/verl-sandbox-slots")


@dataclass(frozen=True)
class _KillAllOfUid:
    """preexec_fn of a helper that becomes `uid`, SIGKILLs all its processes and exits without exec: kill(-1) is
    atomic, so even a fork bomb cannot outrun it. Only system calls (see _ChildSetup)."""

    uid: int

    def __call__(self) -> None:
        try:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)


class _Slots:
    """Claims uid slots with flock on one lock file per slot. A slot's uid must be in no user database and have no
    process left, zombies included (they count against RLIMIT_NPROC, and a container's PID 1 may never reap them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}
        self._directory = ""

    def _lock_directory(self) -> str:
        """A fixed machine-wide path owned by this uid (not TMPDIR, which varies per process)."""
        if not self._directory:
            for directory in SLOT_DIRECTORIES:
                try:
                    os.makedirs(directory, mode=0o700, exist_ok=True)
                except OSError:
                    continue
                info = os.lstat(directory)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    raise RuntimeError(f"{directory} is not a directory owned by uid {os.geteuid()}; remove it.")
                self._directory = directory
                break
            else:
                raise RuntimeError(f"cannot create a sandbox slot directory in any of {SLOT_DIRECTORIES}.")
        return self._directory

    def claim(self, timeout_s: float) -> int:
        """A free slot, locked until `release`; waits while every slot is busy, at most `timeout_s` seconds (then
        raises SandboxUnavailable, as when no uid of the range is free of the user database)."""
        directory = self._lock_directory()
        deadline = time.monotonic() + timeout_s
        while True:
            busy = _uids_with_processes()
            usable = 0
            for slot in range(MAX_SLOTS):
                uid = UID_BASE + slot
                if _uid_exists(uid):
                    continue
                usable += 1
                with self._lock:
                    if slot in self._held:
                        continue
                handle = os.open(os.path.join(directory, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(handle)
                    continue
                if uid in busy:  # a crashed run's leftovers: clear them, or skip the slot if zombies remain
                    _kill_all_of_uid(uid)
                    if uid in _uids_with_processes():
                        os.close(handle)
                        continue
                with self._lock:
                    self._held[slot] = handle
                return slot
            if not usable or time.monotonic() >= deadline:
                uids = f"uids {UID_BASE} to {UID_BASE + MAX_SLOTS - 1}"
                reason = (
                    f"all of {uids} are in the user database"
                    if not usable
                    else f"none of the {usable} sandbox slots ({uids}) came free in {timeout_s:g} s: each is held by "
                    "a run (of this or another trainer on the machine, see the lock files in "
                    f"{directory}) or still has processes of its uid (zombies a PID 1 does not reap)"
                )
                raise SandboxUnavailable(f"No dedicated uid for a sandboxed run as root: {reason}.")
            time.sleep(0.05)

    def release(self, slot: int) -> None:
        with self._lock:
            handle = self._held.pop(slot)
        os.close(handle)  # closing the descriptor drops the flock


_SLOTS = _Slots()


@functools.cache
def _uid_exists(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _uids_with_processes() -> set[int]:
    uids = set()
    for process in psutil.process_iter(["uids"]):
        with suppress(TypeError, AttributeError):
            uids.add(process.info["uids"].real)
    return uids


def _kill_all_of_uid(uid: int) -> None:
    helper = subprocess.Popen([sys.executable], preexec_fn=_KillAllOfUid(uid), close_fds=True)  # noqa: S603
    helper.wait()


def _tasks_of_current_uid() -> int:
    """Processes and threads of this uid: what RLIMIT_NPROC counts for it."""
    uid, total = os.getuid(), 0
    for process in psutil.process_iter(["uids", "num_threads"]):
        info = process.info
        if info["uids"] is not None and info["uids"].real == uid:
            total += info["num_threads"] or 1
    return total
