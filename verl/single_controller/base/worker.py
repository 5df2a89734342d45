# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The base class of every process a WorkerGroup starts: its rank in the group and the rendezvous.

The launcher sets the torchrun-style environment (DIST_ENV_VARS) before the worker is constructed, so `__init__` may
call `init_process_group` with `env://`; MASTER_PORT was free on rank 0's node when the group was created.
"""

import dataclasses
import os
import socket
from dataclasses import dataclass
from operator import attrgetter

from verl.single_controller.base.decorator import Dispatch, register


DIST_ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The environment variables a launcher sets for every rank (torchrun's names)."""


class WorkerEnvError(RuntimeError):
    """The process was not started by a WorkerGroup (or torchrun): a rank variable is missing or malformed."""


@dataclass(frozen=True)
class DistEnv:
    """A rank's place in its group, as the launcher's environment variables give it."""

    rank: int
    world_size: int
    local_rank: int
    """Rank among the group's processes on this node."""
    local_world_size: int
    master_addr: str
    """IP of rank 0's node: the rendezvous store's address."""
    master_port: int


@dataclass(frozen=True)
class RankInfo(DistEnv):
    """Where one rank runs; returned by `Worker.get_rank_info` to check placement and rank order."""

    node_ip: str
    pid: int


def get_free_port(host: str = "") -> int:
    """A TCP port free on this machine right now, bound on all interfaces ("") by default."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _read_env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise WorkerEnvError(
            f"Environment variable {name} is not set; start workers through a WorkerGroup (or torchrun), which sets "
            f"{', '.join(DIST_ENV_VARS)}."
        )
    try:
        return int(value)
    except ValueError as err:
        raise WorkerEnvError(f"Environment variable {name}={value!r} is not an integer; fix the launcher.") from err


class Worker:
    """Rank bookkeeping shared by every worker, read once from the environment at construction (a test may set the
    variables first); subclasses add the `@register` methods the driver calls."""

    def __init__(self) -> None:
        self._dist_env = DistEnv(
            rank=_read_env_int("RANK"),
            world_size=_read_env_int("WORLD_SIZE"),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(os.environ.get("MASTER_PORT", "0")),
        )
        if not 0 <= self.rank < self.world_size:
            raise WorkerEnvError(f"RANK={self.rank} is outside [0, WORLD_SIZE={self.world_size}); fix the launcher.")

    rank = property(attrgetter("_dist_env.rank"), doc="Global rank in [0, world_size).")
    world_size = property(attrgetter("_dist_env.world_size"), doc="Number of ranks in the group.")
    local_rank = property(attrgetter("_dist_env.local_rank"), doc="Rank among the group's processes on this node.")
    local_world_size = property(attrgetter("_dist_env.local_world_size"), doc="The group's processes on this node.")
    master_addr = property(attrgetter("_dist_env.master_addr"), doc="IP of rank 0's node (the rendezvous store).")
    master_port = property(attrgetter("_dist_env.master_port"), doc="Port of the rendezvous store on master_addr.")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_rank_info(self) -> RankInfo:
        """Rank, rendezvous and placement of this process (the node IP is what other nodes use to reach it)."""
        return RankInfo(**dataclasses.asdict(self._dist_env), node_ip=_node_ip(), pid=os.getpid())


def _node_ip() -> str:
    """This node's IP as the cluster sees it (Ray's view when running under Ray, else the hostname's)."""
    import ray

    if ray.is_initialized():
        return ray.util.get_node_ip_address()
    return socket.gethostbyname(socket.gethostname())
