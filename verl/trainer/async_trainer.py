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
"""Colocated asynchronous RL (worker.rollout.mode=colocated, docs/async.md): the `gen` phase of a step, asynchronous.

Each step admits prompts while the staleness bound allows (`Admission`), then the workers' engines run their request
loops until the step's groups are complete; unfinished samples stop with their tokens and continue after the weight
sync. Everything after `gen` is the synchronous trainer's step. With max_staleness=0 exactly one batch is admitted
per step and every group completes before training, so batches, losses and weights equal mode=sync.

In-flight prompts are saved with each checkpoint and regenerated from their start on resume (their partial tokens
and the engine's state are not saved): no prompt is lost or trained twice.
"""

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.checkpointing import atomic_write
from verl.trainer.metrics import append_metrics
from verl.trainer.ray_trainer import RayPPOTrainer


logger = logging.getLogger(__name__)

IN_FLIGHT_FILE = "async_in_flight.pt"
"""The prompts admitted but not yet trained, in a checkpoint directory."""


@dataclass
class Admission:
    """Staleness bounded by pacing admission (as AReaL and SkyRL do): at policy version v (updates done), the prompts
    ever admitted (trained + in flight) stay within (max_staleness + v + 1) x batch_size. With max_staleness=0 a
    step admits exactly the batch it trains; no prompt is ever dropped or requeued for being slow."""

    batch_size: int
    max_staleness: int
    admitted: int = 0

    def batches_to_admit(self, version: int) -> int:
        """Whole batches that may be admitted now (each step consumes one batch of groups)."""
        limit = (self.max_staleness + version + 1) * self.batch_size
        return max(0, (limit - self.admitted) // self.batch_size)


def staleness_metrics(versions: torch.Tensor, resumed: torch.Tensor, version: int) -> dict[str, float]:
    """async/staleness_{mean,max} (versions behind the trained policy, over response tokens; a sequence counts by its
    oldest token), async/resumed_share (samples continued after a weight sync)."""
    valid = versions >= 0
    behind = (version - versions).clamp(min=0).float()
    per_sequence = torch.where(valid, behind, torch.zeros_like(behind)).amax(dim=-1)
    token_mean = float(behind[valid].mean()) if bool(valid.any()) else 0.0
    return {
        "async/staleness_mean": token_mean,
        "async/staleness_max": float(per_sequence.max()) if len(per_sequence) else 0.0,
        "async/sequence_staleness_mean": float(per_sequence.mean()) if len(per_sequence) else 0.0,
        "async/resumed_share": float((resumed > 0).float().mean()) if len(resumed) else 0.0,
    }


class AsyncRayPPOTrainer(RayPPOTrainer):
    """RayPPOTrainer whose `gen` phase is the colocated asynchronous rollout (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rollout = self.config.worker.rollout
        self.admission = Admission(self.config.data.rollout_batch_size, rollout.max_staleness)
        self.in_flight: dict[str, DataProto] = {}
        """Prompt rows admitted and not yet trained, by uid (saved with checkpoints)."""
        self._readmit: DataProto | None = None

    def _make_batch_data(self, metrics: dict[str, list[float]]) -> DataProto:
        version = self.global_step - 1  # weight updates the engine's weights carry
        prompts = self._admit(version)
        prompts.meta_info.update(quota=self.config.data.rollout_batch_size // self.actor_rollout_ref_wg.world_size)
        batch = self.actor_rollout_ref_wg.generate_sequences_async(prompts)
        in_flight = batch.meta_info.pop("in_flight_groups", None)
        if in_flight is not None:
            append_metrics(metrics, {"async/in_flight_groups_rank0": float(in_flight)})
        return self._trained(batch, version, metrics)

    def _admit(self, version: int) -> DataProto:
        """The prompts this step admits (the in-flight ones of a resumed run first), with their uids, recorded as in
        flight; meta_info carries the stage, `version` and `max_staleness`."""
        batch_size = self.config.data.rollout_batch_size
        parts = [self._readmit] if self._readmit is not None else []
        self._readmit = None
        for _ in range(self.admission.batches_to_admit(version)):
            prompts = self._next_batch()
            prompts.non_tensor_batch["uid"] = np.array(
                [f"{self.global_step}-{i}-{time.monotonic_ns()}" for i in range(len(prompts))], dtype=object
            )
            for row, uid in enumerate(prompts.non_tensor_batch["uid"]):
                self.in_flight[uid] = prompts[row : row + 1]
            self.admission.admitted += batch_size
            parts.append(prompts)
        if not parts:
            raise RuntimeError(
                f"Step {self.global_step} admitted no prompts: {self.admission.admitted} admitted at version {version} "
                f"with worker.rollout.max_staleness={self.admission.max_staleness}; this is a bug in the admission."
            )
        prompts = DataProto.concat(parts)
        prompts.meta_info.update(self._stage_meta())
        prompts.meta_info.update(version=version, max_staleness=self.admission.max_staleness)
        return prompts

    def _trained(self, batch: DataProto, version: int, metrics: dict[str, list[float]]) -> DataProto:
        """`batch`'s prompts are no longer in flight; its staleness metrics."""
        for uid in dict.fromkeys(batch.non_tensor_batch["uid"]):
            self.in_flight.pop(uid, None)
        versions, resumed = batch.batch["rollout_versions"], batch.batch["rollout_resumed"]
        append_metrics(metrics, staleness_metrics(versions, resumed, version))
        append_metrics(metrics, {"async/in_flight_prompts": float(len(self.in_flight))})
        return batch

    # ------------------------------------------------------------------------------------------------ checkpoints

    def _write_checkpoint(self, path: str) -> None:
        super()._write_checkpoint(path)
        if self.config.trainer.save_model_only:
            return
        rows = DataProto.concat(list(self.in_flight.values())) if self.in_flight else None
        atomic_write(os.path.join(path, IN_FLIGHT_FILE), lambda f: torch.save(rows, f), binary=True)

    def _load_checkpoint(self) -> str | None:
        path = super()._load_checkpoint()
        if path is None:
            return None
        in_flight_file = os.path.join(path, IN_FLIGHT_FILE)
        rows = torch.load(in_flight_file, weights_only=False) if os.path.isfile(in_flight_file) else None
        batch_size = self.config.data.rollout_batch_size
        # every trained step consumed one batch; the in-flight prompts are admitted again, from their start
        self.admission.admitted = self.global_step * batch_size
        if rows is not None and len(rows) > 0:
            self._readmit = rows
            self.in_flight = {uid: rows[i : i + 1] for i, uid in enumerate(rows.non_tensor_batch["uid"])}
            self.admission.admitted += len(rows)
        logger.info(
            "Asynchronous rollout resumed at step %d with %d in-flight prompts to regenerate.",
            self.global_step,
            0 if rows is None else len(rows),
        )
        return path
