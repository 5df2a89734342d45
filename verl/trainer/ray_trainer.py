# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""RayPPOTrainer: the single-controller loop. Each step is a flat list of named, timed phases (docs/data_flow.md):

    gen -> balance -> reward (async) -> old (off-policy only) -> ref -> values -> adv -> update_critic
        -> update_actor -> dump_rollouts -> validation -> save_checkpoint -> metrics

The driver holds no model: it moves DataProto batches between worker groups and computes advantages."""

import functools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any

import numpy as np
import ray
import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from verl.algorithms import core_algos, rollout_correction, user_functions
from verl.algorithms.schedules import EntropyController, response_length_at
from verl.data.dataset import DatasetRowError
from verl.data.rollout_dump import decode_texts, dump_rollouts
from verl.envs.base import EnvCodeError, EnvStepTimeoutError
from verl.protocol import DataProto
from verl.rewards.function import RewardFunctionError, RewardTimeoutError
from verl.rewards.scoring import BatchScorer
from verl.single_controller.ray.base import WorkerDiedError
from verl.trainer.checkpointing import (
    CheckpointTracker,
    atomic_write,
    save_step,
    saved_settings,
    step_dir,
    step_of,
    warn_if_data_changed,
    warn_if_settings_changed,
)
from verl.trainer.config import DERIVED_KEYS, RUN_DERIVED_KEYS, PPOConfig, worker_pools
from verl.trainer.data_loader import resume_loader
from verl.trainer.metrics import (
    append_metrics,
    applicable_values,
    compute_data_metrics,
    compute_mfu_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    new_metric_store,
    reduce_metrics,
    rows_to_log,
    validation_score_metrics,
)
from verl.trainer.preemption import StopRequest
from verl.utils.hub import weights_fingerprint
from verl.utils.seqlen_balancing import balance_batch
from verl.workers.config import UpdateRequest
from verl.workers.rollout.request_loop import RolloutRequest


logger = logging.getLogger(__name__)

USER_ERRORS = (EnvCodeError, EnvStepTimeoutError, RewardFunctionError, RewardTimeoutError, DatasetRowError)
"""Errors of the user's code, data or settings that stop a step (with OnlineFilteringError and the user's algorithm
functions' AlgorithmFunctionError): where one stops a synchronous step before its update, step N-1 is saved."""

GEN_TENSOR_KEYS = ("input_ids", "attention_mask", "position_ids")
GEN_NON_TENSOR_KEYS = ("raw_prompt_ids", "multi_modal_data", "max_response_tokens")
"""Non-tensor columns the engine reads (`max_response_tokens`: a row's own response cap, if any)."""


@contextmanager
def timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


def split_generation_inputs(batch: DataProto, all_columns: bool = False) -> DataProto:
    """Pop the prompt tensors (generation returns prompt+response) and share the raw prompt columns (every non-tensor
    column with `all_columns`: a multi-turn environment starts from the whole row)."""
    tensors = [key for key in GEN_TENSOR_KEYS if key in batch.batch.keys()]
    non_tensors = [key for key in batch.non_tensor_batch if all_columns or key in GEN_NON_TENSOR_KEYS]
    gen_batch = batch.select(batch_keys=[], non_tensor_batch_keys=non_tensors)
    gen_batch.union(batch.pop(batch_keys=tensors))
    return gen_batch


def _append_reward_metrics(metrics: dict[str, list[float]], batch: DataProto) -> None:
    """The per-response reward/<key> columns of a batch scored during generation, into the step's metrics."""
    for key in [key for key in batch.non_tensor_batch if key.startswith("reward/")]:
        append_metrics(metrics, applicable_values({key: [float(v) for v in batch.non_tensor_batch[key]]}))


def join_rollout(prompts: DataProto, output: DataProto, n: int) -> DataProto:
    """The prompts' columns (each row repeated n times) joined with the rollout's; an environment's images
    (`multi_modal_inputs` present) replace the prompts' media column. The prompt columns the rollout echoes back
    (`raw_prompt_ids`, the images, an environment's row) are the prompts' own, not compared again: union's
    element-by-element check of them cost 1-3 s a step at 4,096 rows, 10 s with an image a row."""
    repeated = prompts.repeat(n, interleave=True)
    if "multi_modal_inputs" in output.non_tensor_batch:
        repeated.non_tensor_batch.pop("multi_modal_data", None)
    for key in set(repeated.non_tensor_batch) & set(output.non_tensor_batch):
        output.non_tensor_batch.pop(key)
    return repeated.union(output)


