# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Whether the processes a test started are still there, read from /proc (Linux); a training run started in a
launcher's process group, waited for until its first step.

Importable from every test directory: pytest puts tests/ on sys.path for tests/conftest.py.
"""

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time


def alive(pid: int) -> bool:
    """The process exists and is not a zombie. One reaped while its /proc entry is read is gone too: reading a
    vanishing entry fails with ENOENT or ESRCH. A zombie main thread whose other threads still exit is alive: the
    process still holds its files (its pipes' other ends stay open until the last thread is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    """Wait up to `timeout` seconds for the processes to be gone (a killed one may take a moment to be reaped); those
    still alive then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def descendant_named(pid: int, name: str):
    """The first descendant of `pid` whose process name is `name` (a psutil.Process); one that exits while the tree
    is read is passed over."""
    import psutil

    for process in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.name() == name:
                return process
    raise LookupError(f"no process named {name} under {pid}")


def start_run_in_a_group(command: list[str], env: dict[str, str], cwd: str, log, metric: str):
    """Start a training command as a member of a new process group that a `sleep` leads (as under `timeout` or a
    launcher script), and wait until its file log `log` has a step with `metric`; returns (launcher, run). A run that
    ends or takes over 300 s first fails the test with its stderr's end, its launcher (and the run) ended. The run's
    stderr goes to an unlinked file, not a pipe (a pipe nobody read while the run trained filled, and a chatty run
    stopped in its next write): `stderr_tail` reads its end, `finished_stderr` all of it once the run has ended."""
    launcher = subprocess.Popen(["sleep", "600"], process_group=0)
    errors = tempfile.TemporaryFile()
    run = subprocess.Popen(command, cwd=cwd, env=env, stderr=errors, process_group=launcher.pid)
    run.stderr_file = errors
    try:
        assert os.getpgid(run.pid) == launcher.pid
        deadline = time.monotonic() + 300
        while not (log.exists() and any(metric in json.loads(line) for line in _complete_lines(log))):
            assert run.poll() is None, stderr_tail(run)
            assert time.monotonic() < deadline, "no training step within 300 s"
            time.sleep(0.5)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)  # the launcher's group: the run and what it started there
        for process in (run, launcher):
            process.wait()
        raise
    return launcher, run


STDERR_WAIT_S = 10.0
"""How long a failing test reads an ended process's stderr pipe: the processes it started may hold the pipe open."""


def stderr_tail(process: subprocess.Popen, size: int = 3000) -> str:
    """The end of what an ended `process` wrote to its stderr pipe, read for at most STDERR_WAIT_S: a pipe has no end
    while a process it started (Ray's daemons, loader workers, a sleeping child) lives, and a read to the end waited
    as long as that process, or for ever. A run of `start_run_in_a_group`: the end of its stderr file so far."""
    if getattr(process, "stderr_file", None) is not None:
        return _file_text(process.stderr_file)[-size:]
    try:
        _, err = process.communicate(timeout=STDERR_WAIT_S)
    except subprocess.TimeoutExpired as timed_out:  # what came meanwhile (bytes, whatever the pipe's mode)
        err = timed_out.stderr or b""
    if isinstance(err, bytes):
        err = err.decode(errors="replace")
    return (err or "")[-size:]


def finished_stderr(run: subprocess.Popen, timeout: float) -> str:
    """All a run of `start_run_in_a_group` wrote to stderr, once it has ended (waited for up to `timeout` seconds;
    not for the processes it started, which may still hold the file)."""
    run.wait(timeout)
    return _file_text(run.stderr_file)


def _file_text(file) -> str:
    file.seek(0)
    return file.read().decode(errors="replace")


def _complete_lines(path) -> list[str]:
    """The lines of a file another process appends to, without a last one it is still writing."""
    return [line for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def sigterm_ends_its_run(script, cwd, wait_s: float, start_s: float = 120.0) -> None:
    """Start `script` (a benchmark driving a stand-in run whose command line holds "# the run"), send it SIGTERM once
    its run has started (within `start_s`), and assert that it exits with 128 + SIGTERM and its run is gone with it.
    The script's stderr goes to a file, not a pipe: a failure's message reads it without waiting on the script, or
    on the processes it started, to end."""
    import signal
    import sys
    import tempfile

    import psutil

    with tempfile.TemporaryFile() as errors:

        def tail() -> str:
            errors.seek(0)
            return errors.read().decode(errors="replace")[-3000:]

        driver = subprocess.Popen([sys.executable, str(script)], cwd=cwd, stderr=errors)
        run = None
        try:
            deadline = time.monotonic() + start_s
            while run is None:
                assert driver.poll() is None, f"the script exited with {driver.returncode} before its run:\n{tail()}"
                assert time.monotonic() < deadline, f"no run within {start_s:.0f} s:\n{tail()}"
                runs = [p for p in psutil.Process(driver.pid).children() if "# the run" in " ".join(p.cmdline())]
                run = runs[0] if runs else time.sleep(0.2)
            driver.send_signal(signal.SIGTERM)
            code = driver.wait(wait_s)
            assert wait_gone([run.pid], 10.0) == [], "the run outlived the script that started it"
            assert code == 128 + signal.SIGTERM, tail()
        finally:
            driver.kill()
            driver.wait()
            if run is not None and run.is_running():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(run.pid, signal.SIGKILL)  # the session the benchmark started it in
                with contextlib.suppress(psutil.NoSuchProcess):
                    run.kill()
