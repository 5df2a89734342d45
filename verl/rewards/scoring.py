# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reward of a batch: rule-based functions, a reward model and an LLM judge, combined.

    overall = worker.reward.rule_weight x rule + worker.reward.model.weight x rm_score
              + worker.reward.judge.weight x judge_score

Each part is optional; the rule functions and judge score while the reward model runs. Each part is logged under its
own key beside `overall` (docs/metrics.md).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto, plain_value
from verl.rewards.function import RewardFunctionError
from verl.rewards.llm_judge import SCORE_KEYS
from verl.rewards.manager import decode_responses, place_scores, user_messages, valid_response_mask


logger = logging.getLogger(__name__)

COMBINED_KEYS = frozenset({"rule_overall", "rm_score", *SCORE_KEYS})
"""The columns a combined reward adds beside the reward function's."""


@dataclass
class PendingReward:
    rule: Any = None
    """The rule-based reward's result: a Future (run_in=driver), an ObjectRef (run_in=actor) or None."""
    judge: Any = None
    """The judge actor's result (an ObjectRef) or None."""
    rm_scores: torch.Tensor | None = None
    """The reward model's scores (B,), once computed."""
    rm_metrics: dict[str, float] | None = None
    rm_future: Any = None
    """The reward model's call while it runs (launched with wait_for_model=False), or None."""

    def done(self) -> bool:
        """Whether every part has finished (a part still running is waited for by `BatchScorer.collect`)."""
        handles = [self.rule, self.judge] + (list(self.rm_future.handles) if self.rm_future is not None else [])
        return all(_finished(handle) for handle in handles if handle is not None)


def _finished(handle: Any) -> bool:
    """Whether a Future (the driver's reward thread) or a Ray ObjectRef (an actor's or worker's call) has finished."""
    if hasattr(handle, "done"):
        return bool(handle.done())
    import ray

    finished, _ = ray.wait([handle], timeout=0)
    return bool(finished)


