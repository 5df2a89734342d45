# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The soak benchmark's arithmetic (benchmarks/soak.py): windowed peaks and growth, on hand-made snapshots."""

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def soak():
    return load_repo_file("benchmarks/soak.py", "soak")


def snap(rss: float, fds: int, threads: int = 10) -> dict:
    return {
        "name": "worker",
        "rss_mib": rss,
        "anon_mib": rss / 2,
        "file_mib": 0.0,
        "shmem_mib": 0.0,
        "fds": fds,
        "threads": threads,
    }


def test_window_peak_takes_largest_memory_and_fewest_descriptors(soak):
    peak = soak.window_peak([{1: snap(100, 20)}, {1: snap(140, 25, 12)}, {1: snap(120, 21)}])
    assert peak[1]["rss_mib"] == 140 and peak[1]["anon_mib"] == 70
    assert peak[1]["fds"] == 20 and peak[1]["threads"] == 10  # a file open for a moment is not a leak


def test_phase_noise_is_flat_but_a_leak_is_not(soak):
    """Memory that moves with the phase of a step compares flat by windowed peaks; steady growth does not."""
    phases = [100, 160, 120]
    start = soak.window_peak([{1: snap(rss, 20)} for rss in phases])
    end = soak.window_peak([{1: snap(rss, 20)} for rss in reversed(phases)])
    assert soak.growth(start, end)["worst_process_rss_growth_pct"] == 0
    leaked = soak.window_peak([{1: snap(rss + 20, 21)} for rss in phases])
    result = soak.growth(start, leaked)
    assert result["worst_process_rss_growth_pct"] == pytest.approx(12.5)
    assert result["fds_change"] == 1


STAND_IN_DRIVER = """
import subprocess, sys
sys.path.insert(0, {benchmarks!r})
import soak

popen = subprocess.Popen
stand_in = [sys.executable, "-c", "import time; time.sleep(600)  # the run"]
subprocess.Popen = lambda command, **kwargs: popen(stand_in, **kwargs)
sys.exit(soak.main(["--steps", "3", "--warmup", "1", "--interval", "0.2", "--workdir", {workdir!r}]))
"""


def test_a_sigterm_to_the_soak_ends_the_run_it_started(tmp_path):
    """A SIGTERM to soak.py alone (`kill`, a scheduler) left its 300-step run going without the script that watched it.
    The run here is a stand-in (a sleeping Python in the trainer's place), not a training run."""
    from processes import sigterm_ends_its_run
    from repo_files import REPO

    workdir = tmp_path / "soak"
    for made in (workdir / "tiny-vl" / "config.json", workdir / "data" / "train.jsonl"):  # prepare() finds them
        made.parent.mkdir(parents=True)
        made.write_text("{}")
    script = tmp_path / "driver.py"
    script.write_text(STAND_IN_DRIVER.format(benchmarks=str(REPO / "benchmarks"), workdir=str(workdir)))
    sigterm_ends_its_run(script, REPO, 90)


def test_a_sigterm_as_the_run_starts_ends_it_too(tmp_path):
    """soak.py set its SIGTERM handler only after its first look at the run it had started: a SIGTERM meanwhile ended
    the script at once (exit -15) and left the run going. The look here is made to take 3 s."""
    from processes import sigterm_ends_its_run
    from repo_files import REPO

    workdir = tmp_path / "soak"
    for made in (workdir / "tiny-vl" / "config.json", workdir / "data" / "train.jsonl"):
        made.parent.mkdir(parents=True)
        made.write_text("{}")
    slow_look = (
        "import time\nlook = soak.psutil.Process\nsoak.psutil.Process = lambda pid: (time.sleep(3), look(pid))[1]\n"
    )
    driver = STAND_IN_DRIVER.format(benchmarks=str(REPO / "benchmarks"), workdir=str(workdir))
    script = tmp_path / "driver.py"
    script.write_text(driver.replace("sys.exit(soak.main(", slow_look + "sys.exit(soak.main("))
    sigterm_ends_its_run(script, REPO, 90)
