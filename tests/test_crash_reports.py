# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The suite's conftest keeps faulthandler armed: a native crash after a Ray session has ended in the test process
still prints where it happened (Ray's shutdown leaves the fatal signals with no handler)."""

import os
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]

PROBE = """
import ctypes

import pytest


@pytest.fixture
def ray_session():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_with_ray(ray_session):
    pass


def test_that_crashes():
    ctypes.string_at(0)
"""


def _run_probe(tmp_path: Path, *plugin: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(PROBE)
    args = [sys.executable, "-m", "pytest", *plugin, str(tmp_path / "test_probe.py"), "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*args, "--rootdir", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_crash_after_a_ray_session_prints_its_stack(tmp_path):
    # (without the conftest, pytest's own faulthandler stays disarmed after the Ray session: no output at all)
    armed = _run_probe(tmp_path, "-p", "tests.conftest")
    assert armed.returncode == -11, armed.stderr[-2000:]
    assert "Fatal Python error: Segmentation fault" in armed.stderr
    assert 'test_probe.py", line' in armed.stderr and "in test_that_crashes" in armed.stderr
