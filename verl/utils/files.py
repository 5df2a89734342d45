# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Writing files so that a reader never sees half of one (checkpoint bookkeeping, rollout dumps), and setting an
earlier run's files aside instead of mixing a new run's into them."""

import os
import shutil
import time
from collections.abc import Callable
from typing import IO, Any


def atomic_write(path: str, write: Callable[[IO[Any]], None], binary: bool = False, sync: bool = True) -> None:
    """Write a file through `.<name>.tmp` renamed into place: readers see the old file or the new one. `sync` also
    flushes it to the disk before the rename and the rename after it, by syncing the folder (checkpoints; not needed
    for files a crash may lose): after a power loss the path holds the old file or the whole new one."""
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp")
    try:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            sync_folder(folder or ".")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def open_as_umask(folder: str) -> None:
    """Give the files in `folder` the mode the process's umask gives new files (0644 under the usual 022): safetensors
    writes its files 0600, so another user (a server, a colleague on a shared cluster) could not read an export."""
    mask = os.umask(0)
    os.umask(mask)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            os.chmod(path, 0o666 & ~mask)


def read_text_file(path: str, key: str) -> str:
    """The UTF-8 text of the file that config key `key` names; FileNotFoundError or ValueError naming both."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{key} file {path!r} does not exist; give an existing file or unset the key.")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as error:
        raise ValueError(f"{key} file {path!r} is not UTF-8 text ({error}); save it as UTF-8.") from None


def sync_folder(folder: str) -> None:
    """Flush `folder`'s entries (a rename into it) to the disk; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PREVIOUS_RUNS = "previous_runs"
"""The subfolder where files an earlier run wrote are set aside, one folder per set-aside (its UTC time)."""


def set_aside_folder(root: str) -> str:
    """A new folder `root/previous_runs/<UTC time>` for files an earlier run wrote (created; unique)."""
    base = os.path.join(root, PREVIOUS_RUNS, time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    folder, number = base, 1
    while os.path.exists(folder):
        number += 1
        folder = f"{base}-{number}"
    os.makedirs(folder)
    return folder


def set_aside(paths: list[str], root: str) -> str | None:
    """Move those of `paths` (files or folders under `root`) that exist into a `set_aside_folder`, keeping their paths
    relative to `root`; returns the folder, or None when none existed."""
    present = [path for path in paths if os.path.exists(path)]
    if not present:
        return None
    folder = set_aside_folder(root)
    for path in present:
        target = os.path.join(folder, os.path.relpath(path, root))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(path, target)
    return folder
