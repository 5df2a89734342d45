# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What every Ray worker process of a run does before anything else (Ray's runtime_env worker_process_setup_hook,
set by `verl.trainer.ray_setup.start_ray`): work in the driver's working directory, silence the known-harmless
third-party messages (`verl.utils.quiet`) before vLLM or transformers is imported, and show this project's INFO lines
as the driver does."""

import logging
import os

from verl.utils import quiet
from verl.utils.cli import LOG_FORMAT


WORKER_SETUP_HOOK = "verl.utils.worker_setup.setup_worker_process"
"""The dotted name Ray's runtime_env takes for `setup_worker_process`."""

DRIVER_CWD_ENV = "VERL_DRIVER_CWD"
"""The driver's working directory, which each worker makes its own where the folder exists on its node."""


def setup_worker_process() -> None:
    """The known-harmless messages silenced; the `verl` loggers' INFO lines (the LoRA adapters' size, a frozen vision
    tower, the CPU engine's dtype, a saved checkpoint) on stderr, which Ray forwards to the driver's console: a worker
    process has no logging configured, so Python would show WARNING and above only. Other libraries' loggers keep
    their levels. On a cluster joined through RAY_ADDRESS a worker starts where `ray start` ran: it moves to the
    driver's working directory, where a reward file's relative paths (`open("lookup.json")`) mean what they mean in the
    driver, as on a Ray the driver started (a node without that folder stays where it is)."""
    cwd = os.environ.get(DRIVER_CWD_ENV)
    if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    quiet.install_worker_filters()
    project = logging.getLogger("verl")
    if not project.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        project.addHandler(handler)
        project.propagate = False  # a root handler configured later must not print each line twice
    if project.level == logging.NOTSET or project.level > logging.INFO:
        project.setLevel(logging.INFO)
