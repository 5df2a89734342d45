# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Resource pools: one STRICT_PACK placement group per node, checked against the cluster first (Ray would leave an
impossible group pending forever). Ranks follow where the groups landed (node IP, then bundle index)."""

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group


class InsufficientResourcesError(ValueError):
    """The cluster can never satisfy the pool's request (too few GPUs, CPUs or nodes)."""


class PlacementGroupTimeoutError(TimeoutError):
    """The request fits the cluster, but the resources stayed busy (held by other jobs) past the timeout."""


@dataclass(frozen=True)
class NodeResources:
    """One alive node as Ray reports it: total CPUs and GPUs, not what is free right now."""

    node_id: str
    ip: str
    cpus: float
    gpus: float

    def describe(self) -> str:
        return f"{self.ip} (CPU {self.cpus:g}, GPU {self.gpus:g})"


@dataclass(frozen=True)
class BundleSlot:
    """Where one rank runs: a bundle of a placement group, with the node it landed on."""

    placement_group: PlacementGroup
    bundle_index: int
    node_id: str
    node_ip: str
    local_rank: int
    local_world_size: int


def cluster_nodes() -> list[NodeResources]:
    """The alive nodes of the connected Ray cluster with their total CPU and GPU counts."""
    return [
        NodeResources(
            node_id=node["NodeID"],
            ip=node["NodeManagerAddress"],
            cpus=float(node.get("Resources", {}).get("CPU", 0.0)),
            gpus=float(node.get("Resources", {}).get("GPU", 0.0)),
        )
        for node in ray.nodes()
        if node.get("Alive", False)
    ]


def _describe_request(process_on_nodes: Sequence[int], bundle: dict[str, float]) -> str:
    per_bundle = ", ".join(f"{key} {value:g}" for key, value in bundle.items())
    totals = ", ".join(f"{key} {value * sum(process_on_nodes):g}" for key, value in bundle.items())
    if len(set(process_on_nodes)) == 1:
        shape = f"{len(process_on_nodes)} node(s) x {process_on_nodes[0]} process(es) per node"
    else:
        shape = f"{len(process_on_nodes)} node(s) with {list(process_on_nodes)} process(es)"
    return f"{shape}, each process a bundle of {{{per_bundle}}} ({totals} in total; each node's share on one node)"


def describe_cluster(nodes: Sequence[NodeResources]) -> str:
    """The cluster as the errors that say what it has describe it: its nodes' addresses and resources, and the totals."""
    listed = "; ".join(node.describe() for node in nodes) or "none"
    total_cpus, total_gpus = sum(node.cpus for node in nodes), sum(node.gpus for node in nodes)
    return f"{len(nodes)} node(s): {listed} (total CPU {total_cpus:g}, GPU {total_gpus:g})"


def _fits(node_free: dict[str, float], need: dict[str, float]) -> bool:
    return all(node_free.get(key, 0.0) >= value - 1e-9 for key, value in need.items())


def check_resources(process_on_nodes: Sequence[int], bundle: dict[str, float], nodes: Sequence[NodeResources]) -> None:
    """Raise InsufficientResourcesError unless every per-node group of bundles fits on some node at once (several may
    share a big node); largest first, first fit, exact for equal-size groups as pools normally have."""
    capacity = [{"CPU": node.cpus, "GPU": node.gpus} for node in nodes]
    demands = [{key: value * count for key, value in bundle.items()} for count in process_on_nodes]
    problem = None
    for key in bundle:
        asked, have = sum(demand[key] for demand in demands), sum(free[key] for free in capacity)
        if asked > have + 1e-9:
            problem = f"it needs {asked:g} {key} in total but the cluster has {have:g}"
            break
    if problem is None:
        too_big = [demand for demand in demands if not any(_fits(free, demand) for free in capacity)]
        if too_big:
            wanted = ", ".join(f"{value:g} {key}" for key, value in too_big[0].items())
            problem = f"no single node has {wanted} for one node's share"
    if problem is None:
        placed = 0
        for demand in sorted(demands, key=lambda demand: tuple(demand.values()), reverse=True):
            node = next((free for free in capacity if _fits(free, demand)), None)
            if node is None:
                break
            for key, value in demand.items():
                node[key] -= value
            placed += 1
        if placed < len(demands):
            problem = f"only {placed} of the {len(demands)} per-node groups fit on the cluster's nodes at once"
    if problem is not None:
        raise InsufficientResourcesError(
            f"Resource pool asks for {_describe_request(process_on_nodes, bundle)}, but {problem}. The cluster has "
            f"{describe_cluster(nodes)}. Ask for fewer processes per node or fewer nodes, or add nodes."
        )


def _ip_sort_key(ip: str) -> tuple[int, Any]:
    try:
        return (0, ipaddress.ip_address(ip))
    except ValueError:
        return (1, ip)


