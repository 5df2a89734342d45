# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of FSDPWorker's bookkeeping (verl/workers/fsdp_workers.py) on a worker object without Ray or FSDP: the
learning rate an update reports is the one it used and the schedule moves once per update, an update's dropout
depends on its step, the reference sync restarts the optimizer only when asked, and a checkpoint carries the
rollout's call counters."""

from types import SimpleNamespace

import pytest
import torch

from verl.models.config import OffloadConfig
from verl.protocol import DataProto
from verl.utils import device
from verl.utils.optim import OptimConfig, build_lr_scheduler, build_optimizer
from verl.workers.config import UpdateRequest
from verl.workers.fsdp_workers import FSDPWorker


@pytest.fixture(scope="module", autouse=True)
def world_of_one():
    saved = device._device_type
    device.set_device_type("cpu")
    with device.one_process_group(timeout_seconds=60):
        yield
    device._device_type = saved


def _worker(warmup_steps: int = 4) -> FSDPWorker:
    worker = object.__new__(FSDPWorker)  # the bookkeeping alone: no process group of its own, no model build
    module = torch.nn.Linear(3, 2)
    optimizer = build_optimizer(module, OptimConfig(lr=1.0))
    worker.has_critic, worker.has_rollout, worker.sp_group, worker.processor = False, True, None, None
    worker.media_inputs = {}
    worker.config = SimpleNamespace(rollout=SimpleNamespace(seed=3), actor=SimpleNamespace(offload=OffloadConfig()))
    worker.actor_module, worker.actor_optimizer = module, optimizer
    worker.actor_lr_scheduler = build_lr_scheduler(optimizer, OptimConfig(lr=1.0, lr_warmup_steps=warmup_steps))
    return worker


def _batch() -> DataProto:
    return DataProto.from_dict(tensors={"input_ids": torch.zeros(2, 3, dtype=torch.long)})


def test_an_update_reports_the_learning_rate_it_used_and_the_schedule_moves_once_per_update():
    worker = _worker()
    used, masks = [], []

    def updater(of: FSDPWorker):
        def update(data: DataProto) -> dict[str, float]:
            used.append(of.actor_optimizer.param_groups[0]["lr"])
            masks.append(torch.nn.functional.dropout(torch.ones(64), 0.5) != 0)
            of.actor_optimizer.step()  # no gradients: nothing moves
            return {}

        return update

    reported = [worker._update(_batch(), updater(worker), UpdateRequest(global_step=step)) for step in (1, 2, 3)]
    lrs = [output.meta_info["metrics"]["actor/lr"] for output in reported]
    assert lrs == used == [0.25, 0.5, 0.75]  # warmup over 4 updates
    assert "perf/cpu_max_rss_gb" in reported[0].meta_info["metrics"]
    # the dropout masks come from (seed, rank, step): other at each step, the same for a step drawn again
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    again = _worker()
    again.actor_lr_scheduler.last_epoch = 1  # as a resumed run at its second update
    again._update(_batch(), updater(again), UpdateRequest(global_step=2))
    assert torch.equal(masks[-1], masks[1])


def _step(worker: FSDPWorker) -> None:
    worker.actor_module.weight.grad = torch.ones_like(worker.actor_module.weight)
    worker.actor_module.bias.grad = torch.ones_like(worker.actor_module.bias)
    worker.actor_optimizer.step()


@pytest.mark.parametrize("reset", [False, True])
def test_the_reference_sync_restarts_the_optimizer_only_when_asked(reset):
    worker = _worker()
    worker.ref_module, worker.ref_offload = torch.nn.Linear(3, 2).requires_grad_(False), OffloadConfig()
    before = worker.ref_module.weight.detach().clone()
    _step(worker)
    worker.sync_reference(0.25, reset_optimizer=reset)
    expected = 0.25 * worker.actor_module.weight.detach() + 0.75 * before
    torch.testing.assert_close(worker.ref_module.weight, expected)  # ref <- alpha x actor + (1 - alpha) x ref
    state = worker.actor_optimizer.state[worker.actor_module.weight]
    assert bool(state["exp_avg"].any()) != reset and float(state["step"]) == (0.0 if reset else 1.0)


def test_a_checkpoint_carries_the_rollouts_call_counters(tmp_path):
    """A resumed run seeds its rollout requests as the unbroken run did: both counters are saved and restored."""
    saved = {}
    manager = SimpleNamespace(
        save=lambda path, extra_state, save_model_only: saved.update(extra_state), load=lambda path: dict(saved)
    )
    worker = _worker()
    worker.checkpoint_manager = manager
    worker.rollout = SimpleNamespace(generate_calls=7, validate_calls=3)
    worker.save_checkpoint(str(tmp_path))
    resumed = _worker()
    resumed.checkpoint_manager = manager
    resumed.rollout = SimpleNamespace(generate_calls=0, validate_calls=0)
    resumed.load_checkpoint(str(tmp_path))
    assert (resumed.rollout.generate_calls, resumed.rollout.validate_calls) == (7, 3)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resumed.load_checkpoint(str(tmp_path / "missing"))
