# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of dispatch, the worker's rank check and the backend-independent WorkerGroup, in-process (no Ray): padding
for a world size that is not 2, the result's way back to the CPU, name clashes, futures passed by keyword and the
names a colocated role's view calls."""

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, WorkerGroup, register
from verl.single_controller.base.worker import WorkerEnvError
from verl.single_controller.ray import RayClassWithInitArgs, create_colocated_worker_cls


def make_batch(rows: int) -> DataProto:
    return DataProto.from_dict(tensors={"x": torch.arange(rows, dtype=torch.float32)})


class Doubler:
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto, scale: float = 2.0) -> DataProto:
        return DataProto.from_dict(tensors={"x": data.batch["x"] * scale})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def count(self, data: DataProto) -> int:
        return len(data)


class InProcessGroup(WorkerGroup):
    """A stand-in backend (not Ray): one instance of the worker class per rank in this process, each call run at
    once. It implements the two hooks a backend implements (`_execute_async`, `_wait`), so everything else is the
    real WorkerGroup; it records the remote method names it was asked to call."""

    def __init__(self, instances: list[Any], worker_cls: type, prefix: str = "") -> None:
        self._world_size = len(instances)
        self._instances = instances
        self._method_prefix = prefix
        self.called: list[str] = []
        self._bind_worker_methods(worker_cls)

    def _execute_async(self, method_name: str, ranks: Sequence[int], args: list[tuple], kwargs: list[dict]) -> list:
        self.called.append(method_name)
        return [getattr(self._instances[r], method_name)(*a, **k) for r, a, k in zip(ranks, args, kwargs)]

    def _wait(self, handles: list[Any]) -> list[Any]:
        return list(handles)


@pytest.mark.parametrize(("rows", "world_size"), [(1, 4), (5, 4), (2, 3), (7, 8)])
def test_padding_rows_are_dropped_for_any_world_size(rows, world_size):
    """With 2 ranks `-n % 2 == n % 2`; 5 rows on 4 ranks need 3 padding rows, not 1."""
    group = InProcessGroup([Doubler() for _ in range(world_size)], Doubler)
    out = group.double(make_batch(rows))
    assert out.batch["x"].tolist() == [2.0 * i for i in range(rows)]
    padded = -(-rows // world_size) * world_size
    assert sum(group.count(make_batch(rows))) == padded


def test_futures_passed_by_keyword_are_resolved_first():
    group = InProcessGroup([Doubler(), Doubler()], Doubler)
    first = group.submit("double", make_batch(3))
    out = group.double(data=first, scale=3.0)
    assert out.batch["x"].tolist() == [0.0, 6.0, 12.0]


def test_only_registered_methods_can_be_submitted():
    group = InProcessGroup([Doubler()], Doubler)
    with pytest.raises(AttributeError, match="'helper' is not a registered method"):
        group.submit("helper")
    assert group.called == []


class SometimesNothing:
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def maybe(self, data: DataProto) -> DataProto | None:
        return None if self is SKIPPER else data


SKIPPER = SometimesNothing()


def test_a_rank_returning_none_beside_batches_is_an_error_naming_it():
    """None from every rank is no result; None from one rank beside the others' rows would drop its rows silently."""
    group = InProcessGroup([SKIPPER, SometimesNothing()], SometimesNothing)
    with pytest.raises(TypeError, match="rank 0 returned a NoneType"):
        group.maybe(make_batch(4))
    assert InProcessGroup([SKIPPER, SKIPPER], SometimesNothing).maybe(make_batch(4)) is None


class Clashing:
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def submit(self) -> None: ...


def test_a_worker_method_named_like_a_group_attribute_is_refused():
    with pytest.raises(AttributeError, match=r"Cannot bind worker method Clashing.submit: .* attribute 'submit'"):
        InProcessGroup([Clashing()], Clashing)


def test_a_role_view_submits_and_calls_its_prefixed_methods():
    """A colocated role's view calls `{role}_{method}` on the shared process, through its proxies, `submit` and
    `execute_all` alike."""
    colocated = create_colocated_worker_cls({"critic": Doubler})
    instances = []
    for _ in range(2):
        instance = colocated.cls.__new__(colocated.cls)
        colocated.cls.__init__(instance, *colocated.args)
        instances.append(instance)
    view = InProcessGroup(instances, Doubler, prefix="critic_")
    assert view.submit("double", make_batch(2)).get().batch["x"].tolist() == [0.0, 2.0]
    assert view.double(make_batch(2)).batch["x"].tolist() == [0.0, 2.0]
    assert view.execute_all("count", make_batch(2)) == [2, 2]
    assert view.called == ["critic_double", "critic_double", "critic_count"]


class Echo:
    """A worker whose device is `meta` (a stand-in for cuda on a CPU host), returning what it is given."""

    device = torch.device("meta")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def echo(self, data: DataProto) -> DataProto:
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def fresh(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"n": torch.tensor([len(data)])})  # a TensorDict without a device


def test_a_device_workers_result_is_moved_back_to_the_cpu():
    """The result of a device worker goes back to the CPU: a meta tensor has no data, so the move fails loudly (a
    cuda tensor would be copied); without the move the driver would get the worker's device tensors."""
    with pytest.raises(NotImplementedError, match="meta tensor"):
        Echo().echo(make_batch(2))
    assert Echo().fresh(make_batch(2)).batch.device == torch.device("cpu")


def test_rank_equal_to_world_size_and_non_integer_ranks_are_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(WorkerEnvError, match=r"RANK=2 is outside \[0, WORLD_SIZE=2\)"):
        Worker()
    monkeypatch.setenv("RANK", "-1")
    with pytest.raises(WorkerEnvError, match=r"RANK=-1 is outside"):
        Worker()
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(WorkerEnvError, match=r"RANK='one' is not an integer"):
        Worker()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(WorkerEnvError, match="WORLD_SIZE is not set"):
        Worker()


class Critic:
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None: ...


class CriticInit:
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def model(self) -> None: ...


def test_colocated_roles_are_checked_before_any_process_starts():
    # "a_b" + "_c" and "a" + "_b_c" both make "a_b_c": one of the roles' methods would be unreachable
    with pytest.raises(ValueError, match="'critic_init_model' is produced by two roles"):
        create_colocated_worker_cls({"critic": Critic, "critic_init": CriticInit})
    with pytest.raises(ValueError, match="Role name 'reward-model' must be a Python identifier"):
        create_colocated_worker_cls({"reward-model": Critic})
    with pytest.raises(TypeError, match="needs a class"):
        RayClassWithInitArgs(Critic())
