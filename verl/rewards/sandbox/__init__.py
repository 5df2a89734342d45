# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Run untrusted Python code (a model's program) under resource limits, and clean up after it.

A code reward runs thousands of generated programs per step; any of them may loop, allocate all memory, print
without end, fork-bomb, daemonize, open connections or try to copy a sibling's answer. Each run gets a root of its
own (bubblewrap), new namespaces, an unprivileged uid, a cgroup and rlimits, and everything it started is killed at
its end. docs/rewards.md, "Threat model", lists what a program sees and each attack and what holds it.

Modules, in the order a run meets them:
- limits: `SandboxLimits` (what a run is given), `SandboxResult` (what it gives back), `SandboxUnavailable`.
- plans: which isolation this machine gives, and what a run's first process does between fork and exec.
- slots: a dedicated uid per concurrent run (as root).
- bwrap, cgroups: bubblewrap's command line; a control group per run.
- runner: one run (`run_python`, `run_many`) and the isolation probe (`isolation`).
- harness, bootstrap: all cases of one program in one process (`run_python_cases`, `run_many_cases`): the trainer's
  side and the first code of every sandboxed interpreter.
- judge, constants: the code reward's test cases, the suffix that prints a case's values and the comparison in the
  trainer; expected sides written as constant arithmetic, evaluated in the trainer.
- fusion: the remote backend (a Sandbox Fusion service).
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