class RayResourcePool:
    """Placement groups for `sum(process_on_nodes)` ranks, one STRICT_PACK group per node, ready on return.
    `max_colocate_count`: separate worker groups (processes) that may share one bundle, each actor taking that
    fraction of it; roles sharing one process (`create_colocated_worker_cls`) need no extra share."""

    def __init__(
        self,
        process_on_nodes: Sequence[int],
        use_gpu: bool = True,
        max_colocate_count: int = 1,
        cpus_per_process: float = 1.0,
        name_prefix: str = "",
        ready_timeout_s: float = 120.0,
    ) -> None:
        if not process_on_nodes or any(not isinstance(n, int) or n <= 0 for n in process_on_nodes):
            raise ValueError(
                f"process_on_nodes must be a non-empty list of positive ints (processes per node), "
                f"got {list(process_on_nodes)!r}."
            )
        if not isinstance(max_colocate_count, int) or max_colocate_count <= 0:
            raise ValueError(f"max_colocate_count must be a positive int, got {max_colocate_count!r}.")
        if cpus_per_process <= 0:
            raise ValueError(f"cpus_per_process must be positive, got {cpus_per_process!r}.")
        if not ray.is_initialized():
            raise RuntimeError("RayResourcePool needs a running Ray; call ray.init(...) first.")
        self.process_on_nodes = list(process_on_nodes)
        self.use_gpu = use_gpu
        self.max_colocate_count = max_colocate_count
        self.bundle: dict[str, float] = {"CPU": float(cpus_per_process)}
        if use_gpu:
            self.bundle["GPU"] = 1.0
        check_resources(self.process_on_nodes, self.bundle, cluster_nodes())
        self._placement_groups = self._create_placement_groups(name_prefix, ready_timeout_s)
        self._slots = self._assign_ranks()
        self._groups: set[str] = set()

    @property
    def world_size(self) -> int:
        return sum(self.process_on_nodes)

    @property
    def slots(self) -> list[BundleSlot]:
        """One bundle per rank, in rank order (node IP, then bundle index)."""
        return list(self._slots)

    def actor_options(self) -> dict[str, float]:
        """Resources one actor of one worker group takes from its bundle."""
        options = {"num_cpus": self.bundle["CPU"] / self.max_colocate_count}
        if self.use_gpu:
            options["num_gpus"] = 1.0 / self.max_colocate_count
        return options

    def acquire_share(self, group_name: str) -> None:
        """Book one of the `max_colocate_count` shares of every bundle for a worker group; one group too many fails
        here instead of waiting forever for its actors."""
        if len(self._groups) >= self.max_colocate_count:
            raise InsufficientResourcesError(
                f"Cannot start worker group {group_name!r}: the resource pool is shared by max_colocate_count="
                f"{self.max_colocate_count} group(s) already ({sorted(self._groups)}). Shut one down, build the pool "
                "with a larger max_colocate_count, or colocate roles in one process with create_colocated_worker_cls."
            )
        self._groups.add(group_name)

    def release_share(self, group_name: str) -> None:
        """Return a share booked by `acquire_share` (after the group's actors are killed)."""
        self._groups.discard(group_name)

    def remove(self) -> None:
        """Release the placement groups (kill the worker groups on them first)."""
        for pg in self._placement_groups:
            remove_placement_group(pg)
        self._placement_groups, self._slots = [], []

    def _create_placement_groups(self, name_prefix: str, ready_timeout_s: float) -> list[PlacementGroup]:
        pgs = [
            placement_group(
                [dict(self.bundle) for _ in range(count)],
                strategy="STRICT_PACK",
                name=f"{name_prefix}_node{index}" if name_prefix else "",
            )
            for index, count in enumerate(self.process_on_nodes)
        ]
        ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=ready_timeout_s)
        if len(ready) < len(pgs):
            for pg in pgs:
                remove_placement_group(pg)
            raise PlacementGroupTimeoutError(
                f"Only {len(ready)} of {len(pgs)} placement groups were ready after {ready_timeout_s:g} s. The pool "
                f"asks for {_describe_request(self.process_on_nodes, self.bundle)}; the cluster has "
                f"{describe_cluster(cluster_nodes())}, of which {ray.available_resources()} is free now. Other "
                "actors or placement groups hold the rest: free them (`ray status` lists what holds the cluster), or start "
                "the run when they are done."
            )
        return pgs

    def _assign_ranks(self) -> list[BundleSlot]:
        node_ips = {node.node_id: node.ip for node in cluster_nodes()}
        located = []
        for pg in self._placement_groups:
            node_id = placement_group_table(pg)["bundles_to_node_id"][0]  # STRICT_PACK: all bundles on one node
            located.append(PlacedGroup(pg, pg.bundle_count, node_id, node_ips.get(node_id, "")))
        slots = order_slots(located)
        self._placement_groups = list(dict.fromkeys(slot.placement_group for slot in slots))
        return slots


@dataclass(frozen=True)
class PlacedGroup:
    placement_group: PlacementGroup
    bundle_count: int
    node_id: str
    node_ip: str


def order_slots(groups: Sequence[PlacedGroup]) -> list[BundleSlot]:
    """Rank order of the bundles: by node IP (numerically), then bundle index; groups on one IP keep their creation
    order. Local ranks count across all groups on a node, so two never both get LOCAL_RANK 0."""
    ordered = sorted(groups, key=lambda group: _ip_sort_key(group.node_ip))
    per_node: dict[str, int] = {}
    for group in ordered:
        per_node[group.node_id] = per_node.get(group.node_id, 0) + group.bundle_count
    seen: dict[str, int] = {}
    slots = []
    for group in ordered:
        for bundle_index in range(group.bundle_count):
            local_rank = seen.get(group.node_id, 0)
            seen[group.node_id] = local_rank + 1
            slots.append(
                BundleSlot(
                    placement_group=group.placement_group,
                    bundle_index=bundle_index,
                    node_id=group.node_id,
                    node_ip=group.node_ip,
                    local_rank=local_rank,
                    local_world_size=per_node[group.node_id],
                )
            )
    return slots
