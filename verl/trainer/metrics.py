# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Metrics of one training step, named as EasyR1 users know them (critic/score/mean, response_length/mean, ...)."""

import math
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from verl.algorithms.core_algos import explained_variance
from verl.protocol import DataProto


def reduce_metrics(metrics: dict[str, list[float]]) -> dict[str, float]:
    """Mean of every list of values (per rank or micro-batch); the largest of a maximum's and the smallest of a
    minimum's (a key whose last part has a word `max` or `min`: `rollout/weight_sync_max_gap`,
    `perf/max_memory_allocated_gb`), which each rank reports of its own share. Per-sample columns (`reward/*`,
    `env/*`, `val/*`), whose names a user's function chooses, are always averaged."""
    return {key: float(_reduction(key)(values)) for key, values in metrics.items() if len(values) > 0}


def _reduction(key: str) -> Any:
    if key.startswith(("reward/", "env/", "val/")):
        return np.mean
    words = set(key.rsplit("/", 1)[-1].split("_"))
    if ("max" in words) != ("min" in words):
        return np.max if "max" in words else np.min
    return np.mean


def applicable_values(columns: dict[str, list[float]]) -> dict[str, list[float]]:
    """Reward columns without NaNs: a routed reward marks keys a row's function lacks as NaN, so each key's mean is
    over the rows it applies to."""
    return {key: [v for v in values if v == v] for key, values in columns.items()}


def append_metrics(store: dict[str, list[float]], new: dict[str, Any] | list[dict[str, Any]]) -> None:
    """Add values (or lists) by key; a list of dicts (one per rank) adds each."""
    if isinstance(new, list):
        for per_rank in new:
            append_metrics(store, per_rank or {})
        return
    for key, value in new.items():
        store[key].extend(value if isinstance(value, (list, tuple, np.ndarray)) else [value])


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {f"{prefix}/{name}": getattr(values, name)().item() for name in ("mean", "max", "min")}


def compute_data_metrics(batch: DataProto, use_critic: bool) -> dict[str, float]:
    response_mask = batch.batch["response_mask"].bool()
    max_response_length = batch.batch["responses"].shape[-1]
    prompt_mask = batch.batch["attention_mask"][:, :-max_response_length].bool()
    max_prompt_length = prompt_mask.shape[-1]
    prompt_length = prompt_mask.sum(-1).float()
    response_length = response_mask.sum(-1).float()

    metrics: dict[str, float] = {}
    metrics.update(_stats("critic/score", batch.batch["token_level_scores"].sum(-1)))
    metrics.update(_stats("critic/rewards", batch.batch["token_level_rewards"].sum(-1)))
    metrics.update(_stats("critic/advantages", torch.masked_select(batch.batch["advantages"], response_mask)))
    returns = torch.masked_select(batch.batch["returns"], response_mask)
    metrics.update(_stats("critic/returns", returns))
    if use_critic:
        metrics.update(_stats("critic/values", torch.masked_select(batch.batch["values"], response_mask)))
        explained = explained_variance(batch.batch["returns"], batch.batch["values"], response_mask)
        if not math.isnan(explained):  # returns that do not vary explain nothing: left out, not -1e5 x the residual
            metrics["critic/vf_explained_var"] = explained
    metrics.update(_stats("response_length", response_length))
    # the whole response, an environment's tokens included: an episode that used up its budget reached the width
    used = batch.batch["attention_mask"][:, -max_response_length:].sum(-1)
    metrics["response_length/clip_ratio"] = (used >= max_response_length).float().mean().item()
    if "rollout_truncated" in batch.batch.keys():
        metrics["response_length/truncated_ratio"] = batch.batch["rollout_truncated"].float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = (prompt_length >= max_prompt_length).float().mean().item()
    metrics.update(compute_env_metrics(batch))
    return metrics


def compute_env_metrics(batch: DataProto) -> dict[str, float]:
    """Means of the episodes' turns, tool calls, tool errors and truncations ({} for single-turn). Environment tokens
    are in the response but not in response_length (the model's tokens)."""
    metrics = {}
    for key, column in batch.non_tensor_batch.items():  # the counts above and the environment's episode_info
        if key.startswith("env_") and len(column):
            try:
                values = column.astype(np.float64)
            except (TypeError, ValueError):  # a dataset's own env_* column of text, passed through
                continue
            if not np.isnan(values).all():  # no episode of the batch reported the key: left out, not NaN
                metrics[f"env/{key[len('env_') :]}/mean"] = float(np.nanmean(values))
    if "env_turns" in batch.non_tensor_batch:
        response_length = batch.batch["responses"].shape[-1]
        valid = batch.batch["attention_mask"][:, -response_length:].sum(-1).float()
        metrics["env/env_tokens/mean"] = (valid - batch.batch["response_mask"].sum(-1).float()).mean().item()
    return metrics


