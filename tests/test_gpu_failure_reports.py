# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""tests/gpu reports a failure's traceback when it happens: a GPU run cut off at its deadline keeps it."""

import os
import shutil
import subprocess
import sys


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_failure_is_reported_before_the_run_is_cut_off(tmp_path):
    shutil.copy(os.path.join(REPO, "tests", "gpu", "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_cut.py").write_text(
        "import os, sys\n"
        "def test_fails():\n"
        "    print('engine log line', file=sys.stderr)\n"
        "    assert 6 * 7 == 41, 'the sync check'\n"
        "def test_cut_off_at_the_deadline():\n"
        "    os._exit(137)  # as a kill at the deadline: no end-of-run summary is printed\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 137
    assert "FAILED test_cut.py::test_fails (call)" in run.stdout, run.stdout
    assert "AssertionError: the sync check" in run.stdout
    assert "engine log line" in run.stdout  # the end of its captured stderr
    assert "short test summary" not in run.stdout  # the summary never came: only the early report has it
