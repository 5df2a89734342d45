# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Streamed rewards (worker.reward.stream, the asynchronous modes): groups scored in pieces as they complete are put
back together in the step's batch order, each row with its own sample's score, and with a reward model and a judge
beside the rule functions each row's combined score equals what scoring the whole batch at once gives.

The reward parts here are small objects with the interfaces the scorer calls (a rule runner's submit -> Future, a
judge actor's grade.remote, a worker group's submit -> a future with handles); the trainer runs with the real ones
in tests/trainer/test_async_e2e.py, test_disaggregated_e2e.py and test_model_rewards.py."""

from concurrent.futures import Future

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.rewards.manager import place_scores
from verl.rewards.scoring import BatchScorer
from verl.trainer.async_trainer import StreamedScores
from verl.workers.config import RewardConfig


class Runner:
    """The rule runner's interface (submit -> Future of (scores, columns)); scores each row by its response id."""

    def __init__(self) -> None:
        self.pieces = 0

    def submit(self, data: DataProto) -> Future:
        self.pieces += 1
        ids = data.batch["responses"][:, 0].tolist()
        columns = {"overall": [float(i) for i in ids], "accuracy": [float(i % 2) for i in ids]}
        if self.pieces == 2:
            columns["route_only"] = [1.0] * len(ids)  # a key only some pieces return
        future: Future = Future()
        future.set_result((place_scores(columns["overall"], data.batch["response_mask"].bool()), columns))
        return future


def get(future: Future, part: str):
    return future.result()


def rule_only(runner: Runner) -> BatchScorer:
    return BatchScorer(RewardConfig(), None, runner, None, None, get)


def rows(uids: list[str], ids: list[int], width: int = 4) -> DataProto:
    responses = torch.zeros(len(ids), width, dtype=torch.long)
    responses[:, 0] = torch.tensor(ids)
    mask = torch.zeros(len(ids), width, dtype=torch.long)
    for row, i in enumerate(ids):
        mask[row, : 1 + i % width] = 1
    return DataProto.from_dict(
        tensors={"responses": responses, "response_mask": mask}, non_tensors={"uid": np.array(uids, dtype=object)}
    )


def test_rows_get_their_own_scores_across_pieces_and_reordering():
    runner = Runner()
    streamed = StreamedScores(rule_only(runner))
    streamed.launch(rows(["a", "a", "b", "b"], [10, 11, 20, 21]))
    streamed.launch(rows(["c", "c"], [30, 31]))
    # the step's batch: groups a and c, the same rows as scored (in another order of groups)
    batch = rows(["c", "c", "a", "a"], [30, 31, 10, 11], width=6)
    ready, scores, columns, model_metrics = streamed.take(batch)
    assert ready == 1.0 and model_metrics == {}
    assert columns["overall"] == [30.0, 31.0, 10.0, 11.0]
    assert columns["accuracy"] == [0.0, 1.0, 0.0, 1.0]
    assert columns["route_only"][:2] == [1.0, 1.0] and all(np.isnan(columns["route_only"][2:]))
    assert torch.equal(scores, place_scores(columns["overall"], batch.batch["response_mask"].bool()))
    assert scores.sum(-1).tolist() == [30.0, 31.0, 10.0, 11.0]
    assert set(streamed.pending) == {"b"}  # b trains in a later step; a and c are done with


def test_a_group_that_was_never_scored_is_a_bug_not_a_silent_zero():
    streamed = StreamedScores(rule_only(Runner()))
    streamed.launch(rows(["a", "a"], [1, 2]))
    with pytest.raises(RuntimeError, match="without being scored"):
        streamed.take(rows(["a", "a", "z", "z"], [1, 2, 3, 4]))
    # a group admitted twice under one uid (dispatch padding a resumed run's prompts did so): its rows would take
    # the other copy's scores
    with pytest.raises(RuntimeError, match=r"The groups \['a'\] were launched for scoring twice"):
        streamed.launch(rows(["a", "a"], [5, 6]))


def test_ready_share_counts_groups_still_scoring():
    class Slow(Runner):
        def submit(self, data: DataProto) -> Future:
            done = super().submit(data)
            pending: Future = Future()
            self.finish = lambda: pending.set_result(done.result())
            return pending

    runner = Slow()
    waits = []

    def get(future: Future, part: str):
        if not future.done():
            waits.append(future)
            runner.finish()
        return future.result()

    streamed = StreamedScores(BatchScorer(RewardConfig(), None, runner, None, None, get))
    streamed.launch(rows(["a", "a"], [1, 2]))
    first = runner.finish
    streamed.launch(rows(["b", "b"], [3, 4]))
    first()  # a's piece is scored, b's is still running when the batch is complete
    ready, _, columns, _ = streamed.take(rows(["a", "a", "b", "b"], [1, 2, 3, 4]))
    assert ready == 0.5 and columns["overall"] == [1.0, 2.0, 3.0, 4.0]
    assert len(waits) == 1  # the step waited for b's piece only


