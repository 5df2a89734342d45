# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tracker: fans metrics and validation generations out to the backends named in trainer.logger."""

import logging
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


logger = logging.getLogger(__name__)

_WHAT_IS_LOST = {"log": "metrics", "log_generations": "validation samples"}


class LoggerStartError(ValueError):
    """A backend of trainer.logger failed to start (the trainers report it as a setup error, one line)."""


RUN_STATUSES = ("finished", "failed", "killed")
"""How a run ended, for `Tracker.finish`: on its own, stopped by an error, stopped by a signal (preemption, Ctrl-C)."""


class Tracker:
    """`start_step`: the checkpoint step the run resumes from (0 for a new run), so that the file and TensorBoard logs
    drop what the run redoes or starts over; `val_only`: a validation-only run, logged beside the training run's."""

    def __init__(
        self,
        loggers: list[str],
        project: str,
        experiment: str,
        log_dir: str,
        config: dict[str, Any],
        start_step: int = 0,
        val_only: bool = False,
    ):
        factories: dict[str, Callable[[], Backend]] = {
            "console": ConsoleBackend,
            "file": lambda: FileBackend(log_dir, config, start_step, val_only),
            "tensorboard": lambda: TensorBoardBackend(log_dir, project, experiment, start_step, val_only),
            "wandb": lambda: WandbBackend(log_dir, project, experiment, config),
            "swanlab": lambda: SwanlabBackend(log_dir, project, experiment, config),
            "mlflow": lambda: MlflowBackend(log_dir, project, experiment, config),
        }
        self.backends: dict[str, Backend] = {}
        self.failures: dict[str, int] = {}
        for name in loggers:
            if name not in factories:
                raise ValueError(f"Unknown logger '{name}' in trainer.logger; choose from {', '.join(factories)}.")
            try:
                self.backends[name] = factories[name]()
            except Exception as err:  # a bad mode, an unknown run id, a tracking server down: one line, not its stack
                self.finish("failed")
                cause = " ".join(str(err).split())
                raise LoggerStartError(
                    f"trainer.logger's {name} could not start ({type(err).__name__}: {cause[:400]}); fix its "
                    f"settings or drop {name} from trainer.logger."
                ) from err

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._each("log", metrics, step)

    def log_generations(self, samples: list[Generation], step: int) -> None:
        if samples:
            self._each("log_generations", samples, step)

    def finish(self, status: str = "finished") -> None:
        """End every backend's run as `status` (RUN_STATUSES): a tracking server's dashboard shows a run an error or a
        signal stopped as such, not as finished."""
        if status not in RUN_STATUSES:
            raise ValueError(f"Tracker.finish: status {status!r} is not one of {RUN_STATUSES}.")
        self._each("finish", status)

    def _each(self, method: str, *args: Any) -> None:
        """Call `method` on every backend. One that fails (a full disk under the file log, a tracking server that
        stopped answering) is warned about, the first time and every 100th, and the run goes on: metrics are not
        worth the training run; the other backends (and the console) still get them."""
        for name, backend in self.backends.items():
            try:
                getattr(backend, method)(*args)
            except Exception as error:  # any backend's failure, reported with its type
                failures = self.failures[name] = self.failures.get(name, 0) + 1
                if failures == 1 or failures % 100 == 0:
                    logger.warning(
                        "The %s logger failed (%s: %s); its %s are lost from here until it works again (%d "
                        "failure(s) so far). Training goes on.",
                        name,
                        type(error).__name__,
                        error,
                        _WHAT_IS_LOST.get(method, "logs"),
                        failures,
                    )
