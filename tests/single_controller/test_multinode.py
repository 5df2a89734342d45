# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Multi-node Ray on one machine: placement across two nodes, gloo between them, and a short data-parallel FSDP2
run, as on a cluster (docker/README.md, "Multi-node").

`ray.cluster_utils.Cluster` starts a head and a second node on this machine (one CPU each), so a resource pool of
`process_on_nodes=[1, 1]` must put one rank on each node. The driver sends one DataProto; each node trains a
sharded model on its half for a few SGD steps (gradients reduced over gloo between the nodes), and the merged
result must equal the same steps taken by one process on the whole batch. Also: a pool that asks for more nodes
than the cluster has fails at once with both sizes in the message, which is what a user sees when trainer.nnodes
is larger than the cluster.
"""

import ast
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist


ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from verl.protocol import DataProto  # noqa: E402
from verl.single_controller.base import Dispatch, Worker, register  # noqa: E402
from verl.single_controller.ray import (  # noqa: E402
    InsufficientResourcesError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
)
from verl.single_controller.ray.base import pick_free_port_on_node  # noqa: E402


pytestmark = pytest.mark.slow

# The workers unpickle this module's classes by value, so their processes need not import the tests package.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IN_FEATURES, HIDDEN = 3, 4
BATCH = 8
STEPS = 3
LR = 0.1


def make_model() -> torch.nn.Sequential:
    """The same initial weights in every process (seeded), so the ranks and the reference start alike."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[float]:
    """Plain SGD on the mean squared error; returns the loss before each step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class ShardedTrainer(Worker):
    """One data-parallel rank: the model is sharded over all ranks with FSDP2, as the actor worker does."""

    def __init__(self) -> None:
        super().__init__()
        from torch.distributed.fsdp import fully_shard

        torch.set_num_threads(1)
        dist.init_process_group("gloo")  # env:// rendezvous: MASTER_ADDR/PORT come from the worker group
        self.model = make_model()
        for layer in (self.model[0], self.model[2]):
            fully_shard(layer)
        fully_shard(self.model)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def fit(self, data: DataProto) -> DataProto:
        x, y = data.batch["x"], data.batch["y"]
        losses = torch.tensor(train(self.model, x, y, data.meta_info["steps"]))
        dist.all_reduce(losses)  # the whole batch's loss per step (equal halves): mean of the ranks' means
        with torch.no_grad():
            pred = self.model(x).squeeze(-1)
        node = ray.get_runtime_context().get_node_id()
        return DataProto.from_dict(
            tensors={"pred": pred, "loss": (losses / self.world_size).expand(len(x), -1).clone()},
            non_tensors={"node_id": [node] * len(x), "rank": [self.rank] * len(x)},
        )


class NodeWorker(Worker):
    def __init__(self) -> None:
        super().__init__()
        dist.init_process_group("gloo")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def where(self) -> tuple[int, int, str, float, str]:
        total = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(total)
        local_rank, node = int(os.environ["LOCAL_RANK"]), ray.get_runtime_context().get_node_id()
        return self.rank, local_rank, node, total.item(), os.environ["MASTER_ADDR"]


@pytest.fixture(scope="module")
def two_node_cluster():
    """Head and one worker node, 1 CPU each, torn down by the test (no `ray stop`: other Rays may be running)."""
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_sharded_training_across_two_nodes_matches_one_process(two_node_cluster) -> None:
    assert len([node for node in ray.nodes() if node["Alive"]]) == 2
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, IN_FEATURES, generator=generator)
    y = torch.randn(BATCH, generator=generator)

    pool = RayResourcePool(process_on_nodes=[1, 1], use_gpu=False)
    try:
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(ShardedTrainer))
        try:
            out = wg.fit(DataProto.from_dict(tensors={"x": x, "y": y}, meta_info={"steps": STEPS}))
        finally:
            wg.shutdown()
    finally:
        pool.remove()

    # Rows come back in the driver's order: the first half trained on rank 0, the second on rank 1, on two nodes.
    half = BATCH // 2
    assert list(out.non_tensor_batch["rank"]) == [0] * half + [1] * half
    nodes = out.non_tensor_batch["node_id"]
    assert len(set(nodes[:half])) == 1 and len(set(nodes[half:])) == 1 and nodes[0] != nodes[-1]
    assert {nodes[0], nodes[-1]} == {node["NodeID"] for node in ray.nodes() if node["Alive"]}

    reference = make_model()
    ref_losses = train(reference, x, y, STEPS)
    with torch.no_grad():
        ref_pred = reference(x).squeeze(-1)
    assert ref_losses[-1] < ref_losses[0]  # the run did train
    torch.testing.assert_close(out.batch["loss"][0], torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.batch["pred"], ref_pred, rtol=1e-5, atol=1e-6)


def test_pool_asking_for_more_nodes_than_the_cluster_has_fails_with_both_sizes(two_node_cluster) -> None:
    # trainer.nnodes=3, trainer.n_gpus_per_node=1 on a 2-node CPU cluster: process_on_nodes=[1, 1, 1].
    with pytest.raises(InsufficientResourcesError) as err:
        RayResourcePool(process_on_nodes=[1, 1, 1], use_gpu=False)
    message = str(err.value)
    assert "3 node(s) x 1 process(es) per node" in message
    assert "needs 3 CPU in total but the cluster has 2" in message
    assert "The cluster has 2 node(s)" in message
    assert message.endswith("or add nodes.")


def test_one_rank_per_node_and_gloo_across_nodes(two_node_cluster):
    pool = RayResourcePool([1, 1], use_gpu=False)
    try:
        slots = pool.slots
        assert len({slot.node_id for slot in slots}) == 2  # one CPU per node: the groups must spread
        assert [slot.local_rank for slot in slots] == [0, 0] and [slot.local_world_size for slot in slots] == [1, 1]
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(NodeWorker))
        try:
            where = wg.where()
            assert [(rank, local_rank, total) for rank, local_rank, _, total, _ in where] == [(0, 0, 3.0), (1, 0, 3.0)]
            assert [node for _, _, node, _, _ in where] == [slot.node_id for slot in slots]
            assert {addr for *_, addr in where} == {slots[0].node_ip}  # rank 0's node is the rendezvous
            # The node the driver does not run on gets its port from a task scheduled there.
            assert all(pick_free_port_on_node(slot.node_id, timeout_s=60.0) > 0 for slot in slots)
        finally:
            wg.shutdown()
    finally:
        pool.remove()


class EnvWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self, *names: str) -> dict[str, str | None]:
        return {name: os.environ.get(name) for name in names}


def test_a_group_on_the_drivers_node_of_a_cluster_keeps_the_default_transports(two_node_cluster):
    """Gloo and NCCL pinned to loopback in a group whose processes all sat on the driver's node: a process group
    with another node's (the weight broadcast to a rollout pool there) could not reach them. On a cluster of several
    nodes such a group keeps the file-store rendezvous but not the loopback transports."""
    here = ray.get_runtime_context().get_node_id()
    pools = [RayResourcePool([1], use_gpu=False, name_prefix=f"env{index}") for index in range(2)]
    try:  # one CPU a node: one of the two one-process pools sits on the driver's node
        (local,) = [pool for pool in pools if pool.slots[0].node_id == here]
        wg = RayWorkerGroup(local, RayClassWithInitArgs(EnvWorker))
        try:
            (env,) = wg.env("MASTER_ADDR", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
        finally:
            wg.shutdown()
    finally:
        for pool in pools:
            pool.remove()
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["GLOO_SOCKET_IFNAME"] == os.environ.get("GLOO_SOCKET_IFNAME")  # the user's, or none
    assert env["NCCL_SOCKET_IFNAME"] == os.environ.get("NCCL_SOCKET_IFNAME")


def test_node_share_larger_than_any_node_fails_fast(two_node_cluster):
    with pytest.raises(
        InsufficientResourcesError, match=r"no single node has 2 CPU for one node's share.*2 node\(s\)"
    ):
        RayResourcePool([2], use_gpu=False)


def test_a_run_without_ray_address_starts_a_ray_of_its_own_beside_a_started_cluster(two_node_cluster):
    """The cluster's head recorded its address where `ray start` does (Ray's address file, which a bare `ray.init()`
    joins): the trainer's `start_ray` without RAY_ADDRESS still starts a Ray of its own, sized for the run, instead of
    joining it (which failed deep inside Ray: "num_cpus ... must not be provided")."""
    code = (
        "import ray\nfrom verl.trainer.ray_setup import start_ray\nstart_ray('cpu', 3, 300.0)\n"
        "print(ray.get_runtime_context().gcs_address, ray.cluster_resources()['CPU'])\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    address, cpus = proc.stdout.split()[-2:]
    assert address != two_node_cluster.address and float(cpus) >= 3


def test_a_driver_joining_a_cluster_gives_its_workers_its_hub_and_collective_settings(two_node_cluster, tmp_path):
    """Workers on a joined cluster inherit `ray start`'s environment, not the driver's: the driver's HF_*, NCCL_*,
    ... reach them, over the trainer's defaults (NCCL_DEBUG=WARN); a variable a `ray job submit` runtime environment
    sets stays the job's (two values were a crash in ray.init); other driver variables stay the driver's. They work
    in the driver's directory with its PYTHONPATH (they started where `ray start` ran, without it: a reward file's
    relative paths and its helper modules failed on the cluster alone)."""
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "run_helper_module.py").write_text("VALUE = 7\n")
    code = (
        "import os, ray\nfrom verl.trainer.ray_setup import start_ray\nstart_ray('cpu', 1, 300.0)\n"
        "names = ['HF_HUB_OFFLINE', 'NCCL_DEBUG', 'VLLM_LOGGING_LEVEL', 'TOKENIZERS_PARALLELISM', 'DRIVER_ONLY']\n"
        "def look():\n    import run_helper_module\n"
        "    return [os.environ.get(n) for n in names] + [os.getcwd(), run_helper_module.VALUE]\n"
        "seen = ray.get(ray.remote(num_cpus=0)(look).remote())\n"
        "print(dict(zip(names + ['cwd', 'helper'], seen)))\n"
    )
    job = {"runtime_env": {"env_vars": {"VLLM_LOGGING_LEVEL": "DEBUG"}}}
    extra = {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "INFO", "DRIVER_ONLY": "x", "RAY_ADDRESS": two_node_cluster.address}
    env = {**os.environ, **extra, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(job)}
    # relative, as `PYTHONPATH=. python -m ...` gives it: a worker's Python read it where `ray start` ran
    env["PYTHONPATH"] = os.pathsep.join(filter(None, ["helpers", REPO, env.get("PYTHONPATH")]))
    env.pop("VLLM_LOGGING_LEVEL", None)
    run = dict(env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    proc = subprocess.run([sys.executable, "-c", code], **run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert seen == {
        "HF_HUB_OFFLINE": "1",
        "NCCL_DEBUG": "INFO",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "false"),
        "DRIVER_ONLY": None,
        "cwd": str(tmp_path),
        "helper": 7,
    }


def test_a_run_whose_pools_and_actors_do_not_fit_together_stops_before_any_starts(two_node_cluster):
    """Each pool fits the 2-CPU cluster alone, but not beside the reward actor: the run says so at once (the actor,
    started first, held the CPU the pool then waited 120 s for)."""
    from verl.trainer.config import PPOConfig
    from verl.trainer.ray_setup import SetupError
    from verl.trainer.runner import check_run_fits

    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node = 2, 1
    config.worker.reward.reward_function, config.worker.reward.run_in = "reward.py:score", "local"
    check_run_fits(config, "cpu")  # the two workers alone fit
    config.worker.reward.run_in = "actor"
    with pytest.raises(SetupError) as error:
        check_run_fits(config, "cpu")
    assert re.fullmatch(
        r"The run needs 3 CPU at once \(the trainer's workers \(trainer.nnodes x trainer.n_gpus_per_node\): 2, the "
        r"reward actor \(worker.reward.num_cpus\): 1\), but the Ray cluster has 2: 2 node\(s\): [\d.]+ \(CPU 1, GPU 0\); "
        r"[\d.]+ \(CPU 1, GPU 0\) \(total CPU 2, GPU 0\)\. Ask for fewer processes, or add nodes( \(this run started "
        r"a Ray of its own: set RAY_ADDRESS=HEAD_IP:6379 to join a cluster\))?\.",
        str(error.value),
    ), str(error.value)
    config.worker.reward.run_in = "local"
    config.worker.reward.judge.model_path, config.worker.reward.judge.num_gpus = "judge", 0.25
    config.worker.reward.judge.num_cpus = 0
    with pytest.raises(SetupError, match=r"needs 3 GPU at once \(.*: 2, the judge \(worker.reward.judge.num_gpus, "):
        check_run_fits(config, "cuda")  # a pool's bundle holds a whole GPU: the judge's quarter needs a GPU of its own
