# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""RayWorkerGroup: one Ray actor per bundle of a resource pool, driven through the `@register` methods;
`create_colocated_worker_cls` puts several roles in one process. Single-machine rendezvous: docs/reliability.md."""

import os
import socket
import tempfile
import uuid
from collections.abc import Iterable
from typing import Any

import ray
from ray.actor import ActorClass, ActorHandle
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from verl.single_controller.base.decorator import REGISTER_ATTR, RegisterSpec, registered_methods
from verl.single_controller.base.worker import get_free_port
from verl.single_controller.base.worker_group import PeerFailed, WorkerGroup
from verl.single_controller.ray.resource import RayResourcePool, cluster_nodes


DIST_INIT_METHOD_ENV = "VERL_DIST_INIT_METHOD"
"""Environment variable with the torch.distributed init_method of a group's ranks, where it is not env://."""

COLOCATED_ROLES_ATTR = "__verl_colocated_roles__"
"""Attribute of a class made by `create_colocated_worker_cls`: role name -> role class."""

_PEER_DEATH_GRACE_S = 10.0
"""After one rank's call fails, how long the other ranks get to show whether a dead process caused it."""


class WorkerDiedError(RuntimeError):
    """A worker process of a group died during a call (kill -9, the OOM killer, a crash in native code)."""

    def __init__(self, message: str, group: str | None = None) -> None:
        super().__init__(message)
        self.group = group
        """The name prefix of the worker group whose process died (None: not a worker group's)."""


class RayClassWithInitArgs:
    """A worker class with the arguments its constructor gets on every rank (nothing is constructed yet)."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        if isinstance(cls, ActorClass):
            raise TypeError(
                "RayClassWithInitArgs needs the plain worker class, not a ray.remote(...) actor class; remove the "
                "@ray.remote decorator (the worker group makes the actor class with the right resources)."
            )
        if not isinstance(cls, type):
            raise TypeError(f"RayClassWithInitArgs needs a class, got {cls!r}.")
        self.cls = cls
        self.args = args
        self.kwargs = kwargs


@ray.remote(num_cpus=0)
def _pick_free_port() -> int:
    """Runs on rank 0's node: the port must be free where the rendezvous store will listen."""
    return get_free_port()


def loopback_rendezvous_env(transports: bool = True) -> dict[str, str]:
    """Environment of the ranks of a group that runs on this machine only: loopback rendezvous and, with `transports`
    (the whole cluster is this machine), loopback transports. On a cluster of several nodes the transports keep the
    default interface: a process group across groups (the weight broadcast to a rollout pool on another node) cannot
    reach a process that gloo or NCCL bound to loopback."""
    store = os.path.join(tempfile.gettempdir(), f"verl_rendezvous_{uuid.uuid4().hex}")
    env = {"MASTER_ADDR": "127.0.0.1", DIST_INIT_METHOD_ENV: f"file://{store}"}
    interface = next((name for _, name in socket.if_nameindex() if name in ("lo", "lo0")), None)  # Linux, macOS
    if interface is not None and transports:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if name not in os.environ:  # the user's choice wins
                env[name] = interface
    return env


def pick_free_port_on_node(node_id: str, timeout_s: float = 60.0) -> int:
    """A port free on the Ray node `node_id`: picked here if this process runs there, else by a task there."""
    if node_id == ray.get_runtime_context().get_node_id():
        return get_free_port()
    strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    try:
        return ray.get(_pick_free_port.options(scheduling_strategy=strategy).remote(), timeout=timeout_s)
    except GetTimeoutError as err:
        raise TimeoutError(
            f"Could not pick a free port on Ray node {node_id} within {timeout_s:g} s; check that the node is alive "
            "and can start Ray workers."
        ) from err


def _wait_constructed(workers: list[ActorHandle]) -> None:
    """Return once every constructor has finished; raise the first constructor error as soon as it occurs (ray.get
    of the whole list could block on a rank waiting in init_process_group for the failed one)."""
    pending = [worker.__ray_ready__.remote() for worker in workers]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)


