# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reaper (verl/trainer/reaper.py) on real processes: a driver killed with SIGKILL leaves nothing running."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A stand-in for the trainer: it starts the reaper as the runner does, then a tree like Ray's (a child with its own
# child in a new session, as Ray's agents are, and one that ignores SIGTERM), prints the pids and waits.
IGNORES = """
def ignores(pid, signum):  # the signal's bit in the process's mask of ignored signals (Linux)
    with open(f"/proc/{pid}/status") as status:
        mask = next(line for line in status if line.startswith("SigIgn:")).split()[1]
    return bool(int(mask, 16) >> (signum - 1) & 1)

def wait_until(condition, what):  # a condition, not a fixed sleep: a loaded machine starts processes slowly
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
"""
DRIVER = (
    """
import json, signal, subprocess, sys, time
import psutil
from verl.trainer.reaper import start_reaper
"""
    + IGNORES
    + """
reaper = start_reaper(interval=0.2, grace=1.0)
sleeper = "import time; time.sleep(600)"
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
spawner = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=True); time.sleep(600)"
children = [subprocess.Popen([sys.executable, "-c", code]) for code in (spawner, stubborn)]
others = lambda: [p for p in psutil.Process().children(recursive=True) if p.pid != reaper.pid]
wait_until(lambda: len(others()) == 3, "the spawner's child did not start")
wait_until(lambda: ignores(reaper.pid, signal.SIGTERM), "the reaper did not start watching")  # set just before
time.sleep(2.0)  # ten of the reaper's looks at the tree
print(json.dumps({"reaper": reaper.pid}), flush=True)
time.sleep(600)
"""
)


def _tree(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def test_a_killed_driver_leaves_nothing_running():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=REPO, stdout=subprocess.PIPE, text=True)
    reaper_pid = json.loads(driver.stdout.readline())["reaper"]
    processes = [p for p in _tree(driver.pid) if p.pid != reaper_pid]
    assert len(processes) == 3  # spawner, stubborn and the spawner's child
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    _, alive = psutil.wait_procs(processes, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    # the reaper exits by itself after its last wait and its interpreter's shutdown: give it a moment on a busy machine
    deadline = time.monotonic() + 30
    while psutil.pid_exists(reaper_pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(reaper_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    assert not psutil.pid_exists(reaper_pid) or psutil.Process(reaper_pid).status() == psutil.STATUS_ZOMBIE


def test_the_reaper_ignores_ctrl_c_and_exits_after_its_driver():
    code = (
        "import json, signal, time\n"
        "from verl.trainer.reaper import start_reaper\n" + IGNORES + "reaper = start_reaper(interval=0.1, grace=0.5)\n"
        "print(json.dumps({'reaper': reaper.pid}), flush=True)\n"
        "wait_until(lambda: ignores(reaper.pid, signal.SIGINT), 'the reaper did not start')\n"
        "reaper.send_signal(signal.SIGINT)  # Ctrl-C reaches the whole process group; the driver handles it\n"
        "time.sleep(0.5)\n"
        "assert reaper.poll() is None, 'the reaper died of SIGINT'\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    reaper = psutil.Process(json.loads(driver.stdout.readline())["reaper"])
    assert driver.wait(timeout=60) == 0
    reaper.wait(timeout=10)  # gone by itself once the driver ended (psutil raises TimeoutExpired otherwise)
