# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Resource checks and rank order on hand-made cluster descriptions (no Ray cluster needed)."""

import pytest

from verl.single_controller.ray.resource import (
    InsufficientResourcesError,
    NodeResources,
    PlacedGroup,
    check_resources,
    order_slots,
)


GPU_BUNDLE = {"CPU": 1.0, "GPU": 1.0}
CPU_BUNDLE = {"CPU": 1.0}


def gpu_nodes(*gpus: int, cpus: int = 32) -> list[NodeResources]:
    return [NodeResources(f"id{i}", f"10.0.0.{i + 1}", float(cpus), float(n)) for i, n in enumerate(gpus)]


def test_requests_that_fit_pass():
    check_resources([8, 8], GPU_BUNDLE, gpu_nodes(8, 8))
    check_resources([4, 4], GPU_BUNDLE, gpu_nodes(8))  # two per-node groups may share one big node
    check_resources([2], CPU_BUNDLE, [NodeResources("a", "10.0.0.1", 2.0, 0.0)])
    check_resources([1, 1], CPU_BUNDLE, [NodeResources("a", "10.0.0.1", 1.0, 0.0)] * 2)


def test_too_many_gpus_in_total():
    with pytest.raises(InsufficientResourcesError) as excinfo:
        check_resources([8, 8], GPU_BUNDLE, gpu_nodes(8))
    message = str(excinfo.value)
    assert "asks for 2 node(s) x 8 process(es) per node" in message
    assert "{CPU 1, GPU 1}" in message and "CPU 16, GPU 16 in total" in message
    assert "it needs 16 GPU in total but the cluster has 8" in message
    assert "1 node(s): 10.0.0.1 (CPU 32, GPU 8) (total CPU 32, GPU 8)" in message
    assert message.endswith("or add nodes.")


def test_gpus_requested_on_a_cpu_cluster():
    with pytest.raises(InsufficientResourcesError, match="needs 2 GPU in total but the cluster has 0"):
        check_resources([2], GPU_BUNDLE, [NodeResources("a", "10.0.0.1", 2.0, 0.0)])


def test_one_node_share_larger_than_any_node():
    with pytest.raises(InsufficientResourcesError, match="no single node has 8 CPU, 8 GPU for one node's share"):
        check_resources([8], GPU_BUNDLE, gpu_nodes(4, 4))


def test_too_few_nodes_although_totals_fit():
    # 6 GPUs exist and 6 are asked for, but each node holds only one group of 2 (3 - 2 leaves 1).
    with pytest.raises(InsufficientResourcesError) as excinfo:
        check_resources([2, 2, 2], GPU_BUNDLE, gpu_nodes(3, 3))
    message = str(excinfo.value)
    assert "only 2 of the 3 per-node groups fit" in message
    assert "3 node(s) x 2 process(es)" in message and "2 node(s): 10.0.0.1 (CPU 32, GPU 3); 10.0.0.2" in message


def test_cpu_limits_count_for_gpu_bundles_too():
    with pytest.raises(InsufficientResourcesError, match="needs 8 CPU in total but the cluster has 4"):
        check_resources([4, 4], GPU_BUNDLE, gpu_nodes(4, 4, cpus=2))


def test_uneven_request_is_described_as_a_list():
    with pytest.raises(InsufficientResourcesError, match=r"2 node\(s\) with \[2, 1\] process\(es\)"):
        check_resources([2, 1], CPU_BUNDLE, [NodeResources("a", "10.0.0.1", 2.0, 0.0)])


def test_rank_order_sorts_by_node_ip_then_bundle_and_counts_local_ranks_per_node():
    groups = [
        PlacedGroup("pg_a", 2, "node_b", "10.0.0.10"),
        PlacedGroup("pg_b", 2, "node_a", "10.0.0.9"),  # sorts first: IPs compare numerically
        PlacedGroup("pg_c", 1, "node_a", "10.0.0.9"),  # a second group on the same node
    ]
    slots = order_slots(groups)
    assert [(s.placement_group, s.bundle_index) for s in slots] == [
        ("pg_b", 0),
        ("pg_b", 1),
        ("pg_c", 0),
        ("pg_a", 0),
        ("pg_a", 1),
    ]
    assert [s.local_rank for s in slots] == [0, 1, 2, 0, 1]
    assert [s.local_world_size for s in slots] == [3, 3, 3, 2, 2]
    assert order_slots(list(reversed(groups)))[0].placement_group == "pg_c"  # same IP: creation order kept