class RayWorkerGroup(WorkerGroup):
    """A group of Ray actors, one per bundle of `resource_pool`, in the pool's rank order; each `@register` method of
    the worker class becomes a group method that waits for its result (`submit` returns a WorkerGroupFuture).

    Rank 0's rendezvous port is picked on its node before any actor exists (constructors block in
    `init_process_group` until every rank joins); actors get a torchrun-style environment and the group waits for
    every constructor. With every rank on the driver's node, ranks meet through a file store (VERL_DIST_INIT_METHOD),
    and gloo and nccl use the loopback interface unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME are set.
    """

    def __init__(
        self,
        resource_pool: RayResourcePool,
        ray_cls_with_init: RayClassWithInitArgs,
        name_prefix: str | None = None,
        port_timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self._name_prefix = name_prefix or f"wg_{uuid.uuid4().hex[:8]}"
        self._worker_cls = ray_cls_with_init.cls
        slots = resource_pool.slots
        if not slots:
            raise ValueError("The resource pool has no bundles (was it removed?); create a new RayResourcePool.")
        self._world_size = len(slots)
        master_port = pick_free_port_on_node(slots[0].node_id, port_timeout_s)
        here = ray.get_runtime_context().get_node_id()
        local = all(slot.node_id == here for slot in slots)
        self._local_env = loopback_rendezvous_env(transports=len(cluster_nodes()) == 1) if local else {}
        master_addr = self._local_env.get("MASTER_ADDR", slots[0].node_ip)
        self._bind_worker_methods(self._worker_cls)  # name clashes fail before any actor starts
        self._resource_pool: RayResourcePool | None = resource_pool
        self._owns_workers = True
        resource_pool.acquire_share(self._name_prefix)
        actor_cls = ray.remote(self._worker_cls)
        self._workers: list[ActorHandle] = []
        try:
            for rank, slot in enumerate(slots):
                env_vars = {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(self._world_size),
                    "LOCAL_RANK": str(slot.local_rank),
                    "LOCAL_WORLD_SIZE": str(slot.local_world_size),
                    "MASTER_ADDR": master_addr,
                    "MASTER_PORT": str(master_port),
                    "WG_PREFIX": self._name_prefix,
                    **self._local_env,
                    **(env or {}),
                }
                worker = actor_cls.options(
                    **resource_pool.actor_options(),
                    name=f"{self._name_prefix}_rank{rank}",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=slot.placement_group, placement_group_bundle_index=slot.bundle_index
                    ),
                    runtime_env={"env_vars": env_vars},
                ).remote(*ray_cls_with_init.args, **ray_cls_with_init.kwargs)
                self._workers.append(worker)
            _wait_constructed(self._workers)
        except BaseException:
            self.shutdown()  # the other ranks may be blocked in init_process_group waiting for the failed one
            raise

    # ------------------------------------------------------------------ backend hooks

    def _execute_async(self, method_name: str, ranks: Iterable[int], args: list[tuple], kwargs: list[dict]) -> list:
        return [
            getattr(self._workers[rank], method_name).remote(*rank_args, **rank_kwargs)
            for rank, rank_args, rank_kwargs in zip(ranks, args, kwargs)
        ]

    def _wait(self, handles: list[Any]) -> list[Any]:
        """Results in rank order, taken as they come (ray.wait): a rank whose process died fails the call at once,
        naming it, instead of live ranks blocking in a collective with it until the timeout."""
        ranks = {ref: rank for rank, ref in enumerate(handles)}
        pending = list(handles)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                self._result(ready[0], ranks[ready[0]])
            except ray.exceptions.RayTaskError as error:
                # A peer's death often fails the collective before Ray reports it: give the others a moment to show it.
                done, _ = ray.wait(pending, num_returns=len(pending), timeout=_PEER_DEATH_GRACE_S)
                own = None  # a rank's own error, where this one only says a peer failed (PeerFailed)
                for ref in done:
                    try:
                        self._result(ref, ranks[ref])
                    except ray.exceptions.RayTaskError as other:
                        own = own or (other if not isinstance(other, PeerFailed) else None)
                if isinstance(error, PeerFailed) and own is not None:
                    raise own from None
                raise
        return ray.get(handles)

    def _result(self, ref: Any, rank: int) -> Any:
        """ray.get(ref); a dead worker process fails it with a WorkerDiedError naming `rank`."""
        try:
            return ray.get(ref)
        except ray.exceptions.ActorDiedError as err:
            raise WorkerDiedError(
                f"Worker {self._name_prefix} rank {rank} died (killed, or out of memory: check the "
                f"node's memory and `dmesg`); the run cannot continue. Ray said: {err}",
                self._name_prefix,
            ) from None
        except ray.exceptions.ActorUnavailableError as err:  # its node's raylet died (killed, `ray stop`, OOM)
            raise WorkerDiedError(
                f"Worker {self._name_prefix} rank {rank} cannot be reached: Ray's daemons on its node stopped "
                f"(`ray stop`, killed, or out of memory: check `dmesg`); the run cannot continue. Ray said: {err}",
                self._name_prefix,
            ) from None

    # ------------------------------------------------------------------ public

    def spawn(self, prefix_set: Iterable[str]) -> dict[str, "RayWorkerGroup"]:
        """Per-role views of a colocated group sharing its actors: `views[role].method(...)` calls that role's
        instance everywhere. Kill through this (the owning) group."""
        roles: dict[str, type] | None = getattr(self._worker_cls, COLOCATED_ROLES_ATTR, None)
        if roles is None:
            raise TypeError(
                f"spawn() needs a group of a class made by create_colocated_worker_cls, but this group runs "
                f"{self._worker_cls.__name__}; call its methods on the group directly."
            )
        views = {}
        for role in prefix_set:
            if role not in roles:
                raise KeyError(f"Role {role!r} is not in this colocated group; it has roles {sorted(roles)}.")
            view = object.__new__(RayWorkerGroup)
            view._name_prefix = f"{self._name_prefix}/{role}"
            view._worker_cls = roles[role]
            view._world_size = self._world_size
            view._workers = self._workers
            view._owns_workers = False
            view._method_prefix = f"{role}_"
            view._bind_worker_methods(roles[role])
            views[role] = view
        return views

    def shutdown(self) -> None:
        """Kill the actors (their processes exit; the pool share is returned). A no-op on spawned views."""
        if not self._owns_workers:
            return
        for worker in self._workers:
            ray.kill(worker)
        self._workers = []
        store = self._local_env.get(DIST_INIT_METHOD_ENV, "").removeprefix("file://")
        if store and os.path.exists(store):
            os.remove(store)
        if self._resource_pool is not None:
            self._resource_pool.release_share(self._name_prefix)
            self._resource_pool = None


