# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Run untrusted Python code (a model's program) under resource limits, and clean up after it.

A program may loop, allocate all memory, print without end, fork-bomb, daemonize, open connections or try to copy a
sibling's answer: each run gets its own root (bubblewrap), new namespaces, an unprivileged uid, a cgroup and rlimits,
and everything it started is killed at its end. docs/rewards.md, "Threat model", says what holds each attack. One run
is runner.py's; all cases of a program in one process harness.py's; the code reward's judging judge.py's.
"""

from verl.rewards.sandbox.harness import CASES_PER_PROCESS, CaseSpec, run_many_cases, run_python_cases
from verl.rewards.sandbox.limits import ISOLATION_MODES, STATUSES, SandboxLimits, SandboxResult, SandboxUnavailable
from verl.rewards.sandbox.runner import MARKER_ENV, isolation, run_many, run_python


__all__ = [
    "CASES_PER_PROCESS",
    "ISOLATION_MODES",
    "MARKER_ENV",
    "STATUSES",
    "CaseSpec",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "isolation",
    "run_many",
    "run_many_cases",
    "run_python",
    "run_python_cases",
]
