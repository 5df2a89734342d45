# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One run per checkpoint folder: from before Ray starts to its end a run holds `<save_checkpoint_path>/.run.lock`,
so a second run on the folder refuses at once (naming the holder's pid and host) rather than overwrite checkpoints.

It is a POSIX record lock (`fcntl.lockf`, NFS-safe) that the kernel drops when the holder dies, so no clean-up is
needed. Without file-system locks the recorded pid and host decide: a dead holder on this host is taken over; one on
another host must be removed by hand (the message names the file)."""

import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

import psutil


logger = logging.getLogger(__name__)

LOCK_FILE = ".run.lock"
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}
_HELD: dict[str, dict[str, Any]] = {}
"""This process's held lock files (real path -> record): a record lock is the process's, so the kernel would grant a
second run of this process (a notebook, a sweep's threads) the folder, and that run's release would drop the first's
lock (closing any descriptor of the file does)."""
_HELD_LOCK = threading.Lock()


class CheckpointFolderError(RuntimeError):
    """The checkpoint folder cannot be used: it cannot be created or written, or another run holds it."""


class CheckpointFolderInUse(CheckpointFolderError):
    """Another run holds the checkpoint folder."""


class RunLock:
    """The driver's lock on its checkpoint folder; a context manager."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, LOCK_FILE)
        self._fd: int | None = None
        self._key = ""
        """The lock file's real path, this process's record of holding it (`_HELD`)."""
        self.record = b""
        """What the holder wrote into the lock file (read it from here: closing any descriptor of the file in this
        process would drop the lock)."""

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.release()

    def _holder(self, fd: int) -> dict[str, Any]:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            holder = json.loads(os.read(fd, 4096).decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def _refuse(self, holder: dict[str, Any], how: str) -> CheckpointFolderInUse:
        started = holder.get("started")
        since = f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}" if started else ""
        return CheckpointFolderInUse(
            f"Another run is using the checkpoint folder {self.folder}: pid {holder.get('pid', '?')} on host "
            f"{holder.get('host', '?')}{since}. Two runs on one folder would overwrite each other's checkpoints: "
            f"wait for it to end, stop it, or set trainer.save_checkpoint_path to another folder{how}."
        )

    def acquire(self) -> None:
        """Take the lock, or raise CheckpointFolderInUse naming the run that holds it (CheckpointFolderError when the
        folder cannot be created or written)."""
        key = os.path.realpath(self.path)
        with _HELD_LOCK:
            if key in _HELD:  # checked before the file is opened: closing a descriptor drops the lock
                raise self._refuse(_HELD[key], " (this process holds it: another run in this program)")
            self._acquire()
            _HELD[key], self._key = json.loads(self.record), key

    def _acquire(self) -> None:
        try:
            os.makedirs(self.folder, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise CheckpointFolderError(
                f"The checkpoint folder {self.folder} cannot be used: {err.strerror or err} "
                f"({err.filename or self.folder}). Set trainer.save_checkpoint_path to a writable folder."
            ) from None
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in (errno.EACCES, errno.EAGAIN):
                    raise self._refuse(self._holder(fd), "") from None
                if err.errno not in _NO_LOCKS:
                    raise
                self._check_holder_without_locks(self._holder(fd))
            previous = self._holder(fd)
            if previous.get("pid") and previous.get("pid") != os.getpid():
                # the lock was free, so no run holds this folder; a live recorded pid ran on a copy of it
                ended = "that has ended"
                if _alive_here(previous):
                    ended = "whose process is alive: this folder was copied from a running run's (or the pid reused)"
                logger.info(
                    "Took over the checkpoint folder %s from an earlier run (pid %s on host %s) %s.",
                    self.folder,
                    previous.get("pid"),
                    previous.get("host"),
                    ended,
                )
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            self.record = json.dumps(me).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.record, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _check_holder_without_locks(self, holder: dict[str, Any]) -> None:
        """Without record locks: refuse while the recorded holder may still be running."""
        pid = holder.get("pid")
        if pid and holder.get("host") != socket.gethostname():
            raise self._refuse(
                holder, f" (this file system has no locks: if that run has ended, delete {self.path} and start again)"
            )
        if pid and pid != os.getpid() and psutil.pid_exists(int(pid)):
            raise self._refuse(holder, "")

    def release(self) -> None:
        """Give the lock up (the file stays, recording no holder)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with _HELD_LOCK:  # (another run of this process takes the folder after the close)
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)  # closing the descriptor releases the record lock
                _HELD.pop(self._key, None)


def _alive_here(holder: dict[str, Any]) -> bool:
    """Whether the run a lock file records is a live process of this host."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
