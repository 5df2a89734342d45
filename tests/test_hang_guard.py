# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The suite's hang guard (pyproject.toml's per-test timeout, tests/conftest.py's end of a hung test) under
pytest-xdist, as `make test` runs it."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

from repo_files import REPO


STUCK_FORK = """
import os, time
import pytest

@pytest.mark.timeout(5)
def test_stuck_with_a_fork_before_its_exec():
    if os.fork() == 0:  # never reaches an exec: it holds every descriptor, the worker's pipes to xdist too
        time.sleep(300)
        os._exit(0)
    time.sleep(300)

def test_after_it():
    pass
"""


def test_a_hung_test_whose_fork_holds_the_workers_pipes_fails_and_the_run_goes_on(tmp_path: Path) -> None:
    """CI's run once stopped at 53% for its last hour: the code sandbox's fork hung before its exec (holding the
    xdist worker's pipes), and a worker ended by the timeout was never seen gone, as its stuck child kept the pipes
    open. The guard now kills the worker's processes before it exits."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_stuck.py").write_text(STUCK_FORK)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        "1",
        "-o",
        "timeout_method=thread",
    ]
    began = time.monotonic()
    result = subprocess.run(
        [*command, "test_stuck.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    seconds = time.monotonic() - began
    summary = result.stdout.strip().splitlines()[-1]
    assert "1 failed, 1 passed" in summary, result.stdout[-3000:]
    assert "FAILED test_stuck.py::test_stuck_with_a_fork_before_its_exec" in result.stdout
    assert seconds < 240, f"the run waited for the stuck fork ({seconds:.0f} s)"  # it sleeps 300 s: a hang, not a time
