# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The disaggregated trainer's own bookkeeping (verl/trainer/disaggregated_trainer.py) without engines: when weights
are sent to the rollout pool, what a validation's sync reports, and the engines' seed counts on resume.

Stand-ins (no Ray, no vLLM): `RecordingGroup` plays the trainer's and the rollout pool's worker groups, recording
the worker methods called and answering as the real workers do; the parent trainer's checkpoint loading and
validation are replaced by functions returning a path and no metrics. The trainer is made without its constructor,
with the attributes its methods read."""

import json
import logging
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from verl.trainer import disaggregated_trainer
from verl.trainer.async_trainer import AsyncRayPPOTrainer
from verl.trainer.disaggregated_trainer import ENGINES_FILE, DisaggregatedRayPPOTrainer


class Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


class RecordingGroup:
    """Stand-in worker group: records (method, args) and answers like the trainer's rank 0 and the engines."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.calls: list[tuple[str, tuple]] = []

    def weight_transfer_address(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", 29555)]

    def _answer(self, name: str, args: tuple) -> list[Any]:
        if name == "init_weight_transfer":
            return ["bfloat16"] * self.world_size
        if name == "send_weights":
            return [{"sync/send_s": 1.0}] + [{}] * (self.world_size - 1)
        if name == "receive_weights":
            return [{"sync/receive_s": 2.0}] * self.world_size
        return [None] * self.world_size

    def execute_all_async(self, name: str, *args: Any) -> Done:
        self.calls.append((name, args))
        return Done(self._answer(name, args))

    def execute_all(self, name: str, *args: Any) -> list[Any]:
        return self.execute_all_async(name, *args).get()


def make_trainer(engines: int = 2) -> DisaggregatedRayPPOTrainer:
    trainer = DisaggregatedRayPPOTrainer.__new__(DisaggregatedRayPPOTrainer)
    trainer.rollout_wg, trainer.actor_rollout_ref_wg = RecordingGroup(engines), RecordingGroup(1)
    trainer.transfer_backend, trainer.engine_version, trainer.engine_dtype = "gloo", None, None
    trainer.validation_sync = defaultdict(list)
    trainer.config = SimpleNamespace(worker=SimpleNamespace(rollout=SimpleNamespace(weight_bucket_mb=64)))
    return trainer


def names(group: RecordingGroup) -> list[str]:
    return [name for name, _ in group.calls]


def test_weights_are_sent_once_per_version_after_one_connection():
    trainer = make_trainer()
    metrics: dict[str, list[float]] = defaultdict(list)
    trainer.sync_engines(0, metrics)
    trainer.sync_engines(0, metrics)  # the engines have them: nothing is sent
    trainer.sync_engines(1, metrics)
    assert names(trainer.rollout_wg) == ["init_weight_transfer", "receive_weights", "receive_weights"]
    assert names(trainer.actor_rollout_ref_wg) == ["init_weight_transfer", "send_weights", "send_weights"]
    assert trainer.rollout_wg.calls[0][1] == ("127.0.0.1", 29555, 3, "gloo")  # rank 0 and 2 engines
    assert [args for name, args in trainer.rollout_wg.calls if name == "receive_weights"] == [(0,), (1,)]
    assert trainer.actor_rollout_ref_wg.calls[1][1] == ("bfloat16", 64)
    assert trainer.engine_version == 1
    assert dict(metrics) == {"sync/send_s": [1.0, 1.0], "sync/receive_s": [2.0, 2.0, 2.0, 2.0]}


def test_a_validations_sync_is_reported_with_the_next_step_which_sends_nothing_more(monkeypatch):
    monkeypatch.setattr(AsyncRayPPOTrainer, "validate", lambda self: {})  # stand-in: no validation run
    trainer = make_trainer()
    trainer.val_dataloader, trainer.global_step = object(), 4
    trainer.validate()
    assert trainer.engine_version == 4 and dict(trainer.validation_sync) == {
        "sync/send_s": [1.0],
        "sync/receive_s": [2.0, 2.0],
    }
    sent = len(trainer.rollout_wg.calls)
    metrics: dict[str, list[float]] = defaultdict(list)
    monkeypatch.setattr(trainer, "_admit", lambda version, engines: None)
    monkeypatch.setattr(trainer, "_async_request", lambda version, round_index, engines: None)
    monkeypatch.setattr(trainer, "_collect_polls", lambda poll, metrics: "batch")
    monkeypatch.setattr(trainer, "_taken", lambda batch: batch)
    trainer.rollout_wg.admit = lambda prompts, request: None
    trainer.rollout_wg.poll = lambda request, wait: []
    assert trainer._take_round(4, 0, metrics) == "batch"
    assert len(trainer.rollout_wg.calls) == sent  # version 4 is what the engines hold
    assert dict(metrics) == {"sync/send_s": [1.0], "sync/receive_s": [2.0, 2.0]}
    metrics = defaultdict(list)
    trainer._take_round(4, 1, metrics)  # the validation's figures are reported once
    assert dict(metrics) == {}


@pytest.mark.parametrize(("saved_engines", "restored"), [(2, True), (3, False)])
def test_engine_seed_counts_are_restored_only_for_the_same_pool_size(
    monkeypatch, tmp_path, caplog, saved_engines, restored
):
    step = tmp_path / "global_step_3"
    step.mkdir()
    counters = {"generate_calls": list(range(5, 5 + saved_engines)), "validate_calls": [1] * saved_engines}
    (step / ENGINES_FILE).write_text(json.dumps(counters))
    monkeypatch.setattr(AsyncRayPPOTrainer, "_load_checkpoint", lambda self: str(step))  # stand-in: the parent's
    trainer = make_trainer(engines=2)
    with caplog.at_level(logging.WARNING, logger=disaggregated_trainer.__name__):
        assert trainer._load_checkpoint() == str(step)
    if restored:
        assert trainer.rollout_wg.calls == [("restore_seed_counts", ([5, 6], [1, 1]))]
    else:
        assert trainer.rollout_wg.calls == []
        assert "was saved by 3 rollout engines, this run has 2: their sampling seeds start afresh" in caplog.text
