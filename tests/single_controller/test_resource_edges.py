# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of the resource check and rank order on hand-made cluster descriptions (no Ray cluster needed): per-node
groups of different sizes on nodes of different sizes, and node addresses that are not IPs."""

import pytest

from verl.single_controller.ray.resource import (
    InsufficientResourcesError,
    NodeResources,
    PlacedGroup,
    check_resources,
    order_slots,
)


CPU_BUNDLE = {"CPU": 1.0}


def cpu_nodes(*cpus: int) -> list[NodeResources]:
    return [NodeResources(f"id{i}", f"10.0.0.{i + 1}", float(n), 0.0) for i, n in enumerate(cpus)]


@pytest.mark.parametrize("request_order", [[2, 4], [4, 2]])
def test_the_largest_share_is_placed_first_so_uneven_groups_fit(request_order):
    """A 4-CPU and a 2-CPU node hold groups of 2 and 4 processes only with the 4 on the big node: placing the 2
    first (on the first node it fits) would leave no node for the 4."""
    check_resources(request_order, CPU_BUNDLE, cpu_nodes(4, 2))
    check_resources(request_order, CPU_BUNDLE, cpu_nodes(2, 4))


def test_fractional_bundles_that_add_up_exactly_fit():
    check_resources([3], {"CPU": 0.1}, [NodeResources("a", "10.0.0.1", 0.3, 0.0)])  # 3 * 0.1 > 0.3 in floats
    with pytest.raises(InsufficientResourcesError, match="it needs 0.4 CPU in total but the cluster has 0.3"):
        check_resources([4], {"CPU": 0.1}, [NodeResources("a", "10.0.0.1", 0.3, 0.0)])


def test_nodes_named_by_hostname_rank_after_ip_addresses():
    groups = [
        PlacedGroup("pg_host", 1, "node_h", "worker-a.cluster"),
        PlacedGroup("pg_ip", 1, "node_i", "10.0.0.2"),
    ]
    assert [slot.placement_group for slot in order_slots(groups)] == ["pg_ip", "pg_host"]
    assert [slot.local_rank for slot in order_slots(groups)] == [0, 0]
    assert [slot.local_world_size for slot in order_slots(groups)] == [1, 1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"process_on_nodes": [2, 0]}, r"process_on_nodes must be a non-empty list of positive ints .* \[2, 0\]"),
        ({"process_on_nodes": []}, "process_on_nodes must be a non-empty list"),
        ({"process_on_nodes": [1.5]}, "process_on_nodes must be a non-empty list"),
        ({"process_on_nodes": [1], "max_colocate_count": 0}, "max_colocate_count must be a positive int, got 0"),
        ({"process_on_nodes": [1], "cpus_per_process": 0.0}, "cpus_per_process must be positive, got 0.0"),
    ],
)
def test_a_pool_request_that_makes_no_sense_is_refused_before_ray_is_asked(kwargs, message):
    from verl.single_controller.ray.resource import RayResourcePool

    with pytest.raises(ValueError, match=message):
        RayResourcePool(**kwargs)
