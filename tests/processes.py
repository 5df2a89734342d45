# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Whether the processes a test started are still there, read from /proc (Linux).

Importable from every test directory: pytest puts tests/ on sys.path for tests/conftest.py.
"""

import time


def alive(pid: int) -> bool:
    """The process exists and is not a zombie. One reaped while its /proc entry is read is gone too: reading a
    vanishing entry fails with ENOENT or ESRCH."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    """Wait up to `timeout` seconds for the processes to be gone (a killed one may take a moment to be reaped); those
    still alive then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]
