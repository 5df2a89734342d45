# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of stall reports: a fraction of a second reaches the workers, a report comes once a period (not in a
loop), and the main thread's stack comes first."""

import threading
import time

from verl.utils import stall_report


HEADER = "[verl stall report]"


def test_a_fraction_of_a_second_reaches_the_workers():
    assert stall_report.env(0.5) == {stall_report.ENV: "0.5"}


def test_a_long_call_is_reported_once_a_period(monkeypatch, capfd):
    monkeypatch.setenv(stall_report.ENV, "0.4")
    with stall_report.watched("edges.slow"):
        time.sleep(1.0)
    time.sleep(0.2)
    err = capfd.readouterr().err
    assert 1 <= err.count(HEADER) <= 3, err.count(HEADER)  # at 0.4 s and 0.8 s


def test_the_main_threads_stack_comes_first():
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name="edges-worker", daemon=True)
    worker.start()
    try:
        text = stall_report.format_stacks([threading.main_thread().ident, worker.ident])
    finally:
        release.set()
        worker.join()
    assert text.startswith("Thread MainThread (most recent call last):") and "Thread edges-worker" in text