class BatchScorer:
    def __init__(
        self,
        reward_config: Any,
        tokenizer: Any,
        rule_runner: Any | None,
        reward_model_wg: Any | None,
        judge_actor: Any | None,
        get: Callable[[Any, str], Any],
    ) -> None:
        if rule_runner is None and reward_model_wg is None and judge_actor is None:
            raise ValueError("No reward: set worker.reward.reward_function (or routes), a reward model or a judge.")
        self.config = reward_config
        self.tokenizer = tokenizer
        # the rule-based functions: a LocalReward or an ActorReward (both have submit(batch), where() and close())
        self.rule_runner, self.reward_model_wg, self.judge_actor = rule_runner, reward_model_wg, judge_actor
        self.get = get
        """get(handle, part): a part's ("rule", "judge") result, waited for as the trainer does (its timeout)."""
        self.ungraded_batches = 0
        """Batches where most of the judge's answers held no grade (warned about at the 1st, 10th, every 100th)."""

    def launch(self, batch: DataProto, wait_for_model: bool = True) -> PendingReward:
        """Start every part of `batch`'s reward; the reward model is waited for unless `wait_for_model` is False
        (streamed rewards: `collect` waits for it)."""
        pending = PendingReward()
        if self.rule_runner is not None:
            pending.rule = self.rule_runner.submit(batch)
        if self.judge_actor is not None:
            truths = batch.non_tensor_batch.get("ground_truth", [None] * len(batch))
            prompts = user_messages(batch, self.tokenizer)
            responses = decode_responses(batch, self.tokenizer, self.config.judge.strip_reasoning)
            pending.judge = self.judge_actor.grade.remote(prompts, responses, [plain_value(t) for t in truths])
        if self.reward_model_wg is not None:
            pending.rm_future = self.reward_model_wg.submit("compute_rm_score", batch)
            if wait_for_model:
                self._take_model_scores(pending)
        return pending

    @staticmethod
    def _take_model_scores(pending: PendingReward) -> None:
        output = pending.rm_future.get()
        pending.rm_future = None
        pending.rm_scores = output.batch["rm_scores"].float()
        bad = (~torch.isfinite(pending.rm_scores)).nonzero().flatten().tolist()
        if bad:  # as a reward function's: one NaN made its group's advantages NaN, and the update was skipped
            raise RewardFunctionError(
                f"The reward model (worker.reward.model) scored sample {bad[0]} {pending.rm_scores[bad[0]].item()} "
                f"({len(bad)} of {len(pending.rm_scores)} samples not finite); rewards must be finite. Check the "
                "model's weights and dtype (fp16 overflows where bf16 does not).",
                sample_index=bad[0],
            )
        pending.rm_metrics = output.meta_info.get("metrics", {})
        if len(pending.rm_scores):  # the batch's own rows (the workers' totals count dispatch's padding rows too)
            pending.rm_metrics["reward_model/score_mean"] = pending.rm_scores.mean().item()

    def collect(self, batch: DataProto, pending: PendingReward) -> tuple[torch.Tensor, dict[str, list[float]]]:
        """(token-level scores (B, R), columns key -> per-sample values) of a launched batch."""
        rule_scores, columns = None, {}
        if pending.rule is not None:
            rule_scores, columns = self.get(pending.rule, "rule")
            columns = {key: list(values) for key, values in columns.items()}
        if self.reward_model_wg is None and self.judge_actor is None:
            return rule_scores, columns
        overall = torch.zeros(len(batch), dtype=torch.float32)
        clashing = sorted(set(columns) & COMBINED_KEYS)
        if clashing:  # the model's or judge's column would replace the function's, silently
            raise RewardFunctionError(
                f"The reward function returns {clashing}, which name the combined reward's own columns "
                f"({sorted(COMBINED_KEYS)}) beside a reward model or judge; rename them."
            )
        if rule_scores is not None:
            rule = torch.tensor(columns["overall"], dtype=torch.float32)
            columns["rule_overall"] = rule.tolist()
            overall += self.config.rule_weight * rule
        if pending.rm_future is not None:
            self._take_model_scores(pending)
        if pending.rm_scores is not None:
            columns["rm_score"] = pending.rm_scores.tolist()
            overall += self.config.model.weight * pending.rm_scores
        if pending.judge is not None:
            judged = self.get(pending.judge, "judge")
            self._check_grades(judged["judge_parse_error"], judged.get("judge_cut"))
            columns.update({key: list(values) for key, values in judged.items()})
            overall += self.config.judge.weight * torch.tensor(judged["judge_score"], dtype=torch.float32)
        columns["overall"] = overall.tolist()
        return place_scores(columns["overall"], valid_response_mask(batch)), columns

    def _check_grades(self, errors: list[float], cut: list[float] | None) -> None:
        """Warn when most answers held no grade: they score 0 (the worst grade), so the judge's part trains nothing
        but a bias (a template that does not ask for the pattern's format, a reasoning judge cut at max_tokens)."""
        if not errors or sum(errors) < len(errors) / 2:
            return
        self.ungraded_batches += 1
        if self.ungraded_batches in (1, 10) or self.ungraded_batches % 100 == 0:
            judge = self.config.judge
            logger.warning(
                "%d of %d judge answers held no grade matching worker.reward.judge.grade_pattern and score 0 (%d such "
                "batch(es) so far); %d answers were cut at worker.reward.judge.max_tokens=%d. Check that the template "
                "asks for that format, and that max_tokens lets the judge finish (a reasoning judge may not): "
                "reward/judge_parse_error and reward/judge_cut are the shares.",
                int(sum(errors)),
                len(errors),
                self.ungraded_batches,
                int(sum(cut or [])),
                judge.max_tokens,
            )

    def score(self, batch: DataProto) -> tuple[torch.Tensor, dict[str, list[float]]]:
        return self.collect(batch, self.launch(batch))