def count_training_steps(config: PPOConfig, batches_per_epoch: int) -> int:
    """trainer.max_steps, or the steps total_epochs over the data take."""
    trainer, data = config.trainer, config.data
    if trainer.max_steps is not None:
        return trainer.max_steps
    prompts_per_batch = data.mini_rollout_batch_size or data.rollout_batch_size
    return max(1, batches_per_epoch * prompts_per_batch // data.rollout_batch_size) * trainer.total_epochs


def reward_parts(reward: Any) -> dict[str, str]:
    """What scores a run, for messages, by part: "rule" (the functions), "model", "judge"; those the run has."""
    rules = [f"reward function {reward.reward_function}"] if reward.reward_function else []
    if reward.routes:
        rules.append("routed reward functions " + ", ".join(f"{key}: {spec}" for key, spec in reward.routes.items()))
    if reward.rubric:
        rules.append("rubric " + ", ".join(reward.rubric))
    parts = {"rule": " + ".join(rules), "model": reward.model.model_path, "judge": reward.judge.model_path}
    names = {"rule": "", "model": "reward model ", "judge": "judge "}
    return {part: names[part] + text for part, text in parts.items() if text}


REWARD_ACTORS = {"rule": "reward actor", "judge": "judge actor"}
"""The `WorkerDiedError.group` of a dead reward actor (worker.reward.run_in=actor) or LLM judge actor, by part."""


def death_cause(error: WorkerDiedError) -> str:
    """What a step stopped in when `error`'s process died and the trainer survived it (`_trainer_survives`)."""
    return (
        f"the dead process of the {error.group}" if error.group in REWARD_ACTORS.values() else "a dead rollout process"
    )


class OnlineFilteringError(RuntimeError):
    """Online filtering could not fill a step within trainer.max_try_make_batch rounds, or filters on a score the
    reward does not return."""


class RayPPOTrainer:
    """Drives the worker groups, which `runner.py` creates and passes in."""

    def __init__(
        self,
        config: PPOConfig,
        tokenizer: Any,
        train_dataloader: Any,
        val_dataloader: Any | None,
        actor_rollout_ref_wg: Any,
        critic_wg: Any | None,
        reward_fn: Any | None,
        tracker: Any,
        reward_model_wg: Any | None = None,
        judge: Any | None = None,
        resume_from: str | None = None,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.train_dataloader = train_dataloader
        self.val_dataloader = val_dataloader
        self.actor_rollout_ref_wg = actor_rollout_ref_wg
        self.rollout_wg = actor_rollout_ref_wg
        """The group whose engines generate: the actor's (sync, colocated) or the rollout pool's (disaggregated)."""
        self.critic_wg = critic_wg
        self.reward_fn = reward_fn
        self.scorer = BatchScorer(config.worker.reward, tokenizer, reward_fn, reward_model_wg, judge, self._get_reward)
        self.tracker = tracker
        self.resume_from = resume_from
        """The checkpoint the run resumes from, chosen (and checked) before Ray started; None for a new run."""
        algo = config.algorithm
        self.use_critic = core_algos.estimator_needs_critic(algo.adv_estimator)
        self.use_reference = not algo.disable_kl
        self.kl_in_reward = self.use_reference and not algo.use_kl_loss
        actor = config.worker.actor
        # One epoch over one mini-batch is on-policy: the update's own forward gives the old log-probs, so the
        # separate forward is skipped unless the KL penalty in the reward needs them first.
        self.correction = algo.rollout_correction
        self.needs_old_log_probs = (
            actor.ppo_epochs != 1 or actor.global_batch_size < config.data.rollout_batch_size or self.kl_in_reward
        )
        if self.correction.mode == "bypass":  # the engine's log-probs are the old policy (the KL penalty's too)
            self.needs_old_log_probs = False
        elif self.correction.mode != "none":  # the correction compares recomputed and engine log-probs
            self.needs_old_log_probs = True
        elif config.worker.rollout.mode == "sync" and config.worker.rollout.calculate_log_probs:
            self.needs_old_log_probs = True  # asked for: the engine-trainer mismatch is logged
        self.model_fingerprint = weights_fingerprint(config.worker.actor.model.model_path)  # the weights started from
        self._loader_state_to_save: dict[str, Any] | None = None
        """The data position a save records instead of the loader's (`_save_before_failed_step`)."""
        self.reference_moved = algo.ref_sync_steps > 0
        """The reference is not the model path's (ref_sync_steps moves it, or a resumed checkpoint held a moved one):
        each checkpoint saves it, else a resume after one without would go back to the model path's."""
        self.kl_ctrl = core_algos.get_kl_controller(algo.kl_type, algo.kl_coef, algo.kl_target, algo.kl_horizon)
        self.entropy_ctrl = None
        if algo.entropy_control:
            self.entropy_ctrl = EntropyController(
                actor.entropy_coeff,
                algo.target_entropy,
                algo.entropy_coeff_delta,
                algo.entropy_coeff_min,
                algo.entropy_coeff_max,
            )
        self.global_step = 0
        self.ckpt_tracker = CheckpointTracker()
        self.total_steps = count_training_steps(config, len(train_dataloader))
        self._data_iter: Iterator | None = None
        self.flat_reward_steps = 0
        self.updating = False
        """The step has begun updating a model (the workers may no longer hold the last step's weights)."""

    # ------------------------------------------------------------------------------------------------ data

    def _next_batch(self) -> DataProto:
        """The next data-loader batch; a new epoch starts (and reshuffles) when one ends."""
        if self._data_iter is None:
            self._data_iter = iter(self.train_dataloader)
        try:
            return next(self._data_iter)
        except StopIteration:
            self._data_iter = iter(self.train_dataloader)
            return next(self._data_iter)

    def _rollout_request(self, **fields: Any) -> RolloutRequest:
        """This step's engine request: its data.response_length_schedule stage (if any) and `fields`."""
        schedule = self.config.data.response_length_schedule
        length = response_length_at(schedule, self.global_step, 0) if schedule else None
        return RolloutRequest(response_length=length, **fields)

    def _generate(self, prompts: DataProto, metrics: dict[str, list[float]]) -> DataProto:
        """n responses per prompt, joined with the prompt columns (and the ReMax greedy baseline)."""
        n = self.config.worker.rollout.n
        prompts.non_tensor_batch["uid"] = np.array(
            [f"{self.global_step}-{i}-{time.monotonic_ns()}" for i in range(len(prompts))], dtype=object
        )
        gen_batch = split_generation_inputs(prompts, all_columns=bool(self.config.worker.rollout.env))
        output = self.rollout_wg.generate_sequences(gen_batch, self._rollout_request())
        append_metrics(metrics, output.meta_info.pop("metrics", {}))
        if core_algos.estimator_needs_greedy_baseline(self.config.algorithm.adv_estimator):
            prompts.batch["reward_baselines"] = self._greedy_baselines(prompts, gen_batch)
        return join_rollout(prompts, output, n)

    def _greedy_baselines(self, prompts: DataProto, gen_batch: DataProto) -> torch.Tensor:
        """ReMax baseline per prompt: the reward of its greedy response under the engines' current weights."""
        greedy = self._rollout_request(sampling={"temperature": 0.0, "n": 1})
        output = self.rollout_wg.generate_sequences(gen_batch.select(deepcopy=True), greedy)
        scores, _ = self.scorer.score(join_rollout(prompts.select(deepcopy=True), output, 1))
        return scores.sum(-1)

    def _make_batch_data(self, metrics: dict[str, list[float]]) -> DataProto:
        """The step's samples, from rounds generated to completion (`_fill_batch`)."""
        return self._fill_batch(lambda: self._generate(self._next_batch(), metrics), metrics)

    def _fill_batch(self, generate_round: Callable[[], DataProto], metrics: dict[str, list[float]]) -> DataProto:
        """Run `generate_round()` until the step has rollout_batch_size prompts' groups, then drop the last round's
        surplus (as EasyR1, DAPO). Online filtering keeps only `_filter_groups`' groups, within
        trainer.max_try_make_batch rounds. Every rollout mode fills its steps here."""
        algo, data = self.config.algorithm, self.config.data
        target = data.rollout_batch_size * self.config.worker.rollout.n
        limit = self.config.trainer.max_try_make_batch
        kept: list[DataProto] = []
        num_kept, tries = 0, 0
        while num_kept < target:
            tries += 1
            if algo.online_filtering and limit > 0 and tries > limit:
                raise OnlineFilteringError(
                    f"Online filtering kept {num_kept // self.config.worker.rollout.n} of {data.rollout_batch_size} "
                    f"prompts after {limit} generation rounds (trainer.max_try_make_batch) in step "
                    f"{self.global_step}; widen algorithm.filter_low/filter_high, raise trainer.max_try_make_batch, "
                    "or set it <= 0 for no limit."
                )
            batch = generate_round()
            if algo.online_filtering:
                batch = self._filter_groups(batch, metrics)
            if batch is not None:
                kept.append(batch)
                num_kept += len(batch)
        batch = kept[0] if len(kept) == 1 and len(kept[0]) == target else DataProto.concat(kept)[:target]
        if "token_level_scores" in batch.batch.keys() and not algo.online_filtering:  # streamed rewards
            _append_reward_metrics(metrics, batch)
        return batch

    def _filter_groups(self, batch: DataProto, metrics: dict[str, list[float]]) -> DataProto | None:
        """DAPO's dynamic sampling: the groups whose mean algorithm.filter_key lies in (filter_low, filter_high), or
        None; scores `batch` unless already scored."""
        algo = self.config.algorithm
        if "token_level_scores" not in batch.batch.keys():
            pending = self.scorer.launch(batch)
            scores, reward_metrics = self.scorer.collect(batch, pending)
            append_metrics(metrics, pending.rm_metrics or {})  # reward_model/truncated_ratio, score_mean
            batch.batch["token_level_scores"] = scores
            batch.non_tensor_batch.update(
                {f"reward/{k}": np.array(v, dtype=object) for k, v in reward_metrics.items()}
            )
        _append_reward_metrics(metrics, batch)  # every generated response: the policy's, not the kept groups'
        column = f"reward/{algo.filter_key}"
        if column not in batch.non_tensor_batch:
            names = sorted(key.removeprefix("reward/") for key in batch.non_tensor_batch if key.startswith("reward/"))
            raise OnlineFilteringError(
                f"algorithm.filter_key='{algo.filter_key}' is not a score the reward returns (it returns {names}); "
                "set algorithm.filter_key to one of them."
            )
        values = np.asarray(batch.non_tensor_batch[column], dtype=np.float64)
        # NaN where a sample has no value (its group is dropped): a judge's unparsed grade now and then; but a key
        # that a reward route never returns (NaN on all its rows) drops its groups every step
        route_key = self.config.worker.reward.route_key
        routes = batch.non_tensor_batch.get(route_key)
        missing = np.isnan(values)
        if routes is not None and missing.any():
            without = sorted({str(route) for route in routes[missing] if missing[routes == route].all()})
            if without:
                raise OnlineFilteringError(
                    f"algorithm.filter_key='{algo.filter_key}' is not a score of the rows of {route_key} {without} "
                    "(their reward returns no such key), so their groups could never be kept; filter on a key every "
                    "route returns (overall)."
                )
        keep = core_algos.filter_groups_by_reward(
            values,
            batch.non_tensor_batch["uid"],
            algo.filter_low,
            algo.filter_high,
        )
        append_metrics(metrics, {"online_filtering/kept_ratio": len(keep) / len(batch)})
        return batch[np.asarray(keep)] if len(keep) > 0 else None

    def _balance_batch(self, batch: DataProto, metrics: dict[str, list[float]]) -> None:
        """Reorder samples (in place) so every DP rank gets a similar number of tokens."""
        world = self.actor_rollout_ref_wg.world_size
        if world > 1 and len(batch) % world == 0:
            append_metrics(metrics, balance_batch(batch, world))

    # ------------------------------------------------------------------------------------------------ one step

    def _compute_advantage(self, batch: DataProto) -> None:
        algo = self.config.algorithm
        kwargs: dict[str, Any] = dict(
            token_level_rewards=batch.batch["token_level_rewards"],
            response_mask=batch.batch["response_mask"],
            index=batch.non_tensor_batch["uid"],
            **{key: getattr(algo, key) for key in core_algos.ESTIMATOR_OPTIONS},  # gamma, lam, ... by name
        )
        kwargs.update({key: batch.batch[key] for key in ("values", "reward_baselines") if key in batch.batch.keys()})
        advantages, returns = core_algos.compute_advantage_return(algo.adv_estimator, **kwargs)
        batch.batch["advantages"], batch.batch["returns"] = advantages, returns

    def _get_reward(self, handle: Any, part: str) -> Any:
        """A reward part's result, or a RewardTimeoutError naming the part after worker.reward.timeout_s: `part` is
        "rule" (the functions' Future or ObjectRef; the error shows where they wait) or "judge" (the judge actor's
        ObjectRef)."""
        reward = self.config.worker.reward
        timeout = reward.timeout_s if reward.timeout_s > 0 else None
        if isinstance(handle, Future):  # the function's own errors (a TimeoutError too) come out of result()
            if wait([handle], timeout=timeout).done:
                return handle.result()
        else:
            try:
                return ray.get(handle, timeout=timeout)
            except ray.exceptions.GetTimeoutError:
                pass
            except ray.exceptions.RayActorError as err:  # the reward actor's or judge's process is gone
                raise WorkerDiedError(
                    f"The process of the {reward_parts(reward).get(part, part)} died while scoring step "
                    f"{self.global_step} (killed, or out of memory: check `dmesg`); the run cannot continue. Ray said: "
                    f"{err}",
                    REWARD_ACTORS.get(part),
                ) from None
        where = self.reward_fn.where() if part == "rule" and self.reward_fn is not None else ""
        raise RewardTimeoutError(
            f"The {reward_parts(reward).get(part, part)} did not score step {self.global_step}'s batch within "
            f"worker.reward.timeout_s={reward.timeout_s:g} s; it may hang (a loop, a lock, a network call). "
            "Fix it, or raise the timeout." + (f" Where it was when the time ran out:\n{where}" if where else "")
        )

    def _check_reward_spread(self, scores: torch.Tensor, advantages: torch.Tensor) -> None:
        """Warn when all samples of a step got the same reward and so every advantage is zero (a group-relative
        estimator; a critic's values or a KL penalty still give the step advantages): it trains nothing."""
        totals = scores.sum(dim=-1)
        if len(totals) > 1 and bool((totals == totals[0]).all()) and not bool(advantages.any()):
            self.flat_reward_steps += 1
            if self.flat_reward_steps in (1, 10) or self.flat_reward_steps % 100 == 0:
                logger.warning(
                    "Step %d: all %d samples got the same reward %.4g from %s (%d such step(s) so far); every "
                    "advantage is 0, so this step does not change the policy. Check the reward and the task's "
                    "difficulty.",
                    self.global_step,
                    len(totals),
                    float(totals[0]),
                    " + ".join(reward_parts(self.config.worker.reward).values()) or "no reward source",
                    self.flat_reward_steps,
                )

    def train_step(self, timing_raw: dict[str, float]) -> tuple[DataProto, dict[str, float]]:
        metrics = new_metric_store()
        wg = self.actor_rollout_ref_wg
        with timer("gen", timing_raw):
            append_metrics(metrics, self.rollout_wg.prepare_rollout_engine() or {})
            batch = self._make_batch_data(metrics)
            append_metrics(metrics, self.rollout_wg.release_rollout_engine() or {})
        self._balance_batch(batch, metrics)
        user_functions.set_training_step(self.global_step)  # names it in the driver's errors (estimator, KL, ...)

        pending = None
        if "token_level_scores" not in batch.batch.keys():
            with timer("reward", timing_raw):  # the reward model scores here; the actor and the judge meanwhile
                pending = self.scorer.launch(batch)
        if self.needs_old_log_probs:
            with timer("old", timing_raw):
                batch.union(wg.compute_log_probs(batch))
        if self.correction.mode != "none":
            self._correct_off_policy(batch, metrics)
        elif all(key in batch.batch.keys() for key in ("rollout_log_probs", "old_log_probs")):  # the mismatch alone
            old, engine = batch.batch["old_log_probs"], batch.batch["rollout_log_probs"]
            append_metrics(metrics, rollout_correction.mismatch_metrics(old, engine, batch.batch["response_mask"]))
        if self.use_reference:
            with timer("ref", timing_raw):
                batch.union(wg.compute_ref_log_probs(batch))
        if self.use_critic:
            with timer("values", timing_raw):
                batch.union(self.critic_wg.compute_values(batch))

        if pending is not None:
            with timer("reward", timing_raw):  # the wait for what the passes above did not hide
                scores, reward_metrics = self.scorer.collect(batch, pending)
            append_metrics(metrics, pending.rm_metrics or {})  # reward_model/truncated_ratio, score_mean
            batch.batch["token_level_scores"] = scores
            columns = {f"reward/{key}": values for key, values in reward_metrics.items()}
            append_metrics(metrics, applicable_values(columns))
            batch.non_tensor_batch.update({key: np.array(values, dtype=object) for key, values in columns.items()})
        with timer("adv", timing_raw):
            if self.kl_in_reward:
                rewards, kl_metrics = core_algos.apply_kl_penalty(
                    batch.batch["token_level_scores"],
                    batch.batch["old_log_probs"],
                    batch.batch["ref_log_probs"],
                    batch.batch["response_mask"],
                    self.kl_ctrl,
                    self.config.algorithm.kl_penalty,
                )
                batch.batch["token_level_rewards"] = rewards
                append_metrics(metrics, kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            self._compute_advantage(batch)
            advantages = batch.batch["advantages"] * batch.batch["response_mask"]
            self._check_reward_spread(batch.batch["token_level_scores"], advantages)

        self.updating = True
        if self.use_critic:
            with timer("update_critic", timing_raw):
                output = self.critic_wg.update_critic(batch, UpdateRequest(self.global_step))
                append_metrics(metrics, output.meta_info["metrics"])
        if self.global_step > self.config.trainer.critic_warmup:  # steps count from 1
            coef = None if self.entropy_ctrl is None else self.entropy_ctrl.applied
            with timer("update_actor", timing_raw):
                output = wg.update_actor(self._actor_update_batch(batch), UpdateRequest(self.global_step, coef))
                append_metrics(metrics, output.meta_info["metrics"])
            entropy = output.meta_info["metrics"].get("actor/entropy")  # none when every mini-batch was masked
            if self.entropy_ctrl is not None and entropy is not None:  # the next step's coefficient, from this step's
                self.entropy_ctrl.update(float(np.mean(entropy)))
            algo = self.config.algorithm
            if algo.ref_sync_steps > 0 and self.global_step % algo.ref_sync_steps == 0:  # TRL's, ProRL's reset
                with timer("sync_ref", timing_raw):
                    wg.sync_reference(algo.ref_sync_alpha, algo.ref_sync_reset_optimizer)
        if self.config.data.response_length_schedule:
            append_metrics(metrics, {"rollout/response_length_limit": self._rollout_request().response_length})
        return batch, reduce_metrics(metrics)

    def _correct_off_policy(self, batch: DataProto, metrics: dict[str, list[float]]) -> None:
        """algorithm.rollout_correction (docs/async.md): sets `rollout_is_weights` / `rollout_loss_mask` for the
        actor's update; with bypass the engine's log-probs become the old policy."""
        rollout_log_probs = batch.batch["rollout_log_probs"]
        if self.correction.mode == "bypass":
            batch.batch["old_log_probs"] = rollout_log_probs.clone()
        result = rollout_correction.compute_rollout_correction(
            self.correction, batch.batch["old_log_probs"], rollout_log_probs, batch.batch["response_mask"]
        )
        batch.batch["rollout_is_weights"] = result.weights
        batch.batch["rollout_loss_mask"] = result.mask
        if self.correction.mode != "bypass":  # bypass compares the engine's log-probs with themselves: 0 and 1
            append_metrics(metrics, result.metrics)

    def _actor_update_batch(self, batch: DataProto) -> DataProto:
        """With an off-policy correction the actor trains with `rollout_loss_mask` as response mask, and with
        algorithm.mask_truncated_responses without the truncated responses; the batch keeps every token for its
        metrics."""
        mask = batch.batch["rollout_loss_mask"] if "rollout_loss_mask" in batch.batch.keys() else None
        if self.config.algorithm.mask_truncated_responses:
            mask = batch.batch["response_mask"] if mask is None else mask
            mask = mask * ~batch.batch["rollout_truncated"].unsqueeze(-1)
        if mask is None:
            return batch
        update = batch.select(deepcopy=False)
        update.batch["response_mask"] = mask
        return update

    # ------------------------------------------------------------------------------------------------ validation

    def validate(self) -> dict[str, float]:
        """Generate for the whole validation set with val_override_config and score it."""
        if self.val_dataloader is None:
            return {}
        wg = self.rollout_wg
        n = int(self.config.worker.rollout.val_override_config.get("n", 1))  # one sample per prompt unless set
        scores: list[float] = []
        prompt_ids: list[str] = []
        sources: list[str] | None = []  # the reward's route_key column, while every batch has it
        route_key = self.config.worker.reward.route_key
        metrics = new_metric_store()
        samples: list[tuple[str, str, str, float]] = []
        to_log = rows_to_log(len(self.val_dataloader.dataset) * n, self.config.trainer.val_generations_to_log)
        first_row = 0  # of this batch, counted over the whole validation set
        logger.info(  # a large validation set takes minutes, with nothing else on the console meanwhile
            "Validation at step %d: %d prompts x %d sample(s), in %d batch(es).",
            self.global_step,
            len(self.val_dataloader.dataset),
            n,
            len(self.val_dataloader),
        )
        synced = new_metric_store()
        append_metrics(synced, wg.prepare_rollout_engine() or {})
        for batch_index, batch in enumerate(self.val_dataloader):
            uids = [f"val-{batch_index}-{i}" for i in range(len(batch))]
            batch.non_tensor_batch["uid"] = np.array(uids, dtype=object)
            gen_batch = split_generation_inputs(batch, all_columns=bool(self.config.worker.rollout.env))
            # at the full data.max_response_length, not the stage's: scores are comparable across stages
            output = wg.generate_sequences(gen_batch, RolloutRequest(validate=True, sampling={"n": n}))
            output.meta_info.pop("metrics", None)
            batch = join_rollout(batch, output, n)
            pending = self.scorer.launch(batch)
            reward_tensor, reward_metrics = self.scorer.collect(batch, pending)
            rm_metrics = (pending.rm_metrics or {}).items()  # a batch's figures weigh by its rows (the last is short)
            append_metrics(metrics, {f"val/{key}": [value] * len(batch) for key, value in rm_metrics})
            batch_scores = reward_tensor.sum(-1).tolist()
            scores.extend(batch_scores)
            prompt_ids.extend(batch.non_tensor_batch["uid"].tolist())
            column = batch.non_tensor_batch.get(route_key)
            sources = sources + column.tolist() if sources is not None and column is not None else None
            append_metrics(metrics, applicable_values({f"val/{k}_reward": v for k, v in reward_metrics.items()}))
            lengths = batch.batch["response_mask"].sum(-1).float()
            append_metrics(metrics, {"val_response_length/mean": lengths.tolist()})
            rows = [i for i in range(len(batch)) if first_row + i in to_log]  # only these are decoded
            first_row += len(batch)
            if rows:
                prompts, responses = decode_texts(batch[rows], self.tokenizer)
                truths = batch.non_tensor_batch.get("ground_truth", [None] * len(batch))
                truths = ["" if truths[i] is None else str(truths[i]) for i in rows]
                samples.extend(zip(prompts, responses, truths, [batch_scores[i] for i in rows]))
        wg.release_rollout_engine()
        result = reduce_metrics(metrics)
        result["val/reward_score"] = float(np.mean(scores)) if scores else 0.0
        result.update(validation_score_metrics(scores, prompt_ids, sources))
        # the first sync's weight check (val_before_train makes it here): its figures go in this row
        result.update(
            {key: value for key, value in reduce_metrics(synced).items() if key.startswith("rollout/weight_sync_")}
        )
        self.tracker.log_generations(samples, self.global_step)
        return result

    # ------------------------------------------------------------------------------------------------ checkpoints

    def _save_checkpoint(self, val_score: float | None) -> None:
        """global_step_N of the roles, the data-loader and trainer state (`save_step`)."""
        trainer = self.config.trainer
        more_to_come = self.global_step < self.total_steps
        self.ckpt_tracker = save_step(
            trainer.save_checkpoint_path,
            self.global_step,
            self.ckpt_tracker,
            val_score,
            self._write_checkpoint,
            trainer.save_limit,
            more_to_come,
        )

    def _write_checkpoint(self, path: str) -> None:
        trainer = self.config.trainer
        os.makedirs(path, exist_ok=True)
        # a reference that ref_sync_steps moves (or moved) is saved beside the actor (a fixed one is the model path's)
        reference = os.path.join(path, "ref") if self.reference_moved and not trainer.save_model_only else None
        self.actor_rollout_ref_wg.save_checkpoint(os.path.join(path, "actor"), trainer.save_model_only, reference)
        if self.use_critic:
            self.critic_wg.save_checkpoint(os.path.join(path, "critic"), trainer.save_model_only)
        if not trainer.save_model_only:
            loader_state = self._loader_state_to_save or self.train_dataloader.state_dict()
            atomic_write(os.path.join(path, "dataloader.pt"), lambda f: torch.save(loader_state, f), binary=True)
            self._write_run_state(path)
            state = {
                "trainer": "rl",
                "model_fingerprint": self.model_fingerprint,
                "global_step": self.global_step,
                "train_rows": len(self.train_dataloader.dataset),
                "seed": self.config.data.seed,
                "shuffle": self.config.data.shuffle,
                "rollout_batch_size": self.config.data.rollout_batch_size,
                "kl_ctrl": self.kl_ctrl.state_dict(),
                "settings": saved_settings(self.config),
            }
            if self.entropy_ctrl is not None:
                state["entropy_ctrl"] = self.entropy_ctrl.state_dict()
            # last: a step folder without it is never resumed from (a save killed before it is an interrupted one)
            atomic_write(os.path.join(path, "trainer_state.json"), lambda f: json.dump(state, f))

    def _write_run_state(self, path: str) -> None:
        """What a mode keeps beside the trainer state (asynchronous modes: their prompts in flight, the engines'
        seed counters), written before trainer_state.json."""

    def _load_checkpoint(self) -> str | None:
        """Resume from `resume_from`; returns its path, or None."""
        trainer, path = self.config.trainer, self.resume_from
        if path is None:
            return None
        logger.info("Resuming from %s", path)
        self.global_step = step_of(path)
        reference = os.path.join(path, "ref") if self.use_reference else None  # restored wherever it was saved
        self.actor_rollout_ref_wg.load_checkpoint(os.path.join(path, "actor"), reference)
        self.reference_moved = self.reference_moved or (reference is not None and os.path.isdir(reference))
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(path, "critic"))
        state_file = os.path.join(path, "trainer_state.json")
        state = {}
        if os.path.isfile(state_file):
            with open(state_file, encoding="utf-8") as f:
                state = json.load(f)
        resume_loader(self.train_dataloader, os.path.join(path, "dataloader.pt"), state, self.config.data, path)
        if state:
            warn_if_data_changed(state, len(self.train_dataloader.dataset), path)
            # copies of other keys, the lr schedule's length (trainer.max_steps'), and keys with their own warning
            told = (*DERIVED_KEYS, *RUN_DERIVED_KEYS, "data.rollout_batch_size", "data.seed", "data.shuffle")
            warn_if_settings_changed(state, self.config, path, told)
            size = self.config.data.rollout_batch_size
            if state.get("rollout_batch_size", size) != size:  # the data position is kept; the step count is not
                logger.warning(
                    "data.rollout_batch_size=%d, and %s was saved with %d: the run resumes at step %d, and its steps "
                    "from there on take %d prompts each, so it ends at step %d (total_epochs or max_steps count them) "
                    "and the learning-rate schedule spans those steps.",
                    size,
                    path,
                    state["rollout_batch_size"],
                    self.global_step,
                    size,
                    self.total_steps,
                )
            self.kl_ctrl.load_state_dict(state["kl_ctrl"])
            if self.entropy_ctrl is not None and "entropy_ctrl" in state:
                self.entropy_ctrl.load_state_dict(state["entropy_ctrl"])
        self.ckpt_tracker = CheckpointTracker.resumed(trainer.save_checkpoint_path, self.global_step)
        return path

    # ------------------------------------------------------------------------------------------------ the loop

    def fit(self) -> dict[str, float]:
        try:  # the step that run-time errors name is this run's, and no longer set once it ends (a sweep runs several)
            with user_functions.training_step(None):
                return self._fit()
        finally:  # end the loader workers now: at interpreter exit torch would report each as killed, with a traceback
            data_iter, self._data_iter = self._data_iter, None
            shutdown = getattr(data_iter, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()

    def _fit(self) -> dict[str, float]:
        trainer = self.config.trainer
        self._load_checkpoint()
        resumed = self.global_step > 0
        val_metrics: dict[str, float] = {}
        # A resumed run validated before its checkpoint; validating again would only log a second row for the step.
        if trainer.val_only or (trainer.val_before_train and not resumed and self.val_dataloader is not None):
            val_metrics = self.validate()
            self.tracker.log(val_metrics, step=self.global_step)
            if trainer.val_only:
                return val_metrics
        num_devices = self.actor_rollout_ref_wg.world_size
        worker = self.config.worker
        self.flops = {"actor": {**self.actor_rollout_ref_wg.flops_info()[0], "ppo_epochs": worker.actor.ppo_epochs}}
        if self.use_critic:
            self.flops["critic"] = {**self.critic_wg.flops_info()[0], "ppo_epochs": worker.critic.ppo_epochs}
        progress = tqdm(total=self.total_steps, initial=self.global_step, desc="train", dynamic_ncols=True)
        # a resumed run's own step is saved (and was validated if it was the last): not again at the end
        last_saved = last_validated = self.global_step if resumed else -1
        first_step = self.global_step
        # logging_redirect_tqdm: log lines (steps, validations, warnings) print above the bar, not through it; the bar
        # ends its line also when a step fails, so the error prints on a line of its own
        resume = (trainer.find_last_checkpoint, trainer.load_checkpoint_path)
        with StopRequest(trainer.signal_grace_s, resume).installed() as stop, logging_redirect_tqdm(), progress:
            while True:
                done = self.global_step >= self.total_steps
                if stop.requested and (not done or stop.exit_at_once):  # (Ray's store lost: also after the last step)
                    progress.close()
                    unsaved = self.global_step > first_step and last_saved != self.global_step
                    fresh = val_metrics if last_validated == self.global_step else {}  # a score of this step's own
                    save = functools.partial(self._save_checkpoint, fresh.get("val/reward_score"))
                    stop.stop(self.global_step, unsaved, save, trainer.save_checkpoint_path)
                if done:
                    break
                last_saved, last_validated, val_metrics = self._fit_step(
                    progress, num_devices, last_saved, last_validated, val_metrics
                )
        if last_validated != self.global_step and self.val_dataloader is not None:
            val_metrics = self.validate()
            self.tracker.log(val_metrics, step=self.global_step)
        if last_saved != self.global_step:
            self._save_checkpoint(val_metrics.get("val/reward_score"))
        return val_metrics

    def _position_before_failed_step(self, loader_state: dict[str, Any]) -> dict[str, Any]:
        """The data position a save of the step before a failed one records: the loader's before the failed step."""
        return loader_state

    def _save_before_failed_step(
        self, loader_state: dict[str, Any], last_saved: int, cause: str = "the user's code"
    ) -> None:
        """Step N failed in the user's code, data or settings (`cause`) before its update: save step N-1 (the weights
        the workers hold) unless saved, with the data position before step N, so that a resume runs step N again.
        (The engines' seed counters have moved on: the retried step samples afresh.)"""
        done = self.global_step - 1
        if done > 0 and last_saved != done:
            resume = f"a resume runs step {done + 1} again"
            self._save_before_error(done, f"Step {done + 1}", resume, loader_state, cause=cause)

    def _trainer_survives(self, error: WorkerDiedError) -> bool:
        """Whether the processes that hold the trained models outlive the death `error` reports (the reward or judge
        actor's; a rollout pool's engine process, mode=disaggregated): then the last step can be saved before the run
        stops."""
        return error.group in REWARD_ACTORS.values()

    def _validate_trained_step(self) -> dict[str, float]:
        """`validate` after this step's update. The user's code or data failing in it (a reward function, an
        environment, a validation row) saves this step first, where the last step's validation came before the run's
        only save (trainer.save_freq=-1); so does a reward, judge or rollout pool's process dying in it
        (`_trainer_survives`)."""
        try:
            return self.validate()
        except (*USER_ERRORS, WorkerDiedError) as error:
            died = isinstance(error, WorkerDiedError)
            if died and not self._trainer_survives(error):
                raise
            path = step_dir(self.config.trainer.save_checkpoint_path, self.global_step)
            resume = (
                "a resume goes on after it without this validation (trainer.val_only=true with "
                f"trainer.load_checkpoint_path={path} runs it)"
            )
            failed = f"The validation after step {self.global_step}"
            cause = death_cause(error) if died else "the user's code"
            rollout_died = died and error.group not in REWARD_ACTORS.values()  # its engine cannot be released
            self._save_before_error(self.global_step, failed, resume, release=not rollout_died, cause=cause)
            raise

    def _save_before_error(
        self,
        step: int,
        failed: str,
        resume: str,
        loader_state: Any = None,
        release: bool = False,
        cause: str = "the user's code",
    ) -> None:
        """Save `step`, the weights the workers hold, before an error in `cause` (the user's code, in `failed`) goes
        up, and say so (`resume`: where a resume goes on); with `loader_state`, the data position it records. Without
        it a run with trainer.save_freq=-1 (the default) lost every step. A save that fails is logged: the error that
        stopped the run is the one to report. `release`: the engine, done generating, goes to sleep first (the RNG as
        before it), as at the end of a validation."""
        self.global_step, self._loader_state_to_save = step, loader_state
        try:
            if release:
                self.rollout_wg.release_rollout_engine()
            self._save_checkpoint(None)
        except Exception as save_error:  # (a full disk)
            logger.error("Step %d could not be saved before stopping: %s", step, save_error)
            return
        finally:
            self._loader_state_to_save = None
        if self.config.trainer.save_model_only:  # nothing to resume from, only a model to export
            resume = "its weights only (trainer.save_model_only=true), which a run cannot resume from"
        path = step_dir(self.config.trainer.save_checkpoint_path, step)
        logger.error(
            "%s stopped in %s (the error follows); step %d, which the workers hold, is saved to %s first: %s.",
            failed,
            cause,
            step,
            path,
            resume,
        )

    def _log_step(self, batch: Any, metrics: dict[str, float], timing_raw: dict[str, float], num_devices: int) -> None:
        """The step's row of metrics: its update's, its batch's statistics, timings, throughput and MFU."""
        metrics.update(compute_data_metrics(batch, self.use_critic))
        metrics.update(compute_timing_metrics(batch, timing_raw))
        all_devices = sum(worker_pools(self.config).values())  # with a rollout or reward model pool of their own
        metrics.update(compute_throughput_metrics(batch, timing_raw, all_devices))
        skipped = {"actor": metrics.get("actor/skipped_token_share", 0.0)}  # rows the update left out: not computed
        metrics.update(compute_mfu_metrics(batch, timing_raw, num_devices, self.flops, skipped))
        self.tracker.log(metrics, step=self.global_step)

    def _fit_step(
        self, progress: Any, num_devices: int, last_saved: int, last_validated: int, val_metrics: dict[str, float]
    ) -> tuple[int, int, dict[str, float]]:
        """One training step with its validation, checkpoint and logging; returns the updated bookkeeping."""
        trainer = self.config.trainer
        self.global_step += 1
        timing_raw: dict[str, float] = {}
        with timer("step", timing_raw):
            # the user's code failing a step before its update leaves the weights the last step's: saved first
            before = self.train_dataloader.state_dict()
            self.updating = False
            try:
                batch, metrics = self.train_step(timing_raw)
            except (*USER_ERRORS, OnlineFilteringError, user_functions.AlgorithmFunctionError):
                if not self.updating:  # a user's loss fails in the update: not saved
                    self._save_before_failed_step(self._position_before_failed_step(before), last_saved)
                raise
            except WorkerDiedError as error:
                # the reward or judge actor's process, a rollout pool's engine process: the trainer's still hold the
                # last step's weights
                if not self.updating and self._trainer_survives(error):
                    position = self._position_before_failed_step(before)
                    self._save_before_failed_step(position, last_saved, death_cause(error))
                raise
            if trainer.rollout_data_dir and self.global_step % trainer.rollout_data_freq == 0:
                with timer("dump_rollouts", timing_raw):
                    dump_rollouts(batch, self.global_step, trainer.rollout_data_dir, self.tokenizer)
        # validation and the checkpoint are timed on their own, outside the step (verl's timing_s/step, so that
        # perf/throughput does not dip on every validating or saving step)
        is_last = self.global_step >= self.total_steps
        periodic = trainer.val_freq > 0 and self.global_step % trainer.val_freq == 0
        # the last step's validation goes in the step's own row (wandb drops a row for a step it has passed)
        if periodic or (is_last and (trainer.val_freq > 0 or self.val_dataloader is not None)):
            try:
                with timer("validation", timing_raw):
                    val_metrics = self._validate_trained_step()
            except BaseException:
                if self.ckpt_tracker.last_global_step == self.global_step:  # saved first: a resume goes on after it
                    self._log_step(batch, metrics, timing_raw, num_devices)
                raise
            metrics.update(val_metrics)
            last_validated = self.global_step
        if (trainer.save_freq > 0 and self.global_step % trainer.save_freq == 0) or is_last:
            # save_limit keeps the best checkpoint by the score of its own step: none if this step did not validate
            score = val_metrics.get("val/reward_score") if last_validated == self.global_step else None
            with timer("save_checkpoint", timing_raw):
                self._save_checkpoint(score)
            last_saved = self.global_step
        self._log_step(batch, metrics, timing_raw, num_devices)
        progress.set_postfix(
            reward=f"{metrics['critic/score/mean']:.3f}", tok_s=f"{metrics.get('perf/throughput', 0.0):.0f}"
        )
        progress.update(1)
        return last_saved, last_validated, val_metrics
