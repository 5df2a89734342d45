# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A watchdog that ends what a killed trainer leaves behind.

Ray ties its own daemons to the driver that started them, but not what they start in turn: after `kill -9` of the
driver, Ray's agents and idle workers live on. Once the driver is gone the reaper sends SIGTERM to the driver's
descendants it noted, then SIGKILL after `grace` seconds (docs/reliability.md).

    python -m verl.trainer.reaper DRIVER_PID [--interval 1] [--grace 3]
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil


def start_reaper(interval: float = 1.0, grace: float = 3.0) -> subprocess.Popen:
    """Start the reaper for this process (the driver); it exits by itself after the driver."""
    command = [sys.executable, "-m", "verl.trainer.reaper", str(os.getpid()), f"--interval={interval}"]
    return subprocess.Popen(
        [*command, f"--grace={grace}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True
    )


def _descendants(driver: psutil.Process) -> dict[int, float]:
    """pid -> start time (which guards against pid reuse) of every descendant of `driver` but this reaper."""
    found = {}
    with contextlib.suppress(psutil.Error):
        for process in driver.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if process.pid != os.getpid():
                    found[process.pid] = process.create_time()
    return found


def _alive(pid: int, started: float) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        return process if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def end_processes(processes: list[psutil.Process], grace: float) -> int:
    """SIGTERM each process, SIGKILL those alive after `grace` s; return how many there were."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace)
    return len(processes)


def watch(driver_pid: int, interval: float, grace: float) -> int:
    try:
        driver = psutil.Process(driver_pid)
        driver_started = driver.create_time()
    except psutil.Error:
        return 0
    seen: dict[int, float] = {}
    while _alive(driver_pid, driver_started) is not None:
        seen.update(_descendants(driver))
        time.sleep(interval)
    return end_processes([process for pid, started in seen.items() if (process := _alive(pid, started))], grace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("driver_pid", type=int)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the driver's tree")
    parser.add_argument("--grace", type=float, default=3.0, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    watch(args.driver_pid, args.interval, args.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
