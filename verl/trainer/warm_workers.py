# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ray worker processes of a local CPU run forked from a warm Python (verl/utils/warm_python.py) that has imported
Ray, torch, transformers, vLLM and the workers' modules once, instead of each process importing them (~7 s of a core
each). Ray starts a worker as `<py_executable> default_worker.py ARGS`; here that is the warm launcher, which has the
server fork a child that runs Ray's worker script. A worker whose environment differs from the server's in a variable
a library may read at import (e.g. a reward actor's OMP_NUM_THREADS) starts plainly, as does every worker once the
server is gone. Forks start with what the imports set up, numpy's global random state included (the trainer seeds
the generators it uses). Off with VERL_WARM_PYTHON=0; not used with CUDA (forking after vLLM's CUDA-side imports was
never measured) nor when joining a Ray cluster (its workers run on other machines)."""

import atexit
import logging
import os
import shlex
import sys

import ray

from verl.single_controller.base.worker import DIST_ENV_VARS
from verl.single_controller.ray.base import DIST_INIT_METHOD_ENV
from verl.utils import stall_report
from verl.utils.warm_python import LAUNCHER, WarmPython
from verl.utils.worker_setup import WORKER_SETUP_HOOK


WORKER_MODULES = (
    "ray",
    "torch",
    "transformers",
    "vllm.v1.engine.llm_engine",
    # what building an engine imports (~0.5 s of each worker's engine start on the CPU)
    "vllm.entrypoints.llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.cpu_worker",
    "vllm.v1.worker.cpu_model_runner",
    "vllm.model_executor.model_loader",
    "verl.workers.fsdp_workers",
    "verl.workers.rollout.vllm_rollout",
)
"""What the server imports for its children (most of a worker's start-up)."""

RUNTIME_NAMES = (
    # set by RayWorkerGroup for each rank, read when the rank joins its process group or starts its watch
    *DIST_ENV_VARS,
    "WG_PREFIX",
    DIST_INIT_METHOD_ENV,
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    stall_report.ENV,
)
"""The variables a forked worker's environment may set otherwise than the first worker's (in whose environment the
server imported): none is read at import. Any other difference (another Ray session's job or raylet, a reward
actor's OMP_NUM_THREADS) starts the worker plainly."""

logger = logging.getLogger(__name__)

DEFAULT_WORKER = os.path.join(
    os.path.dirname(os.path.abspath(ray.__file__)), "_private", "workers", "default_worker.py"
)
"""The script Ray starts each worker with (Ray's private layout: a release that moves it turns this module off)."""

_session: dict[str, WarmPython | None] = {"warm": None}
"""The server of the Ray session this process started last (Ray sets a session's job and raylet in its workers'
environment, which the server imports with)."""


def warm_enabled(device: str) -> bool:
    """On the CPU, unless VERL_WARM_PYTHON=0, where OMP_NUM_THREADS is set: without it Ray sets a worker's inside
    the worker after its start, and torch, imported by the server, would have read the server's."""
    enabled = device == "cpu" and os.environ.get("VERL_WARM_PYTHON", "1") != "0" and "OMP_NUM_THREADS" in os.environ
    return enabled and os.path.isfile(DEFAULT_WORKER)


def with_warm_workers(runtime_env: dict, device: str) -> dict:
    """`runtime_env` (a Ray session's, about to start) whose workers start through a new server, where
    `warm_enabled(device)` (the previous session's server is closed); unchanged elsewhere, or where the server could
    not start. The server imports when the first worker starts."""
    if not warm_enabled(device):
        return runtime_env
    if _session["warm"] is None:
        atexit.register(_close)
    _close()
    _session["warm"] = WarmPython()
    try:
        # the workers' setup hook (known-harmless messages silenced) runs before the imports, as in a plain worker
        address = _session["warm"].server(DEFAULT_WORKER, WORKER_MODULES, RUNTIME_NAMES, WORKER_SETUP_HOOK)
    except OSError as err:  # e.g. no writable temp folder: the workers start plainly
        logger.debug("No warm Python for the Ray workers: %s", err)
        return runtime_env
    if address is None:
        return runtime_env
    executable = " ".join(shlex.quote(part) for part in (sys.executable, "-S", LAUNCHER, address))  # run by bash
    return {**runtime_env, "py_executable": executable}


def _close() -> None:
    if _session["warm"] is not None:
        _session["warm"].close()
