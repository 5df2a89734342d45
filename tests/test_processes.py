# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""tests/processes.py, the helpers other tests start runs with: a run that fails before the point they wait for must
fail the test at once with its output, never leave it waiting on a pipe that a process the run started still holds
(a test that way waited until that process ended, or for ever)."""

import contextlib
import os
import signal
import sys
import time

import psutil
import pytest
from processes import alive, finished_stderr, sigterm_ends_its_run, start_run_in_a_group, stderr_tail


# Exits with an error at once, leaving a child that holds its stderr (as a run's Ray daemons or loader workers would)
# and outlives the test's patience; the child's pid goes to the file CHILD_FILE.
FAILS_LEAVING_A_CHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(CHILD_FILE, "w").write(str(child.pid))
sys.exit("the run failed here")
"""


def _end_child(pid_file) -> None:
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def _sleeping_launchers() -> set[int]:
    found = set()
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):  # one that ends meanwhile
            if child.cmdline() == ["sleep", "600"]:
                found.add(child.pid)
    return found


def test_a_benchmark_that_fails_before_its_run_fails_the_test_at_once_with_its_output(tmp_path) -> None:
    """sigterm_ends_its_run read the benchmark's stderr pipe to its end for the failure's message: it waited as long
    as any process the benchmark had started lived (here 60 s; a benchmark still starting, for ever)."""
    script = tmp_path / "driver.py"
    script.write_text(f"CHILD_FILE = {str(tmp_path / 'child')!r}\n" + FAILS_LEAVING_A_CHILD)
    started = time.monotonic()
    try:
        with pytest.raises(AssertionError, match="the run failed here"):
            sigterm_ends_its_run(script, tmp_path, 30)
        assert time.monotonic() - started < 20
    finally:
        _end_child(tmp_path / "child")


def test_a_benchmark_that_never_starts_its_run_fails_the_test_at_its_deadline(tmp_path) -> None:
    """The benchmark still running at the deadline: its stderr pipe has no end while it runs."""
    script = tmp_path / "driver.py"
    script.write_text("import sys, time\nprint('still starting', file=sys.stderr, flush=True)\ntime.sleep(60)\n")
    started = time.monotonic()
    with pytest.raises(AssertionError, match="still starting"):
        sigterm_ends_its_run(script, tmp_path, 30, start_s=3.0)
    assert time.monotonic() - started < 20


def test_a_run_that_fails_before_its_first_step_fails_the_test_at_once_with_its_output(tmp_path) -> None:
    """start_run_in_a_group read the run's stderr pipe to its end for the failure's message: it waited as long as any
    process the run had started lived (here 60 s). Its launcher ends with it."""
    command = [sys.executable, "-c", f"CHILD_FILE = {str(tmp_path / 'child')!r}\n" + FAILS_LEAVING_A_CHILD]
    before = _sleeping_launchers()
    started = time.monotonic()
    try:
        with pytest.raises(AssertionError, match="the run failed here"):
            start_run_in_a_group(command, dict(os.environ), str(tmp_path), tmp_path / "log.jsonl", "step")
        assert time.monotonic() - started < 30
    finally:
        _end_child(tmp_path / "child")
    assert _sleeping_launchers() <= before, "the launcher outlived the failed start"


# Writes 1 MiB to stderr (a pipe holds 64 KiB) before its first logged step, then trains on until killed.
CHATTY_RUN = """
import json, sys, time
for line in range(16384):
    print(f"warning {line}: " + "x" * 50, file=sys.stderr)
sys.stderr.flush()
with open(LOG, "w") as log:
    log.write(json.dumps({"step": 1}) + "\\n")
print("after the step", file=sys.stderr, flush=True)
time.sleep(600)
"""


def test_a_run_that_writes_much_to_stderr_before_its_first_step_reaches_it(tmp_path) -> None:
    """The run's stderr was a pipe no one read until the run ended: a run that wrote more than the pipe holds (64 KiB
    of warnings) stopped in that write and never logged its step, and the test failed after 300 s. Its stderr is a
    file now, read while it runs and whole once it has ended."""
    log = tmp_path / "log.jsonl"
    command = [sys.executable, "-c", f"LOG = {str(log)!r}\n" + CHATTY_RUN]
    started = time.monotonic()
    launcher, run = start_run_in_a_group(command, dict(os.environ), str(tmp_path), log, "step")
    try:
        assert time.monotonic() - started < 60
        deadline = time.monotonic() + 30
        while "after the step" not in stderr_tail(run) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stderr_tail(run, 200).endswith("after the step\n")
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    text = finished_stderr(run, 30)
    assert text.startswith("warning 0: ") and "warning 16383: " in text and len(text) > 2**20
