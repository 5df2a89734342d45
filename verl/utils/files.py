# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Writing files so that a reader never sees half of one (checkpoint bookkeeping, rollout dumps)."""

import os
from collections.abc import Callable
from typing import IO, Any


def atomic_write(path: str, write: Callable[[IO[Any]], None], binary: bool = False, sync: bool = True) -> None:
    """Write a file through `.<name>.tmp` renamed into place: readers see the old file or the new one. `sync` also
    flushes it to the disk before the rename (checkpoints; not needed for files a crash may lose)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    try:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
