# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""RayWorkerGroup on a real local Ray (2 CPUs): rank wiring, dispatch modes, futures, gloo, colocation, resources."""

import os
import sys
import time

import pytest
import torch
import torch.distributed as dist


ray = pytest.importorskip("ray")

from verl.protocol import DataProto  # noqa: E402
from verl.single_controller.base import Dispatch, Worker, WorkerGroupFuture, register  # noqa: E402
from verl.single_controller.ray import (  # noqa: E402
    InsufficientResourcesError,
    PlacementGroupTimeoutError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from verl.utils import stall_report  # noqa: E402


pytestmark = pytest.mark.slow

# Ray workers cannot import pytest's test modules; ship this module's worker classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class DispatchWorker(Worker):
    """Joins a gloo process group in its constructor, as FSDP workers do (all ranks must start together)."""

    def __init__(self, offset: float) -> None:
        super().__init__()
        dist.init_process_group("gloo")
        self.offset = offset

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce(self, value: float) -> list[float]:
        tensor = torch.tensor([value * (self.rank + 1), 1.0])
        dist.all_reduce(tensor)
        return tensor.tolist()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def shift(self, data: DataProto, scale: float = 1.0) -> DataProto:
        out = DataProto.from_dict(tensors={"y": data.batch["x"] * scale + self.offset})
        out.batch["rank"] = torch.full((len(data),), self.rank)
        return out

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def count_rows(self, data: DataProto) -> dict[str, int]:
        return {"rank": self.rank, "rows": len(data)}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self, *names: str) -> dict[str, str | None]:
        return {name: os.environ.get(name) for name in names}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def die_on(self, rank: int) -> list[float]:
        """`rank` exits as kill -9 would; the others wait for it in a collective, as FSDP ranks would."""
        if self.rank == rank:
            os._exit(1)
        return self.all_reduce(1.0)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def die_after_peer_fails(self, rank: int) -> None:
        """The live ranks fail first (as a collective does when its peer's socket closes), then `rank` exits."""
        if self.rank == rank:
            time.sleep(1.0)
            os._exit(1)
        raise RuntimeError("Connection closed by peer")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_with_peers(self, rank: int) -> None:
        """`rank` fails with its own error, after the others stop saying a peer failed (a tensor-parallel engine's
        followers, whose PeerFailed reached the driver first)."""
        from verl.single_controller.base.worker_group import PeerFailed

        if self.rank == rank:
            time.sleep(0.5)
            raise ValueError(f"the user's environment failed on rank {rank}")
        raise PeerFailed("a peer failed")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, rank: int) -> int:
        if self.rank == rank:
            raise ValueError(f"bad input on rank {rank}")
        return self.rank


class ActorRole(Worker):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"from_actor": data.batch["x"] + 100})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self) -> tuple[str, int, int]:
        return self.name, self.rank, os.getpid()


class CriticRole(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"from_critic": -data.batch["x"]})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self) -> tuple[str, int, int]:
        return "critic", self.rank, os.getpid()


class FailingWorker(Worker):
    """Rank 0 blocks in init_process_group waiting for rank 1, whose constructor fails first."""

    def __init__(self) -> None:
        super().__init__()
        if self.rank == 1:
            raise ValueError("rank 1 cannot start")
        dist.init_process_group("gloo")


class ListeningWorker(Worker):
    """Joins the process group as the FSDP workers do (init_distributed) and records the sockets that opened."""

    def __init__(self) -> None:
        super().__init__()
        import psutil

        from verl.utils import device

        def listening() -> set[tuple[str, int]]:
            return {
                (conn.laddr.ip, conn.laddr.port)
                for conn in psutil.Process().net_connections(kind="inet")
                if conn.status == psutil.CONN_LISTEN
            }

        before = listening()
        device.set_device_type("cpu")
        device.init_distributed(timeout_seconds=60)
        tensor = torch.ones(1)
        dist.all_reduce(tensor)  # gloo's pairs are connected by now
        self.opened = sorted(listening() - before)
        self.total = tensor.item()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def report(self) -> tuple[list[tuple[str, int]], float, str]:
        return self.opened, self.total, os.environ.get("VERL_DIST_INIT_METHOD", "")


class StallingWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def stall(self, seconds: float) -> str:
        """Sleep, then return the end of this worker's stderr (a file of Ray's, which its log shows)."""
        time.sleep(seconds)
        sys.stderr.flush()
        with open(os.readlink("/proc/self/fd/2"), errors="replace") as f:
            return f.read()[-20000:]


def make_batch(rows: int) -> DataProto:
    return DataProto.from_dict(tensors={"x": torch.arange(rows, dtype=torch.float32)})


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"VERL_SC_TEST": "job"}},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pool(ray_cluster):
    # Two bundles of half a CPU, each shared by up to 2 groups (1/4 CPU per actor); one CPU stays free.
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=2, cpus_per_process=0.5)
    yield pool
    pool.remove()


