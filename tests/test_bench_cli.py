# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The benchmarks' counts are checked by argparse: a zero or negative one is one line naming the option, before
anything starts (they were tracebacks after a model was built, or figures of 0 tok/s with exit status 0)."""

import os
import subprocess
import sys

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "script, option",
    [
        ("bench_serve", "--max-tokens"),
        ("bench_lora_rollout", "--prompts"),
        ("bench_lora_rollout", "--rank"),
        ("bench_sft_data", "--repeats"),
        ("bench_rollout", "--n"),
        ("bench_sweep", "--runs"),
        ("bench_sweep", "--steps"),
        ("bench_sandbox", "--workers"),
    ],
)
def test_a_count_below_one_is_refused_naming_the_option(script, option):
    command = [sys.executable, os.path.join(REPO, "benchmarks", f"{script}.py"), option, "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == f"{script}.py: error: argument {option}: must be positive, got 0"
