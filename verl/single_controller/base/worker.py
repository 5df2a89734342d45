# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The base class of every process a WorkerGroup starts: its rank in the group and the rendezvous.

The launcher sets the torchrun-style environment (DIST_ENV_VARS) before the worker is constructed, so `__init__` may
call `init_process_group` with `env://`; MASTER_PORT was free on rank 0's node when the group was created.
"""

import os
import socket
from operator import attrgetter


DIST_ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The environment variables a launcher sets for every rank (torchrun's names)."""


class WorkerEnvError(RuntimeError):
    """The process was not started by a WorkerGroup (or torchrun): a rank variable is missing or malformed."""


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
        self._rank, self._world_size = _read_env_int("RANK"), _read_env_int("WORLD_SIZE")
        if not 0 <= self.rank < self.world_size:
            raise WorkerEnvError(f"RANK={self.rank} is outside [0, WORLD_SIZE={self.world_size}); fix the launcher.")

    rank = property(attrgetter("_rank"), doc="Global rank in [0, world_size).")
    world_size = property(attrgetter("_world_size"), doc="Number of ranks in the group.")
