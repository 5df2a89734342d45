# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Dispatch and collect of every mode, run in-process on hand-made batches (no Ray needed)."""

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base.decorator import (
    Dispatch,
    get_register_spec,
    plan_dispatch,
    register,
    registered_methods,
)
from verl.single_controller.base.worker import Worker, WorkerEnvError


def make_batch(rows: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2)},
        non_tensors={"uid": [f"u{i}" for i in range(rows)]},
        meta_info={"temperature": 0.7},
    )


def run_ranks(plan, fn):
    """Execute fn on every rank's arguments in this process, then collect like a worker group would."""
    return plan.collect([fn(rank, *args, **kwargs) for rank, (args, kwargs) in enumerate(zip(plan.args, plan.kwargs))])


def tag_rank(rank: int, data: DataProto, scale: float = 1.0) -> DataProto:
    out = DataProto.from_dict(
        tensors={"y": data.batch["x"] * scale}, non_tensors={"uid": data.non_tensor_batch["uid"]}
    )
    out.batch["rank"] = torch.full((len(data),), rank)
    return out


def test_dp_compute_proto_pads_chunks_and_unpads():
    plan = plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(5),), {"scale": 3.0})
    assert [len(args[0]) for args in plan.args] == [3, 3]
    assert plan.args[1][0].non_tensor_batch["uid"].tolist() == ["u3", "u4", "u0"]  # padding repeats row 0
    assert plan.kwargs == [{"scale": 3.0}, {"scale": 3.0}]  # non-DataProto arguments are broadcast
    out = run_ranks(plan, tag_rank)
    assert len(out) == 5
    assert torch.equal(out.batch["y"], make_batch(5).batch["x"] * 3.0)
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1]
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2", "u3", "u4"]


def test_dp_compute_proto_without_padding_and_with_fewer_rows_than_ranks():
    out = run_ranks(plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(4),), {}), tag_rank)
    assert out.batch["rank"].tolist() == [0, 0, 1, 1]
    plan = plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 4, (), {"data": make_batch(2)})
    assert [len(kwargs["data"]) for kwargs in plan.kwargs] == [1, 1, 1, 1]
    out = run_ranks(plan, tag_rank)
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u1"] and out.batch["rank"].tolist() == [0, 1]


def test_dp_compute_proto_unpads_results_with_k_rows_per_input_row():
    def sample_twice(rank: int, data: DataProto) -> DataProto:
        return tag_rank(rank, data).repeat(2, interleave=True)

    out = run_ranks(plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(3),), {}), sample_twice)
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u0", "u1", "u1", "u2", "u2"]


def test_dp_compute_proto_keeps_row_free_results_and_none():
    def metrics(rank: int, data: DataProto) -> DataProto:
        return DataProto(meta_info={"metrics": {"loss": float(rank)}})

    out = run_ranks(plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(3),), {}), metrics)
    assert len(out) == 0 and out.meta_info == {"metrics": {"loss": 0.0}}
    assert run_ranks(plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(3),), {}), lambda r, d: None) is None


def test_dp_compute_proto_errors_name_the_problem():
    with pytest.raises(ValueError, match="argument 0 has 3 rows, 'other' has 4 rows"):
        plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(3),), {"other": make_batch(4)})
    plan = plan_dispatch(Dispatch.DP_COMPUTE_PROTO, 2, (make_batch(3),), {})
    with pytest.raises(TypeError, match="rank 0 returned a dict"):
        run_ranks(plan, lambda rank, data: {"a": 1})
    with pytest.raises(ValueError, match="got 4 rows .padded. but returned 3"):
        run_ranks(plan, lambda rank, data: data[:1] if rank == 0 else data)


def test_dp_compute_metric_returns_per_rank_list():
    plan = plan_dispatch(Dispatch.DP_COMPUTE_METRIC, 2, (make_batch(3),), {})
    assert run_ranks(plan, lambda rank, data: {"rank": rank, "rows": len(data)}) == [
        {"rank": 0, "rows": 2},
        {"rank": 1, "rows": 2},
    ]


def test_one_to_all_sends_every_rank_the_same_arguments():
    plan = plan_dispatch(Dispatch.ONE_TO_ALL, 3, ("a",), {"k": 1})
    assert run_ranks(plan, lambda rank, a, k: (rank, a, k)) == [(0, "a", 1), (1, "a", 1), (2, "a", 1)]


class Base:
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None: ...

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto: ...

    @property
    def boom(self) -> int:
        raise AssertionError("registered_methods must not evaluate properties")

    def helper(self) -> None: ...


class Child(Base):
    def init_model(self) -> None: ...  # overridden without @register: no longer remote

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save(self, path: str) -> None: ...


def test_register_records_specs_and_inheritance():
    spec = get_register_spec(Base.compute)
    assert spec.dispatch_mode is Dispatch.DP_COMPUTE_PROTO
    assert sorted(registered_methods(Base)) == ["compute", "init_model"]
    assert sorted(registered_methods(Child)) == ["compute", "save"]
    assert get_register_spec(Base.helper) is None


def test_register_rejects_bad_combinations():
    with pytest.raises(TypeError, match="needs a Dispatch member"):
        register(dispatch_mode="one_to_all")
    with pytest.raises(ValueError, match="world size 0"):
        plan_dispatch(Dispatch.ONE_TO_ALL, 0, (), {})


def test_worker_reads_rank_environment(monkeypatch):
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    env.update(MASTER_ADDR="10.0.0.2", MASTER_PORT="29500")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    worker = Worker()
    assert (worker.rank, worker.world_size) == (1, 4)
    with pytest.raises(AttributeError):  # read-only: the group set them at launch
        worker.rank = 0
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(WorkerEnvError, match=r"RANK=4 is outside \[0, WORLD_SIZE=4\)"):
        Worker()
    monkeypatch.delenv("RANK")
    with pytest.raises(WorkerEnvError, match="RANK is not set"):
        Worker()


class MetaDeviceWorker:
    """A worker whose device is `meta`: the boundary must hand it meta tensors (a stand-in for cuda on a CPU host)."""

    device = torch.device("meta")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def describe(self, data: DataProto, scale: float = 1.0) -> DataProto:
        assert data.batch["x"].device.type == "meta"
        assert data.non_tensor_batch["uid"][0] == "u0" and data.meta_info["temperature"] == 0.7
        return DataProto.from_dict(tensors={"shape": torch.tensor(data.batch["x"].shape) * scale})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def plain(self, value: int) -> int:
        return value + 1


def test_registered_methods_receive_batches_on_the_worker_device_and_return_cpu():
    worker, batch = MetaDeviceWorker(), make_batch(3)
    result = worker.describe(batch, scale=2.0)
    assert result.batch["shape"].device.type == "cpu" and result.batch["shape"].tolist() == [6, 4]
    assert batch.batch["x"].device.type == "cpu"  # the caller's batch is not moved
    assert worker.plain(1) == 2
    assert get_register_spec(MetaDeviceWorker.describe).dispatch_mode is Dispatch.DP_COMPUTE_PROTO
    with pytest.raises(AssertionError):  # a CPU worker gets CPU tensors: the assertion above can fail
        MetaDeviceWorker.describe(type("CPUWorker", (), {"device": torch.device("cpu")})(), batch)