# ---------------------------------------------------------------------------------------------- colocation


def _make_role_method(role: str, name: str, spec: RegisterSpec) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._role_instances[role], name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = f"{role}_{name}"
    setattr(method, REGISTER_ATTR, spec)
    return method


def _colocated_init(self: Any, role_inits: dict[str, tuple[tuple, dict]]) -> None:
    """Construct one instance per role, in the order the roles were given, inside this process."""
    roles = getattr(type(self), COLOCATED_ROLES_ATTR)
    self._role_instances = {role: roles[role](*args, **kwargs) for role, (args, kwargs) in role_inits.items()}


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs | type]) -> RayClassWithInitArgs:
    """One worker class whose every process holds one instance per role (e.g. actor_rollout_ref and critic), sharing
    its environment and device; each role's `@register` method `m` becomes `{role}_m` (`RayWorkerGroup.spawn` gives
    plain names back)."""
    if not class_dict:
        raise ValueError("create_colocated_worker_cls needs at least one role, e.g. {'actor_rollout_ref': cls}.")
    roles: dict[str, type] = {}
    role_inits: dict[str, tuple[tuple, dict]] = {}
    namespace: dict[str, Any] = {}
    for role, item in class_dict.items():
        if not role.isidentifier():
            raise ValueError(f"Role name {role!r} must be a Python identifier (it prefixes method names).")
        init = item if isinstance(item, RayClassWithInitArgs) else RayClassWithInitArgs(item)
        roles[role] = init.cls
        role_inits[role] = (init.args, init.kwargs)
        for name, spec in registered_methods(init.cls).items():
            full_name = f"{role}_{name}"
            if full_name in namespace:
                raise ValueError(
                    f"Colocated method name {full_name!r} is produced by two roles; rename a role or the method."
                )
            namespace[full_name] = _make_role_method(role, name, spec)
    namespace["__init__"] = _colocated_init
    namespace["__doc__"] = f"One process holding the roles {list(roles)}."
    namespace[COLOCATED_ROLES_ATTR] = roles
    return RayClassWithInitArgs(type("Colocated_" + "_".join(roles), (), namespace), role_inits)
