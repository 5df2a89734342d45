# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every node sees the run's files where the driver does, checked before any worker starts.

The cluster is a real two-node Ray on this machine: a head, and a second node whose `ray start` runs under bubblewrap
with a private, empty folder mounted over `node_local/` (as a node-local disk: the path exists on both nodes and
holds different files). A checkpoint folder or a model there is what a cluster without a shared filesystem has; the
run used to save each node's shards on its own disk, saying "Saved" every time."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest


ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from verl.trainer import node_check, runner  # noqa: E402
from verl.trainer.config import PPOConfig  # noqa: E402
from verl.trainer.ray_setup import SetupError  # noqa: E402
from verl.trainer.run_lock import RunLock  # noqa: E402


pytestmark = pytest.mark.slow


def _bwrap_works() -> bool:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    probe = subprocess.run([bwrap, "--dev-bind", "/", "/", "--", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(head address, node-local folder): a second node that sees an empty folder at the folder's path."""
    if not _bwrap_works():
        pytest.skip("bubblewrap is missing or cannot mount here: no node with a disk of its own")
    local = tmp_path_factory.mktemp("node_local")
    head = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    command = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", str(local), "--", ray_cli, "start", "--block"]
    command += [f"--address={head.address}", "--num-cpus=1", "--disable-usage-stats"]
    node = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ray.init(address=head.address, log_to_driver=False)
        deadline = time.monotonic() + 120
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            assert time.monotonic() < deadline and node.poll() is None, "the second node did not join"
            time.sleep(0.5)
        yield head.address, local
    finally:
        ray.shutdown()
        os.killpg(node.pid, signal.SIGTERM)  # its own raylet and workers only (never `ray stop`)
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
        head.shutdown()


def test_the_paths_every_node_reads_are_the_workers_local_ones(tmp_path):
    """Models, tokenizers and the files of user functions the workers, the reward actor or the judge read; not a hub
    id, a registered name, the datasets (the driver's), or what this run does not use (the critic under GRPO)."""
    model, loss, reward = tmp_path / "model", tmp_path / "loss.py", tmp_path / "reward.py"
    model.mkdir()
    loss.write_text("")
    reward.write_text("")
    config = PPOConfig()
    config.data.train_files = str(reward)
    actor = config.worker.actor
    actor.model.model_path, actor.model.tokenizer_path = str(model), "Qwen/Qwen2.5-0.5B"
    actor.loss_type, actor.loss_avg_mode = f"{loss}:loss", "token-mean"
    config.worker.critic.model.model_path = str(model)
    config.worker.reward.reward_function, config.worker.reward.run_in = f"{reward}:score", "actor"
    expected = {
        "worker.actor.model.model_path": str(model),
        "worker.actor.loss_type": str(loss),
        "worker.reward.reward_function": str(reward),
        "the checkpoint to resume from": str(tmp_path),
    }
    assert node_check.rl_worker_paths(config, str(tmp_path)) == expected
    config.worker.reward.run_in = "driver"  # the reward function runs in the driver's process (the default)
    config.algorithm.adv_estimator = "gae"  # a critic
    config.worker.actor.use_kl_loss, config.algorithm.kl_penalty = True, f"{loss}:kl"
    paths = node_check.rl_worker_paths(config, None)
    assert "worker.reward.reward_function" not in paths
    assert paths["worker.critic.model.model_path"] == str(model) and paths["algorithm.kl_penalty"] == str(loss)


def test_a_checkpoint_folder_or_a_model_on_one_node_only_is_refused(cluster, tmp_path):
    _, local = cluster
    shared_folder = tmp_path / "run"
    with RunLock(str(local / "run")) as lock:  # a node-local checkpoint folder: the other node has its own
        with pytest.raises(SetupError) as info:
            node_check.check_nodes_see_run_files(lock.folder, lock.record, {}, settle_s=1.0)
    message = str(info.value)
    assert (
        f"the checkpoint folder trainer.save_checkpoint_path={local / 'run'} is not the driver's (it has no "
        in message
    )
    assert "each node would keep its own part of every checkpoint" in message and "What every node needs" in message
    assert message.count("(host ") == 1  # one node named: the driver's own is not asked

    model = local / "model"
    model.mkdir()
    with RunLock(str(shared_folder)) as lock:
        paths = {"worker.actor.model.model_path": str(model), "the checkpoint to resume from": str(tmp_path)}
        with pytest.raises(SetupError) as info:
            node_check.check_nodes_see_run_files(lock.folder, lock.record, paths, settle_s=1.0)
        message = str(info.value)
        assert f"worker.actor.model.model_path={model} does not exist" in message
        assert "is not the driver's" not in message and "resume" not in message  # what the node sees is not named
        node_check.check_nodes_see_run_files(lock.folder, lock.record, {"the checkpoint": str(tmp_path)}, 1.0)


def test_a_node_with_another_runs_lock_in_the_folder_is_refused(cluster):
    """A node-local folder in which a run on that node left its lock: the path exists there, but it is not the
    driver's folder."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    _, local = cluster
    folder = str(local / "earlier")
    here = ray.get_runtime_context().get_node_id()
    (other,) = [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeID"] != here]

    @ray.remote(num_cpus=0)
    def run_there() -> None:
        with RunLock(folder):
            pass

    ray.get(run_there.options(scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False)).remote())
    assert not os.path.exists(folder)  # it is on the other node's disk alone
    with RunLock(folder) as lock:
        with pytest.raises(SetupError, match=r"is not the driver's \(its .run.lock there records another run\)"):
            node_check.check_nodes_see_run_files(lock.folder, lock.record, {}, settle_s=1.0)


def test_a_run_on_the_cluster_stops_before_any_worker_starts(cluster, tmp_path, monkeypatch):
    """The trainer's own start: a checkpoint folder on one node's disk stops the run with the reason, exit code 2
    (SetupError), before a model loads; the folder's lock is released."""
    from tests.trainer.test_runner import one_row_run
    from verl.models.tiny_models import get_or_build_tiny_model

    _, local = cluster
    monkeypatch.setattr(node_check, "SETTLE_S", 1.0)
    monkeypatch.setattr(runner, "create_worker_groups", lambda *args: pytest.fail("workers started"))
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    row = {"prompt": "What is 2 + 3?", "answer": "5"}
    config = one_row_run(tmp_path, row, model, f"trainer.save_checkpoint_path={local / 'run'}", "trainer.device=cpu")
    with pytest.raises(SetupError, match=r"trainer.save_checkpoint_path=.* is not the driver's"):
        runner.run_ppo(config)
    with RunLock(config.trainer.save_checkpoint_path):  # free again
        pass


def test_an_sft_run_with_a_model_on_one_node_only_stops_before_any_worker_starts(cluster, tmp_path, monkeypatch):
    """SFT's start checks the same: the model in the driver's node-local folder is named, with its key."""
    import json

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft

    _, local = cluster
    monkeypatch.setattr(node_check, "SETTLE_S", 1.0)
    model = get_or_build_tiny_model("qwen2", str(local / "models"))  # on the driver's node only
    row = {"messages": [{"role": "user", "content": "2 + 3?"}, {"role": "assistant", "content": "5"}]}
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    config = load_sft_config(
        [
            f"data.train_files={tmp_path / 'train.jsonl'}",
            "data.batch_size=1",
            "trainer.n_gpus_per_node=1",
            "trainer.device=cpu",
            f"worker.model.model_path={model}",
            f"trainer.save_checkpoint_path={tmp_path / 'run'}",
        ]
    )
    with pytest.raises(SetupError, match=rf"worker.model.model_path={model} does not exist"):
        run_sft(config)
