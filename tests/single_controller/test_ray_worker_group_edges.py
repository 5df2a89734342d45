# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of RayWorkerGroup and RayResourcePool on a real local Ray (2 CPUs): a role view's shutdown, a pool's shares
returned and refused, a removed pool, a pool that timed out leaving nothing behind; and the loopback environment of a
single-machine group (no Ray needed)."""

import os
import sys

import pytest
import torch


ray = pytest.importorskip("ray")

from verl.protocol import DataProto  # noqa: E402
from verl.single_controller.base import Dispatch, Worker, register  # noqa: E402
from verl.single_controller.ray import (  # noqa: E402
    InsufficientResourcesError,
    PlacementGroupTimeoutError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from verl.single_controller.ray.base import DIST_INIT_METHOD_ENV, loopback_rendezvous_env  # noqa: E402


# Ray workers cannot import pytest's test modules; ship this module's worker classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class PidWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def plus_rank(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": data.batch["x"] + self.rank})


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def live_placement_groups() -> int:
    return sum(pg["state"] != "REMOVED" for pg in ray.util.placement_group_table().values())


@pytest.mark.slow
@pytest.mark.timeout(240, method="thread")  # a group on a removed pool waits forever, in ray.wait
def test_pool_shares_views_and_removal(ray_cluster):
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1, cpus_per_process=0.5)
    try:
        assert pool.actor_options() == {"num_cpus": 0.5}
        colocated = create_colocated_worker_cls({"actor": PidWorker, "critic": PidWorker})
        wg = RayWorkerGroup(pool, colocated, name_prefix="owner")
        # The pool's one share is taken: a second group fails at once instead of waiting for CPUs.
        with pytest.raises(
            InsufficientResourcesError, match=r"max_colocate_count=1 group\(s\) already \(\['owner'\]\)"
        ):
            RayWorkerGroup(pool, RayClassWithInitArgs(PidWorker), name_prefix="second")
        views = wg.spawn({"actor", "critic"})
        pids = views["actor"].pid()
        views["critic"].shutdown()  # a view owns nothing: the processes and the share stay the owner's
        assert views["actor"].pid() == pids and wg.critic_pid() == pids
        x = torch.arange(4, dtype=torch.float32)
        assert views["actor"].plus_rank(DataProto.from_dict(tensors={"x": x})).batch["x"].tolist() == [0, 1, 3, 4]
        assert pool._groups == {"owner"}
        wg.shutdown()
        # The share came back: a new group starts on the same pool.
        again = RayWorkerGroup(pool, RayClassWithInitArgs(PidWorker), name_prefix="again")
        assert len(set(again.pid())) == 2
        again.shutdown()
    finally:
        pool.remove()
    shared = RayResourcePool([1], use_gpu=False, max_colocate_count=4, cpus_per_process=1.0)
    try:  # four groups' actors fit one bundle: each takes a quarter of it
        assert shared.actor_options() == {"num_cpus": 0.25}
    finally:
        shared.remove()
    with pytest.raises(ValueError, match="The resource pool has no bundles"):
        RayWorkerGroup(pool, RayClassWithInitArgs(PidWorker), name_prefix="removed")
    assert pool._groups == set()


@pytest.mark.slow
@pytest.mark.timeout(240, method="thread")  # a group on a removed pool waits forever, in ray.wait
def test_a_pool_that_times_out_leaves_no_placement_group_behind(ray_cluster):
    held = RayResourcePool([1], use_gpu=False)  # one of the two CPUs
    try:
        before = live_placement_groups()
        with pytest.raises(PlacementGroupTimeoutError, match="Only 0 of 1 placement groups were ready after 1 s"):
            RayResourcePool([2], use_gpu=False, ready_timeout_s=1.0)
        assert live_placement_groups() == before  # a pending group would take the CPUs the moment they free up
    finally:
        held.remove()
    RayResourcePool([2], use_gpu=False, ready_timeout_s=30.0).remove()  # both CPUs are free again


def test_a_users_interface_choice_wins_over_loopback(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    env = loopback_rendezvous_env()
    assert env["MASTER_ADDR"] == "127.0.0.1" and env[DIST_INIT_METHOD_ENV].startswith("file://")
    assert "GLOO_SOCKET_IFNAME" not in env and env["NCCL_SOCKET_IFNAME"] in ("lo", "lo0")
    cluster = loopback_rendezvous_env(transports=False)  # other nodes' processes must reach these
    assert "NCCL_SOCKET_IFNAME" not in cluster and cluster[DIST_INIT_METHOD_ENV] != env[DIST_INIT_METHOD_ENV]
