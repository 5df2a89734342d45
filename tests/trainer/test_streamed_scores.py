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
"""Streamed rewards (worker.reward.stream, mode=disaggregated): groups scored in pieces as they complete are put back
together in the step's batch order, each row with its own sample's score."""

from concurrent.futures import Future

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.async_trainer import StreamedScores
from verl.workers.reward.manager import place_scores


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
    streamed = StreamedScores(runner)
    streamed.launch(rows(["a", "a", "b", "b"], [10, 11, 20, 21]))
    streamed.launch(rows(["c", "c"], [30, 31]))
    # the step's batch: groups a and c, the same rows as scored (in another order of groups)
    batch = rows(["c", "c", "a", "a"], [30, 31, 10, 11], width=6)
    ready, scores, columns = streamed.take(batch, lambda future: future.result())
    assert ready == 1.0
    assert columns["overall"] == [30.0, 31.0, 10.0, 11.0]
    assert columns["accuracy"] == [0.0, 1.0, 0.0, 1.0]
    assert columns["route_only"][:2] == [1.0, 1.0] and all(np.isnan(columns["route_only"][2:]))
    assert torch.equal(scores, place_scores(columns["overall"], batch.batch["response_mask"].bool()))
    assert scores.sum(-1).tolist() == [30.0, 31.0, 10.0, 11.0]
    assert set(streamed.pending) == {"b"}  # b trains in a later step; a and c are done with


def test_a_group_that_was_never_scored_is_a_bug_not_a_silent_zero():
    streamed = StreamedScores(Runner())
    streamed.launch(rows(["a", "a"], [1, 2]))
    with pytest.raises(RuntimeError, match="without being scored"):
        streamed.take(rows(["a", "a", "z", "z"], [1, 2, 3, 4]), lambda future: future.result())


def test_ready_share_counts_groups_still_scoring():
    class Slow(Runner):
        def submit(self, data: DataProto) -> Future:
            done = super().submit(data)
            pending: Future = Future()
            self.finish = lambda: pending.set_result(done.result())
            return pending

    runner = Slow()
    streamed = StreamedScores(runner)
    streamed.launch(rows(["a", "a"], [1, 2]))
    first = runner.finish
    streamed.launch(rows(["b", "b"], [3, 4]))
    first()  # a's piece is scored, b's is still running when the batch is complete

    def get(future: Future):
        if not future.done():
            runner.finish()
        return future.result()

    ready, _, columns = streamed.take(rows(["a", "a", "b", "b"], [1, 2, 3, 4]), get)
    assert ready == 0.5 and columns["overall"] == [1.0, 2.0, 3.0, 4.0]
