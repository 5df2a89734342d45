# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tracker: fans metrics and validation generations out to the backends named in trainer.logger."""

from collections.abc import Callable
from typing import Any

from verl.utils.logger.backends import (
    Backend,
    ConsoleBackend,
    FileBackend,
    Generation,
    MlflowBackend,
    SwanlabBackend,
    TensorBoardBackend,
    WandbBackend,
)


class Tracker:
    def __init__(self, loggers: list[str], project: str, experiment: str, log_dir: str, config: dict[str, Any]):
        factories: dict[str, Callable[[], Backend]] = {
            "console": ConsoleBackend,
            "file": lambda: FileBackend(log_dir, config),
            "tensorboard": lambda: TensorBoardBackend(log_dir, project, experiment),
            "wandb": lambda: WandbBackend(log_dir, project, experiment, config),
            "swanlab": lambda: SwanlabBackend(log_dir, project, experiment, config),
            "mlflow": lambda: MlflowBackend(log_dir, project, experiment, config),
        }
        self.backends: dict[str, Backend] = {}
        for name in loggers:
            if name not in factories:
                raise ValueError(f"Unknown logger '{name}' in trainer.logger; choose from {', '.join(factories)}.")
            self.backends[name] = factories[name]()

    def log(self, metrics: dict[str, float], step: int) -> None:
        for backend in self.backends.values():
            backend.log(metrics, step)

    def log_generations(self, samples: list[Generation], step: int) -> None:
        if samples:
            for backend in self.backends.values():
                backend.log_generations(samples, step)

    def finish(self) -> None:
        for backend in self.backends.values():
            backend.finish()
