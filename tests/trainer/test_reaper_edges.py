# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reaper (verl/trainer/reaper.py) where the killed driver is not reaped at once: its parent (a launcher that
does not wait, a hung shell) leaves it a zombie, which is no live driver. A mutation audit changed the line this pins
and no other test failed."""

import contextlib
import json
import signal
import subprocess
import sys
import time

import psutil

from tests.trainer.test_reaper import DRIVER, REPO


def test_a_killed_driver_left_a_zombie_by_its_parent_leaves_nothing_running():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=REPO, stdout=subprocess.PIPE, text=True)
    processes: list[psutil.Process] = []
    try:
        reaper_pid = json.loads(driver.stdout.readline())["reaper"]
        processes = psutil.Process(driver.pid).children(recursive=True)  # the reaper's too: none is left behind
        assert len(processes) == 4  # the reaper, spawner, stubborn and the spawner's child
        driver.send_signal(signal.SIGKILL)  # not waited for: a zombie until the end of the test
        _, alive = psutil.wait_procs([p for p in processes if p.pid != reaper_pid], timeout=15)
        assert psutil.Process(driver.pid).status() == psutil.STATUS_ZOMBIE
        assert not alive, [p.cmdline() for p in alive]
    finally:
        driver.kill()
        driver.wait()
        for process in processes:  # were the reaper not to end them
            with contextlib.suppress(psutil.Error):
                process.kill()


def test_the_reaper_does_not_count_itself_among_the_drivers_descendants():
    """It would end itself with the others, maybe before the ones that ignore SIGTERM."""
    code = (
        "import os, psutil\n"
        "from verl.trainer.reaper import _descendants\n"
        "found = _descendants(psutil.Process(os.getppid()))\n"
        "print(os.getpid() in found)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False"]


def test_ending_the_leftovers_asks_them_to_stop_before_killing_them(tmp_path):
    """SIGTERM first, so that a leftover can end its own children and files (a vLLM engine, a tool server)."""
    from verl.trainer.reaper import end_processes

    marker = tmp_path / "terminated"
    code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda signum, frame: (open({str(marker)!r}, 'w').close(), sys.exit(3)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        start = time.monotonic()
        assert end_processes([psutil.Process(child.pid)], grace=30.0) == 1
        assert marker.exists()  # its own handler ended it
        assert time.monotonic() - start < 15  # long before the grace ran out
    finally:
        child.kill()
        child.wait()


def test_a_leftover_that_left_the_drivers_tree_while_it_ran_is_ended_too(tmp_path):
    """A process noted while the driver ran, whose parent ended since (a daemon's double fork), is the driver's still."""
    import threading

    from verl.trainer import reaper

    pid_file = tmp_path / "grandchild.pid"
    sleeper = "import time; time.sleep(600)"
    middle = (
        f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {sleeper!r}], "
        f"start_new_session=True); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(1.5)"
    )
    driver_code = (
        f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {middle!r}]); time.sleep(600)"
    )
    driver = subprocess.Popen([sys.executable, "-c", driver_code])
    grandchild = None
    try:
        watcher = threading.Thread(target=reaper.watch, args=(driver.pid, 0.1, 2.0), daemon=True)
        watcher.start()
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the grandchild did not start"
            time.sleep(0.05)
        grandchild = psutil.Process(int(pid_file.read_text()))
        while grandchild.pid in {p.pid for p in psutil.Process(driver.pid).children(recursive=True)}:
            assert time.monotonic() < deadline, "the middle process did not end"
            time.sleep(0.05)  # the middle one ends: the grandchild leaves the driver's tree
        time.sleep(1.0)  # the reaper's looks at the tree from now on do not find it
        driver.kill()
        driver.wait()
        watcher.join(timeout=30)
        assert not watcher.is_alive()
        _, alive = psutil.wait_procs([grandchild], timeout=10)
        assert not alive
    finally:
        driver.kill()
        driver.wait()
        if grandchild is not None:
            with contextlib.suppress(psutil.Error):
                grandchild.kill()
