# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What every Ray worker process of a run does before anything else (Ray's runtime_env worker_process_setup_hook,
set by `verl.trainer.ray_setup.start_ray`): silence the known-harmless third-party messages (`verl.utils.quiet`)
before vLLM or transformers is imported."""

from verl.utils import quiet


WORKER_SETUP_HOOK = "verl.utils.worker_setup.setup_worker_process"
"""The dotted name Ray's runtime_env takes for `setup_worker_process`."""


def setup_worker_process() -> None:
    quiet.install_worker_filters()
