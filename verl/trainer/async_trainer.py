# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Colocated asynchronous RL (worker.rollout.mode=colocated, docs/async.md): the `gen` phase of a step, asynchronous.
A step runs the synchronous trainer's generation rounds (`_fill_batch`). Each round admits prompts as the staleness
bound allows (`Admission`); the engines run until the round's groups are complete, unfinished samples keep their
tokens across the weight sync. The rest of the step is synchronous. max_staleness=0 reproduces mode=sync exactly.
In-flight prompts are checkpointed and regenerated from the start on resume: none is lost or trained twice."""

import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.algorithms import core_algos
from verl.data.dataset import RESPONSE_BUDGET_COLUMN
from verl.protocol import DataProto
from verl.rewards.manager import place_scores, valid_response_mask
from verl.trainer.checkpointing import atomic_write
from verl.trainer.config import reward_stream_obstacle, round_size
from verl.trainer.metrics import append_metrics
from verl.trainer.ray_trainer import RayPPOTrainer, split_generation_inputs
from verl.workers.rollout.request_loop import RolloutRequest


logger = logging.getLogger(__name__)

IN_FLIGHT_FILE = "async_in_flight.pt"
"""Prompts admitted but not yet trained, in a checkpoint directory."""


@dataclass
class Admission:
    """Staleness bounded by pacing admission (as AReaL, SkyRL): at most max_staleness + 1 rounds of round_size prompts
    are in flight. Rounds take groups earliest deadline first, so a group admitted at version a is taken by version
    a + max_staleness. A taken group leaves the count whether trained or dropped by online filtering. No prompt is
    dropped or requeued for being slow."""

    round_size: int
    max_staleness: int

    def rounds_to_admit(self, in_flight: int) -> int:
        return max(0, ((self.max_staleness + 1) * self.round_size - in_flight) // self.round_size)


def staleness_metrics(versions: torch.Tensor, resumed: torch.Tensor, version: int) -> dict[str, float]:
    """async/staleness_{mean,max} (versions behind, over response tokens; a sequence counts by its oldest token) and
    async/resumed_share (samples continued after a weight sync)."""
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


class StreamedScores:
    """Rewards launched group by group as the engines complete them (worker.reward.stream), by every part of the
    run's reward (`BatchScorer`); a step's batch gathers its rows' scores back."""

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer
        self.pending: dict[str, tuple[int, list[int]]] = {}
        """uid -> (launch number of its piece, the group's rows in that piece)."""
        self._pieces: dict[int, tuple[DataProto, Any]] = {}
        self._results: dict[int, tuple[torch.Tensor, dict[str, list[float]]]] = {}
        self._launched = 0

    def launch(self, piece: DataProto) -> None:
        twice = sorted({str(uid) for uid in piece.non_tensor_batch["uid"] if uid in self.pending})
        if twice:  # a group admitted twice under one uid: its rows would take the other's scores
            raise RuntimeError(f"The groups {twice[:3]} were launched for scoring twice; this is a bug.")
        key = self._launched
        self._launched += 1
        self._pieces[key] = (piece, self.scorer.launch(piece, wait_for_model=False))
        rows: dict[str, list[int]] = {}
        for row, uid in enumerate(piece.non_tensor_batch["uid"]):
            rows.setdefault(uid, []).append(row)
        for uid, uid_rows in rows.items():
            self.pending[uid] = (key, uid_rows)

    def take(self, batch: DataProto) -> tuple[float, torch.Tensor, dict[str, list[float]], dict[str, float]]:
        """(share of the batch's groups already scored, token-level scores, columns, reward-model metrics) for
        `batch`, whose groups were all launched; their entries are dropped. The reward model's metrics are its
        pieces' weighted by their rows, and reward_model/score_mean is the mean of `batch`'s own rm_score (a piece
        may hold groups of other steps)."""
        uids = list(dict.fromkeys(batch.non_tensor_batch["uid"]))
        missing = [uid for uid in uids if uid not in self.pending]
        if missing:
            raise RuntimeError(f"The groups {missing[:3]} reached the step without being scored; this is a bug.")
        ready = sum(self._pieces[self.pending[uid][0]][1].done() for uid in uids) / max(len(uids), 1)
        model_metrics = []
        seen: dict[str, int] = {}
        per_row: list[dict[str, float]] = []
        for uid in batch.non_tensor_batch["uid"]:
            key, rows = self.pending[uid]
            if key not in self._results:
                piece, pending = self._pieces[key]
                self._results[key] = self.scorer.collect(piece, pending)
                if pending.rm_metrics:
                    model_metrics.append((pending.rm_metrics, len(piece)))
            _, columns = self._results[key]
            row = rows[seen.get(uid, 0)]
            seen[uid] = seen.get(uid, 0) + 1
            per_row.append({name: values[row] for name, values in columns.items()})
        for uid in uids:
            key, _ = self.pending.pop(uid)
            if not any(other == key for other, _ in self.pending.values()):
                self._results.pop(key, None)
                self._pieces.pop(key, None)
        names = list(dict.fromkeys(name for row in per_row for name in row))
        columns = {name: [row.get(name, float("nan")) for row in per_row] for name in names}
        weights = sum(rows for _, rows in model_metrics)
        merged = {
            name: sum(metrics.get(name, 0.0) * rows for metrics, rows in model_metrics) / weights
            for name in dict.fromkeys(name for metrics, _ in model_metrics for name in metrics)
        }
        if merged and columns.get("rm_score"):
            merged["reward_model/score_mean"] = float(np.mean(columns["rm_score"]))
        return ready, place_scores(columns["overall"], valid_response_mask(batch)), columns, merged