def rows_to_log(total: int, count: int) -> set[int]:
    """Which of a validation's `total` samples trainer.val_generations_to_log logs: `count` of them drawn with a fixed
    seed, the same ones every validation so that they can be compared over time. Known before generation, so that
    only those are decoded (not every sample of a large set, to log two)."""
    if count <= 0 or total <= 0:
        return set()
    return set(np.random.RandomState(42).permutation(total)[:count].tolist())


def validation_score_metrics(
    scores: list[float], prompt_ids: list[str], sources: list[str] | None
) -> dict[str, float]:
    """With several samples per prompt (n, from val_override_config): val/reward_score/best@n, the mean over prompts
    of their best sample's score (pass@n for 0/1 rewards). With a source column of several values (the reward's
    route_key, data_source by default): val/<source>/reward_score, and its best@n, per source."""
    by_prompt: dict[str, list[float]] = defaultdict(list)
    source_of: dict[str, str] = {}
    for index, (prompt, score) in enumerate(zip(prompt_ids, scores)):
        by_prompt[prompt].append(score)
        if sources is not None:
            source_of[prompt] = str(sources[index])
    n = max((len(group) for group in by_prompt.values()), default=1)
    groups = {"val/": list(by_prompt)}
    if len(set(source_of.values())) > 1:
        for prompt, source in source_of.items():
            groups.setdefault(f"val/{source}/", []).append(prompt)
    metrics = {}
    for prefix, prompts in groups.items():
        if prefix != "val/":
            metrics[f"{prefix}reward_score"] = float(np.mean([s for p in prompts for s in by_prompt[p]]))
        if n > 1:
            metrics[f"{prefix}reward_score/best@{n}"] = float(np.mean([max(by_prompt[p]) for p in prompts]))
    return metrics


def compute_timing_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, float]:
    """timing_s/<phase> and timing_per_token_ms/<phase> (per token for the model phases)."""
    response_tokens = batch.batch["response_mask"].sum().item()
    all_tokens = batch.batch["attention_mask"].sum().item()
    model_phases = ("ref", "old", "values", "adv", "update_critic", "update_actor")
    tokens_of_phase = {"gen": response_tokens, **dict.fromkeys(model_phases, all_tokens)}
    metrics = {f"timing_s/{name}": seconds for name, seconds in timing_raw.items()}
    for name, tokens in tokens_of_phase.items():
        if name in timing_raw and tokens > 0:
            metrics[f"timing_per_token_ms/{name}"] = timing_raw[name] * 1000.0 / tokens
    return metrics


def compute_throughput_metrics(batch: DataProto, timing_raw: dict[str, float], num_devices: int) -> dict[str, float]:
    total_tokens = float(batch.batch["attention_mask"].sum().item())
    step_time = timing_raw.get("step", 0.0)
    metrics = {"perf/total_num_tokens": total_tokens, "perf/time_per_step": step_time}
    if step_time > 0:
        metrics["perf/throughput"] = total_tokens / (step_time * num_devices)
    return metrics


def compute_mfu_metrics(
    batch: DataProto,
    timing_raw: dict[str, float],
    num_devices: int,
    flops: dict[str, dict[str, float]],
    skipped: dict[str, float] | None = None,
) -> dict[str, float]:
    """perf/mfu_actor and perf/mfu_critic over every PPO epoch (model FLOPs utilisation: the model's FLOPs per token
    (`matmul_flops_per_token`) x tokens, its LM head's x response tokens (the only ones it scores), per second over
    peak FLOP/s); `flops` maps "actor"/"critic" to the worker's `flops_info` plus the role's "ppo_epochs"; `skipped`
    the share of a role's tokens its update left out (worker.actor.skip_zero_advantage_rows), not computed."""
    tokens = float(batch.batch["attention_mask"].sum().item())
    mask = batch.batch.get("response_mask")
    response_tokens = float(mask.sum().item()) if mask is not None else tokens
    metrics = {}
    for role, info in flops.items():
        seconds = timing_raw.get(f"update_{role}", 0.0)
        if seconds > 0:
            peak = info["peak_flops"] * num_devices
            per_step = info["flops_per_token"] * tokens + info.get("head_flops_per_token", 0.0) * response_tokens
            flops_done = per_step * info["ppo_epochs"] * (1.0 - (skipped or {}).get(role, 0.0))
            metrics[f"perf/mfu_{role}"] = flops_done / seconds / peak if peak > 0 else 0.0
    return metrics


def new_metric_store() -> dict[str, list[float]]:
    return defaultdict(list)
