# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tracker: fans metrics and validation generations out to the backends named in trainer.logger."""

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
        self.backends: dict[str, Backend] = {}
        for name in loggers:
            if name == "console":
                self.backends[name] = ConsoleBackend()
            elif name == "file":
                self.backends[name] = FileBackend(log_dir, config)
            elif name == "tensorboard":
                self.backends[name] = TensorBoardBackend(log_dir, project, experiment)
            elif name == "wandb":
                self.backends[name] = WandbBackend(log_dir, project, experiment, config)
            elif name == "swanlab":
                self.backends[name] = SwanlabBackend(log_dir, project, experiment, config)
            elif name == "mlflow":
                self.backends[name] = MlflowBackend(log_dir, project, experiment, config)
            else:
                raise ValueError(
                    f"Unknown logger '{name}' in trainer.logger; choose from console, file, "
                    "tensorboard, wandb, swanlab, mlflow."
                )

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
