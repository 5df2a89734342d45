# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What every Ray worker process of a run does before anything else (Ray's runtime_env worker_process_setup_hook,
set by `verl.trainer.ray_setup.start_ray`): silence the known-harmless third-party messages (`verl.utils.quiet`)
before vLLM or transformers is imported, and show this project's INFO lines as the driver does."""

import logging

from verl.utils import quiet
from verl.utils.cli import LOG_FORMAT


WORKER_SETUP_HOOK = "verl.utils.worker_setup.setup_worker_process"
"""The dotted name Ray's runtime_env takes for `setup_worker_process`."""


def setup_worker_process() -> None:
    """The known-harmless messages silenced; the `verl` loggers' INFO lines (the LoRA adapters' size, a frozen vision
    tower, the CPU engine's dtype, a saved checkpoint) on stderr, which Ray forwards to the driver's console: a worker
    process has no logging configured, so Python would show WARNING and above only. Other libraries' loggers keep
    their levels."""
    quiet.install_worker_filters()
    project = logging.getLogger("verl")
    if not project.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        project.addHandler(handler)
        project.propagate = False  # a root handler configured later must not print each line twice
    if project.level == logging.NOTSET or project.level > logging.INFO:
        project.setLevel(logging.INFO)
