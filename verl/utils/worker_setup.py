# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""What every Ray worker process of a run does before anything else (Ray's runtime_env worker_process_setup_hook,
set by `verl.trainer.ray_setup.start_ray`): silence the known-harmless third-party messages (`verl.utils.quiet`)
before vLLM or transformers is imported."""

from verl.utils import quiet


WORKER_SETUP_HOOK = "verl.utils.worker_setup.setup_worker_process"
"""The dotted name Ray's runtime_env takes for `setup_worker_process`."""


def setup_worker_process() -> None:
    quiet.install_worker_filters()
