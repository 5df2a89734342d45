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
"""Disaggregated asynchronous RL (worker.rollout.mode=disaggregated, docs/async.md): the `gen` phase of a step when
the engines have a resource pool of their own.

The rollout pool's engines (verl.workers.rollout_worker) generate without pause. A step sends the weights of the
last update to them if they lack them (a broadcast over the weight-transfer group while they keep generating; they
load it between two engine steps), admits prompts under the staleness bound exactly as colocated mode does
(`Admission`), and takes the step's complete groups (earliest deadline first); while the trainer pool trains on them,
the engines go on with the groups in flight and the ones admitted for later steps. Checkpoints keep the in-flight
prompts, regenerated on resume, as in colocated mode.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.async_trainer import AsyncRayPPOTrainer
from verl.trainer.config import reward_stream_obstacle
from verl.trainer.metrics import append_metrics, applicable_values
from verl.workers.reward.manager import place_scores, valid_response_mask


_POLL_WAIT_S = 0.5
"""Longest an engine holds a poll before answering (the driver launches the scoring of new groups in between)."""


class StreamedScores:
    """Rule-based rewards launched group by group as the engines complete them (worker.reward.stream): each group's
    rows are scored with the others completed at the same time, and a step's batch gathers its rows' scores back."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.pending: dict[str, tuple[Any, list[int]]] = {}
        """uid -> (the scoring of the piece holding its group, the group's rows in that piece)."""
        self._results: dict[int, tuple[torch.Tensor, dict[str, list[float]]]] = {}

    def launch(self, piece: DataProto) -> None:
        handle = self.runner.submit(piece)
        rows: dict[str, list[int]] = {}
        for row, uid in enumerate(piece.non_tensor_batch["uid"]):
            rows.setdefault(uid, []).append(row)
        for uid, uid_rows in rows.items():
            self.pending[uid] = (handle, uid_rows)

    def take(self, batch: DataProto, get: Callable[[Any], Any]) -> tuple[float, torch.Tensor, dict[str, list[float]]]:
        """(share of the batch's groups already scored, token-level scores, columns) of `batch`, whose groups were
        all launched; their entries are dropped."""
        uids = list(dict.fromkeys(batch.non_tensor_batch["uid"]))
        missing = [uid for uid in uids if uid not in self.pending]
        if missing:
            raise RuntimeError(f"The groups {missing[:3]} reached the step without being scored; this is a bug.")
        ready = sum(_done(self.pending[uid][0]) for uid in uids) / max(len(uids), 1)
        seen: dict[str, int] = {}
        per_row: list[dict[str, float]] = []
        for uid in batch.non_tensor_batch["uid"]:
            handle, rows = self.pending[uid]
            key = id(handle)
            if key not in self._results:
                self._results[key] = get(handle)
            _, columns = self._results[key]
            row = rows[seen.get(uid, 0)]
            seen[uid] = seen.get(uid, 0) + 1
            per_row.append({name: values[row] for name, values in columns.items()})
        for uid in uids:
            handle, _ = self.pending.pop(uid)
            if not any(other is handle for other, _ in self.pending.values()):
                self._results.pop(id(handle), None)
        names = list(dict.fromkeys(name for row in per_row for name in row))
        columns = {name: [row.get(name, float("nan")) for row in per_row] for name in names}
        return ready, place_scores(columns["overall"], valid_response_mask(batch)), columns


def _done(handle: Any) -> bool:
    """Whether a scoring (a Future of run_in=driver, an ObjectRef of run_in=actor) has finished."""
    if hasattr(handle, "done"):
        return bool(handle.done())
    import ray

    finished, _ = ray.wait([handle], timeout=0)
    return bool(finished)


class DisaggregatedRayPPOTrainer(AsyncRayPPOTrainer):
    """AsyncRayPPOTrainer whose engines are the rollout pool's group `rollout_wg` (module docstring)."""

    def __init__(self, *args: Any, rollout_wg: Any, device: str = "cpu", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rollout_wg = rollout_wg
        self.transfer_backend = "nccl" if device == "cuda" else "gloo"
        self.engine_version: int | None = None
        """Weight updates the engines' weights carry (None: they hold no weights yet)."""
        self.engine_dtype: str | None = None
        reward = self.config.worker.reward
        self.stream_rewards = reward.stream is not False and reward_stream_obstacle(reward) is None
        """Score each group as soon as it is complete (worker.reward.stream), while the engines generate."""
        self.streamed = StreamedScores(self.reward_fn) if self.stream_rewards else None

    def _connect(self) -> None:
        """Form the weight-transfer group: the trainer's rank 0 and every rollout process (all join at once)."""
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
            append_metrics(metrics, sent_metrics)
            append_metrics(metrics, received_metrics)

    def _make_batch_data(self, metrics: dict[str, list[float]]) -> DataProto:
        version = self.global_step - 1  # weight updates the trained policy carries
        self.sync_engines(version, metrics)
        prompts = self._admit(version)
        engines = self.rollout_wg.world_size
        if len(prompts) % engines != 0:
            raise RuntimeError(f"{len(prompts)} admitted prompts do not split over the {engines} rollout engines.")
        self.rollout_wg.admit(prompts)
        quota = self.config.data.rollout_batch_size // engines
        parts: list[DataProto | None] = [None] * engines
        while any(part is None for part in parts):
            results = self.rollout_wg.poll(
                quota, version, self.admission.max_staleness, self._stage_meta(), _POLL_WAIT_S, self.stream_rewards
            )
            for rank, result in enumerate(results):
                if result["complete"] is not None:
                    self.streamed.launch(result["complete"])
                if result["batch"] is not None and parts[rank] is None:
                    parts[rank] = result["batch"]
                    append_metrics(metrics, result["metrics"])
        batch = self._trained(DataProto.concat(parts), version, metrics)
        if self.stream_rewards:
            self._attach_streamed_scores(batch, metrics)
        return batch

    def _attach_streamed_scores(self, batch: DataProto, metrics: dict[str, list[float]]) -> None:
        """The step's rewards from the scores launched group by group (waiting for those still running), as the
        step's reward phase would have set them."""
        ready, scores, columns = self.streamed.take(batch, self._get_reward)
        batch.batch["token_level_scores"] = scores
        batch.non_tensor_batch.update({f"reward/{k}": np.array(v, dtype=object) for k, v in columns.items()})
        append_metrics(metrics, applicable_values({f"reward/{k}": v for k, v in columns.items()}))
        append_metrics(metrics, {"async/rewards_ready_share": ready})
        self._check_reward_spread(scores)

    def validate(self) -> dict[str, float]:
        if self.val_dataloader is not None:
            self.sync_engines(self.global_step)  # validation scores the policy after this step's update
        return super().validate()