@pytest.fixture(scope="module")
def dispatch_wg(pool):
    env = stall_report.env(600)  # the driver's environment for the group's workers (trainer.stall_report_s)
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(DispatchWorker, offset=0.5), name_prefix="dispatch", env=env)
    yield wg
    wg.shutdown()


def test_ranks_environment_and_order(dispatch_wg):
    assert dispatch_wg.world_size == 2
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
    launched = dispatch_wg.env(*names)
    # every rank runs on this machine: the rendezvous address is loopback
    assert launched == [dict(zip(names, (str(rank), "2", str(rank), "2", "127.0.0.1"))) for rank in range(2)]
    ports = {port for (port,) in map(dict.values, dispatch_wg.env("MASTER_PORT"))}
    assert len(ports) == 1 and int(ports.pop()) > 0  # one rendezvous port, free on rank 0's node
    # The job's runtime_env variables and the group's own reach the workers next to the rank variables.
    env = dispatch_wg.env("RANK", "WG_PREFIX", "VERL_SC_TEST", stall_report.ENV)
    assert env == [
        {"RANK": str(rank), "WG_PREFIX": "dispatch", "VERL_SC_TEST": "job", stall_report.ENV: "600.0"}
        for rank in range(2)
    ]
    assert ray.get(ray.get_actor("dispatch_rank1").env.remote("RANK")) == {"RANK": "1"}


def test_a_long_call_is_reported_in_each_worker_s_log(pool):
    """trainer.stall_report_s through a real group: the driver's environment reaches each worker, whose report of the
    running call (its name and stack) is in the worker's log."""
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(StallingWorker), name_prefix="stalling", env=stall_report.env(0.2))
    try:
        logs = wg.stall(1.0)
    finally:
        wg.shutdown()
    for log in logs:
        assert "[verl stall report] StallingWorker.stall has run for" in log, log[-2000:]
        assert "in stall\n    time.sleep(seconds)" in log, log[-2000:]


def test_dp_compute_proto_pads_and_broadcasts(dispatch_wg):
    out = dispatch_wg.shift(make_batch(5), scale=2.0)
    assert out.batch["y"].tolist() == [0.5, 2.5, 4.5, 6.5, 8.5]
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1]
    out = dispatch_wg.shift(data=make_batch(4))
    assert out.batch["rank"].tolist() == [0, 0, 1, 1]


def test_non_blocking_returns_future_and_futures_chain(dispatch_wg):
    future = dispatch_wg.submit("shift", make_batch(3))
    assert isinstance(future, WorkerGroupFuture) and len(future.handles) == 2
    first = future.get()
    assert first.batch["y"].tolist() == [0.5, 1.5, 2.5] and future.get() is first
    # A future passed as an argument is resolved first; its output becomes the next input.
    chained = dispatch_wg.count_rows(dispatch_wg.submit("shift", make_batch(3)))
    assert chained == [{"rank": 0, "rows": 2}, {"rank": 1, "rows": 2}]


def test_gloo_all_reduce_across_two_actors(dispatch_wg):
    assert dispatch_wg.all_reduce(1.5) == [[4.5, 2.0], [4.5, 2.0]]


def test_single_machine_group_listens_on_loopback_only(pool):
    """torch's TCPStore binds every interface and has no authentication: a group on one machine meets through a
    file store instead, and gloo uses the loopback interface."""
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(ListeningWorker), name_prefix="listening")
    try:
        reports = wg.report()
    finally:
        wg.shutdown()
    assert [total for _, total, _ in reports] == [2.0, 2.0]
    store = reports[0][2]
    for opened, _, _ in reports:
        assert opened, "gloo listens for its peers"
        assert all(ip in ("127.0.0.1", "::1") for ip, _ in opened), opened
    assert store.startswith("file://") and not os.path.exists(store.removeprefix("file://"))