class Tokenizer:
    def batch_decode(self, sequences: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        return [" ".join(map(str, ids)) for ids in sequences]


class Judge:
    """A judge actor's `grade.remote`: grades each response by its first token id (a Future stands for the ref)."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.grade = self

    def remote(self, prompts: list[str], responses: list[str], truths: list) -> Future:
        self.calls.append(len(responses))
        future: Future = Future()
        scores = [int(r.split()[0]) / 100 for r in responses]  # the real judge's columns (llm_judge.SCORE_KEYS)
        zeros = [0.0] * len(scores)
        future.set_result(
            {"judge_score": scores, "judge_grade": scores, "judge_parse_error": zeros, "judge_cut": zeros}
        )
        return future


class GroupFuture:
    def __init__(self, output: DataProto) -> None:
        self.output = output
        self.handles = [Future()]
        self.gets = 0

    def get(self) -> DataProto:
        self.gets += 1
        if not self.handles[0].done():
            self.handles[0].set_result(None)
        return self.output


class RewardModelGroup:
    """A reward model worker group's `submit("compute_rm_score", batch)`: started, not finished until waited for."""

    def __init__(self) -> None:
        self.futures: list[GroupFuture] = []

    def submit(self, method: str, data: DataProto) -> GroupFuture:
        assert method == "compute_rm_score"
        scores = -data.batch["responses"][:, 0].float()
        output = DataProto.from_dict(
            tensors={"rm_scores": scores}, meta_info={"metrics": {"reward_model/n": len(data)}}
        )
        self.futures.append(GroupFuture(output))
        return self.futures[-1]


def test_a_reward_model_and_a_judge_stream_beside_the_rules_and_combine_as_in_a_whole_batch():
    config = RewardConfig(rule_weight=0.5)
    config.model.weight, config.judge.weight = 2.0, 3.0

    def scorer(model: RewardModelGroup) -> BatchScorer:
        return BatchScorer(config, Tokenizer(), Runner(), model, Judge(), get)

    def prompts(data: DataProto) -> DataProto:
        data.non_tensor_batch["prompt_content"] = np.array(["p"] * len(data), dtype=object)
        return data

    model = RewardModelGroup()
    streamed = StreamedScores(scorer(model))
    streamed.launch(prompts(rows(["a", "a", "b", "b"], [10, 11, 20, 21])))
    streamed.launch(prompts(rows(["c", "c"], [30, 31])))
    assert [future.gets for future in model.futures] == [0, 0]  # launched without waiting for the reward model
    assert streamed.scorer.judge_actor.calls == [4, 2]  # the judge graded each piece as it was launched
    model.futures[1].handles[0].set_result(None)  # c's piece has its reward model's scores; a's is still running
    batch = prompts(rows(["c", "c", "a", "a"], [30, 31, 10, 11], width=6))
    ready, scores, columns, model_metrics = streamed.take(batch)
    assert ready == 0.5
    whole_scores, whole = scorer(RewardModelGroup()).score(batch)
    assert columns["overall"] == pytest.approx(whole["overall"])
    assert columns["overall"] == pytest.approx([0.5 * i - 2.0 * i + 3.0 * i / 100 for i in (30, 31, 10, 11)])
    assert columns["rm_score"] == whole["rm_score"] and columns["judge_score"] == whole["judge_score"]
    assert torch.allclose(scores, whole_scores)
    # the pieces' reward-model metrics weighted by their rows; the score mean is this batch's (a's piece held b too)
    assert model_metrics["reward_model/n"] == pytest.approx((2 * 2 + 4 * 4) / 6)
    assert model_metrics["reward_model/score_mean"] == pytest.approx(np.mean(whole["rm_score"]))
    assert model_metrics["reward_model/score_mean"] == pytest.approx(-(30 + 31 + 10 + 11) / 4)


def test_a_reward_model_score_that_is_not_finite_stops_the_step_naming_the_sample():
    """A NaN score (an fp16 reward model that overflowed) made its group's advantages NaN and the update was skipped
    with a warning only; a reward function's NaN was already refused."""
    from verl.rewards.function import RewardFunctionError

    class NaNModel(RewardModelGroup):
        def submit(self, method: str, data: DataProto) -> GroupFuture:
            future = super().submit(method, data)
            future.output.batch["rm_scores"][1] = float("nan")
            return future

    data = rows(["a", "a", "b", "b"], [10, 11, 20, 21])
    data.non_tensor_batch["prompt_content"] = np.array(["p"] * len(data), dtype=object)
    scorer = BatchScorer(RewardConfig(), Tokenizer(), Runner(), NaNModel(), None, get)
    with pytest.raises(
        RewardFunctionError, match=r"reward model \(worker.reward.model\) scored sample 1 nan \(1 of 4"
    ):
        scorer.score(data)
