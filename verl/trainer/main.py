# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Command-line entry: `python -m verl.trainer.main config=examples/config.yaml key=value ...`.

--dry-run       print the fully resolved config as YAML and exit (no Ray, no model; with USE_MODELSCOPE_HUB=1 a
                ModelScope id is fetched, as every run's config check does)
--help-config   list every config key with its type and description; `--help-config rollout temp` lists
                those whose name contains each word
"""

import logging
import sys

from verl.trainer.config import PPOConfig, load_config
from verl.utils.cli import keep_local_ray_on_loopback, load_config_or_exit, use_writable_dirs_or_exit


logger = logging.getLogger(__name__)

USAGE = (
    "usage: python -m verl.trainer.main config=path/to/config.yaml [section.key=value ...] [--dry-run] "
    "[--help-config [WORD ...]]"
)


def run(config: PPOConfig) -> None:
    """Start (or join) Ray and train. Bad data (found after Ray is up) stops the Ray this run started before the
    error is reported."""
    import ray

    from verl.single_controller.ray.resource import InsufficientResourcesError, PlacementGroupTimeoutError
    from verl.trainer import runner
    from verl.trainer.ray_setup import SetupError

    started_here = not ray.is_initialized()
    try:
        runner.run_ppo(config)
    except (SetupError, InsufficientResourcesError, PlacementGroupTimeoutError):
        if started_here:
            ray.shutdown()
        raise


def main(argv: list[str] | None = None) -> int:
    config = load_config_or_exit(argv, USAGE, __doc__, PPOConfig, load_config)
    if isinstance(config, int):
        return config
    keep_local_ray_on_loopback(max(config.trainer.nnodes, config.worker.reward.model.nnodes))
    if use_writable_dirs_or_exit() is not None:
        return 2
    from ray.exceptions import RayActorError

    from verl.algorithms.user_functions import AlgorithmFunctionError
    from verl.data.dataset import DatasetRowError
    from verl.envs.base import EnvCodeError, EnvStepTimeoutError
    from verl.models.loading import ModelLoadError
    from verl.rewards.function import RewardFunctionError, RewardTimeoutError
    from verl.single_controller.ray.base import WorkerDiedError
    from verl.single_controller.ray.resource import InsufficientResourcesError, PlacementGroupTimeoutError
    from verl.trainer.checkpointing import CheckpointSaveError, resume_hint
    from verl.trainer.preemption import TrainingInterrupted
    from verl.trainer.ray_setup import SetupError
    from verl.trainer.ray_trainer import OnlineFilteringError
    from verl.utils.module_loading import user_error_message

    user_code = (
        RewardFunctionError,
        RewardTimeoutError,
        EnvCodeError,
        EnvStepTimeoutError,
        AlgorithmFunctionError,
        OnlineFilteringError,
        DatasetRowError,  # a row that passed the scan fails when its batch is built (an image removed since)
    )
    trainer = config.trainer
    where = (trainer.find_last_checkpoint, trainer.load_checkpoint_path)  # where the same command starts again
    try:
        run(config)
    except (SetupError, CheckpointSaveError) as err:  # CheckpointSaveError: disk full or unwritable
        print(f"Error: {err}", file=sys.stderr)
        return 2 if isinstance(err, SetupError) else 1
    except ModelLoadError as err:  # a worker's model load, before any step
        print(f"Error: {user_error_message(err)}", file=sys.stderr)
        return 2
    except (InsufficientResourcesError, PlacementGroupTimeoutError) as err:  # the cluster, before any step
        print(f"Error: {err}", file=sys.stderr)
        return 2
    # the user's code, settings or data failed, or a worker (or a reward or judge actor) died
    except (*user_code, WorkerDiedError, RayActorError) as err:
        print(f"Error: {user_error_message(err)}", file=sys.stderr)
        print(resume_hint(trainer.save_checkpoint_path, *where), file=sys.stderr)
        return 1
    except TrainingInterrupted as err:  # preemption or Ctrl-C: the workers are gone, the checkpoint is on disk
        return err.report(trainer.save_checkpoint_path, *where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
