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
"""Two simulated Ray nodes (ray.cluster_utils.Cluster, 1 CPU each): one placement group per node, gloo across them."""

import sys

import pytest
import torch
import torch.distributed as dist


ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from verl.single_controller.base import Dispatch, Worker, register  # noqa: E402
from verl.single_controller.ray import (  # noqa: E402
    InsufficientResourcesError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
)
from verl.single_controller.ray.base import pick_free_port_on_node  # noqa: E402


pytestmark = pytest.mark.slow

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class NodeWorker(Worker):
    def __init__(self) -> None:
        super().__init__()
        dist.init_process_group("gloo")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def where(self) -> tuple[int, int, str, float]:
        total = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(total)
        return self.rank, self.local_rank, ray.get_runtime_context().get_node_id(), total.item()


@pytest.fixture(scope="module")
def two_nodes():
    # RAY_AUTH_MODE stays as it is: a driver that used token auth in an earlier Ray session of this process
    # cannot create actors on a cluster started with auth disabled (ActorDiedError, Ray 2.60).
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_one_rank_per_node_and_gloo_across_nodes(two_nodes):
    pool = RayResourcePool([1, 1], use_gpu=False)
    try:
        slots = pool.slots
        assert len({slot.node_id for slot in slots}) == 2  # one CPU per node: the groups must spread
        assert [slot.local_rank for slot in slots] == [0, 0] and [slot.local_world_size for slot in slots] == [1, 1]
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(NodeWorker))
        try:
            where = wg.where()
            assert [(rank, local_rank, total) for rank, local_rank, _, total in where] == [(0, 0, 3.0), (1, 0, 3.0)]
            assert [node for _, _, node, _ in where] == [slot.node_id for slot in slots]
            assert wg.master_addr == slots[0].node_ip
            # The node the driver does not run on gets its port from a task scheduled there.
            assert all(pick_free_port_on_node(slot.node_id, timeout_s=60.0) > 0 for slot in slots)
        finally:
            wg.shutdown()
    finally:
        pool.remove()


def test_node_share_larger_than_any_node_fails_fast(two_nodes):
    with pytest.raises(
        InsufficientResourcesError, match=r"no single node has 2 CPU for one node's share.*2 node\(s\)"
    ):
        RayResourcePool([2], use_gpu=False)
