# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Signals in the processes the driver forks (the dataset scan's pool, the data loader's workers).

A forked child inherits the driver's Python handlers: the preemption handlers (verl/trainer/preemption.py) would raise
"Stopped by SIGTERM" in every pool worker that `Pool.terminate()` ends, and a child forked from a pool's helper
thread never runs a Python handler at all, so it outlives SIGTERM and the pool's shutdown waits on it for ever.
"""

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager


DRIVER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def reset_child_signals() -> None:
    """In a forked child: SIGTERM ends it (how a pool stops its workers); a signal to the driver's whole process group
    (Ctrl-C, a closed terminal, `timeout`) is the driver's to handle (it checkpoints, then stops its children), so the
    child leaves that group and ignores the terminal's signals."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, DRIVER_SIGNALS)


@contextmanager
def signals_held() -> Iterator[None]:
    """Fork children (and start the threads that fork more) inside this block: they start with the driver's signals
    blocked until `reset_child_signals` has replaced the inherited handlers; the driver gets any signal that arrived
    meanwhile once the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, DRIVER_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