def test_colocated_roles_share_each_process(pool):
    colocated = create_colocated_worker_cls(
        {"actor_rollout_ref": RayClassWithInitArgs(ActorRole, name="actor"), "critic": CriticRole}
    )
    wg = RayWorkerGroup(pool, colocated, name_prefix="colocated")
    try:
        views = wg.spawn({"actor_rollout_ref", "critic"})
        actor, critic = views["actor_rollout_ref"], views["critic"]
        assert actor.world_size == critic.world_size == 2
        actor_desc, critic_desc = actor.describe(), critic.describe()
        assert [d[:2] for d in actor_desc] == [("actor", 0), ("actor", 1)]
        assert [d[:2] for d in critic_desc] == [("critic", 0), ("critic", 1)]
        assert [d[2] for d in actor_desc] == [d[2] for d in critic_desc]  # same process per rank
        assert actor_desc[0][2] != actor_desc[1][2]
        assert actor.compute(make_batch(3)).batch["from_actor"].tolist() == [100.0, 101.0, 102.0]
        assert critic.compute(make_batch(3)).batch["from_critic"].tolist() == [0.0, -1.0, -2.0]
        assert wg.critic_describe() == critic_desc  # the owning group has the prefixed names
        assert critic.execute_all("describe") == critic_desc and actor.execute_all("describe") == actor_desc
        with pytest.raises(KeyError, match="has roles"):
            wg.spawn({"reward"})
        # Both shares of the pool are taken now: a third group fails at once instead of waiting for CPUs.
        with pytest.raises(InsufficientResourcesError, match=r"max_colocate_count=2 group\(s\) already"):
            RayWorkerGroup(pool, RayClassWithInitArgs(CriticRole), name_prefix="third")
    finally:
        wg.shutdown()


@pytest.mark.timeout(120)
def test_constructor_error_is_raised_and_the_group_cleaned_up(pool, dispatch_wg):
    with pytest.raises(ray.exceptions.RayActorError, match="rank 1 cannot start"):
        RayWorkerGroup(pool, RayClassWithInitArgs(FailingWorker), name_prefix="failing")
    # rank 0, blocked in init_process_group, was killed; ray.kill is asynchronous, so its name may outlive the call
    # by a moment (seen once under load): it must be gone within seconds
    deadline = time.monotonic() + 10.0
    while True:
        try:
            ray.get_actor("failing_rank0")
        except ValueError as err:
            assert "Failed to look up actor" in str(err)
            break
        assert time.monotonic() < deadline, "the failed group's rank 0 is still alive 10 s after the failure"
        time.sleep(0.1)
    assert pool._groups == {"dispatch"}  # the failed group's share was returned


def test_a_dead_worker_fails_the_call_naming_its_rank(pool, dispatch_wg):
    from verl.single_controller.ray import WorkerDiedError

    wg = RayWorkerGroup(pool, RayClassWithInitArgs(DispatchWorker, offset=0.0), name_prefix="doomed")
    try:
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match=r"Worker doomed rank 1 died"):
            wg.die_on(1)  # rank 0 is still blocked in the all-reduce: the error must not wait for it
        assert time.monotonic() - start < 60
    finally:
        wg.shutdown()


def test_a_peer_death_is_named_even_when_a_live_rank_fails_first(pool, dispatch_wg):
    from verl.single_controller.ray import WorkerDiedError

    wg = RayWorkerGroup(pool, RayClassWithInitArgs(DispatchWorker, offset=0.0), name_prefix="doomed2")
    try:
        with pytest.raises(WorkerDiedError, match=r"Worker doomed2 rank 1 died"):
            wg.die_after_peer_fails(1)
    finally:
        wg.shutdown()


def test_an_error_on_a_live_group_is_raised_as_itself(dispatch_wg):
    with pytest.raises(ValueError, match="bad input on rank 1"):
        dispatch_wg.fail_on(1)
    assert dispatch_wg.fail_on(5) == [0, 1]  # the group is still usable
    # a rank's own error, not its peers' word that it failed, even when theirs comes first (the CLI names a user's
    # error; the peers' was a traceback, and a synchronous step's save was skipped)
    with pytest.raises(ValueError, match="the user's environment failed on rank 0"):
        dispatch_wg.fail_with_peers(0)


def test_insufficient_resources_fail_fast_with_message(ray_cluster):
    pgs_before = len(ray.util.placement_group_table())
    start = time.monotonic()
    with pytest.raises(InsufficientResourcesError) as excinfo:
        RayResourcePool([3], use_gpu=False)
    message = str(excinfo.value)
    assert "1 node(s) x 3 process(es) per node" in message and "CPU 3 in total" in message
    assert "needs 3 CPU in total but the cluster has 2" in message and "1 node(s):" in message
    with pytest.raises(
        InsufficientResourcesError, match=r"2 node\(s\) x 1 process\(es\).*needs 2 GPU in total but the cluster has 0"
    ):
        RayResourcePool([1, 1], use_gpu=True)
    with pytest.raises(InsufficientResourcesError, match=r"3 node\(s\) x 1 process\(es\)"):
        RayResourcePool([1, 1, 1], use_gpu=False)
    assert time.monotonic() - start < 5.0
    assert len(ray.util.placement_group_table()) == pgs_before  # nothing was created


def test_busy_resources_time_out_instead_of_hanging(pool):
    # The module's pool holds one of the two CPUs, so a new 2-CPU pool fits the cluster but not what is free now.
    with pytest.raises(PlacementGroupTimeoutError, match="Only 0 of 1 placement groups were ready after 1 s"):
        RayResourcePool([2], use_gpu=False, ready_timeout_s=1.0)
