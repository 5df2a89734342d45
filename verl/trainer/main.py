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
"""Command-line entry: `python -m verl.trainer.main config=examples/config.yaml key=value ...`.

--dry-run       print the fully resolved config as YAML and exit (no Ray, no model)
--help-config   list every config key with its type and description
"""

import logging
import sys

from verl.trainer.config import PPOConfig, load_config
from verl.utils.config import ConfigError, describe_fields, to_yaml


logger = logging.getLogger(__name__)

USAGE = (
    "usage: python -m verl.trainer.main config=path/to/config.yaml [section.key=value ...] [--dry-run] [--help-config]"
)


def print_config_help() -> None:
    for key, type_name, doc in describe_fields(PPOConfig):
        print(f"{key} ({type_name}): {doc}")


def run(config: PPOConfig) -> None:
    """Start (or join) Ray and train. Bad data (found after Ray is up) stops the Ray this run started before the
    error is reported."""
    import ray

    from verl.trainer import runner
    from verl.trainer.ray_setup import SetupError

    started_here = not ray.is_initialized()
    try:
        runner.run_ppo(config)
    except SetupError:
        if started_here:
            ray.shutdown()
        raise


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(USAGE)
        print(__doc__)
        return 0
    if "--help-config" in argv:
        print_config_help()
        return 0
    dry_run = "--dry-run" in argv
    argv = [arg for arg in argv if arg != "--dry-run"]
    try:
        config = load_config(argv)
    except ConfigError as err:
        print(f"Config error: {err}", file=sys.stderr)
        return 2
    except NotImplementedError as err:
        print(f"Not implemented: {err}", file=sys.stderr)
        return 2
    if dry_run:
        print(to_yaml(config), end="")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from verl.trainer.checkpointing import CheckpointSaveError
    from verl.trainer.preemption import TrainingInterrupted
    from verl.trainer.ray_setup import SetupError

    try:
        run(config)
    except SetupError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    except CheckpointSaveError as err:  # disk full or unwritable: the previous checkpoint is intact and latest
        print(f"Error: {err}", file=sys.stderr)
        return 1
    except TrainingInterrupted as err:  # preemption or Ctrl-C: the workers are gone, the checkpoint is on disk
        print(str(err), file=sys.stderr)
        return 128 + err.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