class AsyncRayPPOTrainer(RayPPOTrainer):
    """RayPPOTrainer whose `gen` phase is the colocated asynchronous rollout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rollout = self.config.worker.rollout
        self.admission = Admission(round_size(self.config.data)[1], rollout.max_staleness)
        self.in_flight: dict[str, DataProto] = {}
        """Prompt rows admitted and not yet trained, by uid (checkpointed)."""
        self._readmit: DataProto | None = None
        self._admitted_length: dict[str, int] = {}
        """With data.response_length_schedule: the stage's response length each in-flight prompt was admitted with
        (its samples' budget, whatever stage the step that takes it is in)."""
        self._in_flight_at_step_start: dict[str, DataProto] | None = None
        """The prompt rows in flight when this step began, before its admissions (what a save of the step before
        records if this step fails: `_position_before_failed_step`)."""
        reward = self.config.worker.reward
        self.stream_rewards = reward.stream is not False and reward_stream_obstacle(reward, rollout.mode) is None
        """Score each group as soon as it is complete, while the engines generate."""
        self.streamed = StreamedScores(self.scorer) if self.stream_rewards else None

    def _make_batch_data(self, metrics: dict[str, list[float]]) -> DataProto:
        version = self.global_step - 1  # weight updates the engine's weights carry
        self._in_flight_at_step_start = dict(self.in_flight)
        rounds = itertools.count()
        batch = self._fill_batch(lambda: self._take_round(version, next(rounds), metrics), metrics)
        versions, resumed = batch.batch["rollout_versions"], batch.batch["rollout_resumed"]
        append_metrics(metrics, staleness_metrics(versions, resumed, version))
        append_metrics(metrics, {"async/in_flight_prompts": float(len(self.in_flight))})
        return batch

    def _take_round(self, version: int, round_index: int, metrics: dict[str, list[float]]) -> DataProto:
        """One generation round: admit what the staleness bound allows, take the round's complete groups."""
        prompts = self._admit(version, self.actor_rollout_ref_wg.world_size)
        request = self._async_request(version, round_index, self.actor_rollout_ref_wg.world_size)
        calls = [prompts]

        def poll() -> list[dict[str, Any]]:  # with streamed rewards the engines stop to hand over complete groups
            rows = calls.pop() if calls else prompts[:0]  # the prompts on the first call only
            return self.actor_rollout_ref_wg.generate_sequences_async(rows, request)

        return self._taken(self._collect_polls(poll, metrics))

    def _async_request(self, version: int, round_index: int, engines: int) -> RolloutRequest:
        """Round `round_index`'s request: each of the `engines` DP ranks returns its share of the round's groups."""
        quota = self.admission.round_size // engines
        staleness = self.admission.max_staleness
        return self._rollout_request(
            version=version, quota=quota, max_staleness=staleness, stream=self.stream_rewards, round=round_index
        )

    def _add_greedy_baselines(self, batch: DataProto) -> None:
        """ReMax baselines: one greedy call on the batch's prompts with this step's engine weights."""
        uids = list(dict.fromkeys(batch.non_tensor_batch["uid"]))
        prompts = DataProto.concat([self.in_flight[uid] for uid in uids]).select(deepcopy=True)
        if any(uid in self._admitted_length for uid in uids):  # the greedy answer gets its samples' budget
            caps = prompts.non_tensor_batch.get(RESPONSE_BUDGET_COLUMN, [None] * len(uids))
            budgets = []
            for uid, cap in zip(uids, caps):
                stage = self._admitted_length.get(uid)
                has_cap = cap is not None and not (isinstance(cap, float) and np.isnan(cap))
                budgets.append(stage if not has_cap else int(cap) if stage is None else min(int(cap), stage))
            prompts.non_tensor_batch[RESPONSE_BUDGET_COLUMN] = np.array(budgets, dtype=object)
        gen_batch = split_generation_inputs(prompts, all_columns=bool(self.config.worker.rollout.env))
        values = self._greedy_baselines(prompts, gen_batch)
        per_prompt = dict(zip(uids, values.tolist()))
        baselines = [per_prompt[uid] for uid in batch.non_tensor_batch["uid"]]
        batch.batch["reward_baselines"] = torch.tensor(baselines, dtype=values.dtype)

    def _collect_polls(self, poll: Callable[[], list[dict[str, Any]]], metrics: dict[str, list[float]]) -> DataProto:
        """Poll the engines (one {"batch", "complete", "metrics"} per rank) until each returned its part, launching
        the scoring of every complete group handed over; returns the batch, rank by rank, with streamed scores."""
        parts: list[DataProto | None] | None = None
        while parts is None or any(part is None for part in parts):
            results = poll()
            parts = parts or [None] * len(results)
            for rank, result in enumerate(results):
                if result.get("complete") is not None:
                    self.streamed.launch(result["complete"])
                if result.get("batch") is not None and parts[rank] is None:
                    parts[rank] = result["batch"]
                    append_metrics(metrics, result.get("metrics") or {})
        batch = DataProto.concat(parts)
        if self.stream_rewards:
            self._attach_streamed_scores(batch, metrics)
        return batch

    def _attach_streamed_scores(self, batch: DataProto, metrics: dict[str, list[float]]) -> None:
        """Set the step's rewards from the streamed scores (waiting for any still running)."""
        ready, scores, columns, model_metrics = self.streamed.take(batch)
        append_metrics(metrics, model_metrics)  # reward_model/truncated_ratio, score_mean
        batch.batch["token_level_scores"] = scores  # the reward/* metrics: of the step's batch (`_fill_batch`)
        batch.non_tensor_batch.update({f"reward/{k}": np.array(v, dtype=object) for k, v in columns.items()})
        append_metrics(metrics, {"async/rewards_ready_share": ready})

    def _admit(self, version: int, ranks: int) -> DataProto:
        """The prompts this round admits (a resumed run's in-flight ones first), given uids and recorded in flight;
        they must split evenly over the `ranks` engines (dispatch would pad them with copies: a prompt trained twice
        under one uid)."""
        parts = [self._readmit] if self._readmit is not None else []
        self._readmit = None
        for _ in range(self.admission.rounds_to_admit(len(self.in_flight))):
            prompts = self._next_batch()
            prompts.non_tensor_batch["uid"] = np.array(
                [f"{self.global_step}-{i}-{time.monotonic_ns()}" for i in range(len(prompts))], dtype=object
            )
            for row, uid in enumerate(prompts.non_tensor_batch["uid"]):
                self.in_flight[uid] = prompts[row : row + 1]
            parts.append(prompts)
        if not parts:
            raise RuntimeError(
                f"Step {self.global_step} admitted no prompts: {len(self.in_flight)} in flight at version {version} "
                f"with worker.rollout.max_staleness={self.admission.max_staleness}; this is a bug in the admission."
            )
        prompts = DataProto.concat(parts)
        stage = self._rollout_request().response_length  # None without data.response_length_schedule
        if stage is not None:
            self._admitted_length.update(dict.fromkeys(prompts.non_tensor_batch["uid"], stage))
        if len(prompts) % ranks != 0:
            raise RuntimeError(f"{len(prompts)} admitted prompts do not split over the {ranks} rollout engines.")
        return prompts

    def _taken(self, batch: DataProto) -> DataProto:
        """`batch` with its ReMax baselines (before online filtering, as mode=sync); its prompts leave the in-flight
        count, trained or dropped, so admission may replace them."""
        if core_algos.estimator_needs_greedy_baseline(self.config.algorithm.adv_estimator):
            self._add_greedy_baselines(batch)
        for uid in dict.fromkeys(batch.non_tensor_batch["uid"]):
            self.in_flight.pop(uid, None)
            self._admitted_length.pop(uid, None)
        return batch

    # ------------------------------------------------------------------------------------------------ checkpoints

    def _position_before_failed_step(self, loader_state: dict[str, Any]) -> dict[str, Any]:
        """The state before the failed step: the prompts in flight when it began and the loader's position then
        (`loader_state`), so the save of the step before records what a save at its end would have, and a resume
        generates them again. (Putting the failed step's taken prompts back beside its own admissions held more
        prompts than max_staleness + 1 rounds whenever a step took more than one round, and the resume refused that
        checkpoint.)"""
        if self._in_flight_at_step_start is None:  # failed before generating: nothing admitted or taken
            return loader_state
        self.in_flight, self._in_flight_at_step_start = self._in_flight_at_step_start, None
        return loader_state

    def _write_run_state(self, path: str) -> None:
        super()._write_run_state(path)
        rows = DataProto.concat(list(self.in_flight.values())) if self.in_flight else None
        atomic_write(os.path.join(path, IN_FLIGHT_FILE), lambda f: torch.save(rows, f), binary=True)

    def _load_checkpoint(self) -> str | None:
        path = super()._load_checkpoint()
        if path is None:
            return None
        in_flight_file = os.path.join(path, IN_FLIGHT_FILE)
        rows = torch.load(in_flight_file, weights_only=False) if os.path.isfile(in_flight_file) else None
        # admitted again, from their start (runner._check_in_flight bounded their number before Ray started)
        if rows is not None and len(rows) > 0:
            self._readmit = rows
            self.in_flight = {uid: rows[i : i + 1] for i, uid in enumerate(rows.non_tensor_batch["uid"])}
        logger.info(
            "Asynchronous rollout resumed at step %d with %d in-flight prompts to regenerate.",
            self.global_step,
            0 if rows is None else len(rows),
        )
        return path
