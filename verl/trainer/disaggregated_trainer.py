# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Disaggregated asynchronous RL (worker.rollout.mode=disaggregated, docs/async.md): the `gen` phase of a step when
the engines have a resource pool of their own.

The rollout pool's engines generate without pause. A step sends them the last update's weights if they lack them
(broadcast while they generate, loaded between engine steps), admits prompts under the staleness bound and takes
complete groups as colocated mode does; the engines go on while the trainer trains. Checkpoints keep the in-flight
prompts and each engine's admission count (its requests' seeds follow it)."""

import functools
import json
import logging
import os
from collections import defaultdict
from typing import Any

from verl.protocol import DataProto
from verl.single_controller.ray.base import WorkerDiedError
from verl.trainer.async_trainer import AsyncRayPPOTrainer
from verl.trainer.checkpointing import atomic_write
from verl.trainer.metrics import append_metrics


logger = logging.getLogger(__name__)


_POLL_WAIT_S = 0.5
"""Longest an engine holds a poll (the driver launches scoring of new groups in between)."""
ENGINES_FILE = "rollout_engines.json"
"""{"generate_calls": [one per engine], "validate_calls": [...]} in a checkpoint directory."""


class DisaggregatedRayPPOTrainer(AsyncRayPPOTrainer):
    """AsyncRayPPOTrainer whose engines are the rollout pool's group `rollout_wg`."""

    def __init__(self, *args: Any, rollout_wg: Any, device: str = "cpu", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rollout_wg = rollout_wg
        self.transfer_backend = "nccl" if device == "cuda" else "gloo"
        self.engine_version: int | None = None
        """Weight updates the engines' weights carry (None: no weights yet)."""
        self.engine_dtype: str | None = None
        self.validation_sync: dict[str, list[float]] = defaultdict(list)
        """The figures of the weight sync a validation made, reported with the next step (whose own is skipped)."""

    def _connect(self) -> None:
        """Form the weight-transfer group of the trainer's rank 0 and every rollout process (all join at once)."""
        host, port = self.actor_rollout_ref_wg.weight_transfer_address()[0]
        world_size = 1 + self.rollout_wg.world_size
        args = (host, port, world_size, self.transfer_backend)
        trainer = self.actor_rollout_ref_wg.execute_all_async("init_weight_transfer", *args)
        engines = self.rollout_wg.execute_all_async("init_weight_transfer", *args)
        self.engine_dtype = engines.get()[0]
        trainer.get()

    def sync_engines(self, version: int, metrics: dict[str, list[float]] | None = None) -> None:
        """Send the actor's weights (after `version` updates) to the engines unless they have them."""
        if self.engine_version == version:
            return
        if self.engine_dtype is None:
            self._connect()
        bucket_mb = self.config.worker.rollout.weight_bucket_mb
        sent = self.actor_rollout_ref_wg.execute_all_async("send_weights", self.engine_dtype, bucket_mb)
        received = self.rollout_wg.execute_all_async("receive_weights", version)
        sent_metrics = sent.get()[0]  # a failing sender fails the receivers' broadcast too: it is the error to show
        received_metrics = received.get()
        self.engine_version = version
        if metrics is not None:
            append_metrics(metrics, [sent_metrics, *received_metrics])

    def _take_round(self, version: int, round_index: int, metrics: dict[str, list[float]]) -> DataProto:
        for key, values in self.validation_sync.items():
            metrics.setdefault(key, []).extend(values)
        self.validation_sync = defaultdict(list)
        self.sync_engines(version, metrics)  # once a step: `version` is the trained policy's
        engines = self.rollout_wg.world_size
        prompts = self._admit(version, engines)
        request = self._async_request(version, round_index, engines)
        self.rollout_wg.admit(prompts, request)
        poll = functools.partial(self.rollout_wg.poll, request, _POLL_WAIT_S)
        return self._taken(self._collect_polls(poll, metrics))

    def _trainer_survives(self, error: WorkerDiedError) -> bool:
        rollout = error.group is not None and error.group == getattr(self.rollout_wg, "_name_prefix", None)
        return rollout or super()._trainer_survives(error)

    def _write_run_state(self, path: str) -> None:
        super()._write_run_state(path)
        try:
            counts = self.rollout_wg.execute_all("seed_counts")
        except WorkerDiedError as error:  # saved after a rollout process died: a resume's engines seed afresh
            logger.warning("The rollout engines' seed counts are not saved with %s: %s", path, error)
            return
        generate, validate = zip(*counts)
        counters = {"generate_calls": list(generate), "validate_calls": list(validate)}
        atomic_write(os.path.join(path, ENGINES_FILE), lambda f: f.write(json.dumps(counters)))

    def _load_checkpoint(self) -> str | None:
        path = super()._load_checkpoint()
        engines_file = None if path is None else os.path.join(path, ENGINES_FILE)
        if engines_file is not None and os.path.isfile(engines_file):
            with open(engines_file) as f:
                counters = json.load(f)
            calls = counters["generate_calls"]
            if len(calls) == self.rollout_wg.world_size:  # another pool size starts the engines' seeds afresh
                validate = counters.get("validate_calls", [0] * len(calls))
                self.rollout_wg.execute_all("restore_seed_counts", calls, validate)
            else:
                logger.warning(
                    "%s was saved by %d rollout engines, this run has %d: their sampling seeds start afresh.",
                    path,
                    len(calls),
                    self.rollout_wg.world_size,
                )
        return path

    def validate(self) -> dict[str, float]:
        if self.val_dataloader is not None:
            self.sync_engines(self.global_step, self.validation_sync)  # the policy after this step's update
        return super().validate()
