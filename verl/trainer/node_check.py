# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""On a cluster of several nodes, every node must see the run's files where the driver does. Before any worker
starts, a task on each other node checks that the checkpoint folder is the driver's (its run lock reads there as the
driver wrote it) and that the paths the workers read exist. Without it, on node-local disks each node kept its own
shards of every step (each save said "Saved") and a resume failed; a model missing on one node failed there after the
others had loaded theirs."""

import logging
import os
import socket
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from verl.algorithms.advantages import estimator_needs_critic
from verl.single_controller.ray.resource import cluster_nodes
from verl.trainer.config import PPOConfig, spec_file
from verl.trainer.ray_setup import SetupError
from verl.trainer.run_lock import LOCK_FILE


logger = logging.getLogger(__name__)

SETTLE_S = 60.0
"""How long a node may take to show the driver's files before it counts as not seeing them: a shared filesystem's
attribute cache (NFS's `acdirmax`, 60 s by default) can hide a new file for that long."""
ANSWER_S = 180.0
"""How long the driver waits for the nodes' answers (each starts a Ray worker first); a node that has not answered by
then is named in a warning and the run goes on."""
HOW_TO_SHARE = (
    "Put the checkpoint folder, the models and the files the config names on a filesystem every node mounts at the "
    'same path (docker/README.md, "What every node needs").'
)


def rl_worker_paths(config: PPOConfig, resumed: str | None) -> dict[str, str]:
    """The local paths that a worker, the reward actor or the judge reads (any node may run them), by config key:
    those that exist here. The datasets are the driver's alone."""
    worker, algorithm = config.worker, config.algorithm
    actor, reward = worker.actor, worker.reward
    paths = {
        "worker.actor.model.model_path": actor.model.model_path,
        "worker.actor.model.tokenizer_path": actor.model.tokenizer_path,
        "data.override_chat_template": config.data.override_chat_template,
        "worker.rollout.env": spec_file(worker.rollout.env),
        "the checkpoint to resume from": resumed,
        "worker.actor.loss_type": spec_file(actor.loss_type),
        "worker.actor.loss_avg_mode": spec_file(actor.loss_avg_mode),
    }
    if actor.use_kl_loss:
        paths["algorithm.kl_penalty"] = spec_file(algorithm.kl_penalty)
    if estimator_needs_critic(algorithm.adv_estimator):
        paths["worker.critic.model.model_path"] = worker.critic.model.model_path
        paths["worker.critic.model.tokenizer_path"] = worker.critic.model.tokenizer_path
        paths["worker.critic.loss_avg_mode"] = spec_file(worker.critic.loss_avg_mode)
    if reward.model.model_path:
        paths["worker.reward.model.model_path"] = reward.model.model_path
        paths["worker.reward.model.tokenizer_path"] = reward.model.tokenizer_path
    if reward.run_in == "actor":
        paths["worker.reward.reward_function"] = spec_file(reward.reward_function)
        paths.update({f"worker.reward.routes.{name}": spec_file(spec) for name, spec in reward.routes.items()})
        for name, part in reward.rubric.items():
            if isinstance(part, dict) and isinstance(part.get("function"), str):
                paths[f"worker.reward.rubric.{name}.function"] = spec_file(part["function"])
    if reward.judge.enabled:
        paths["worker.reward.judge.model_path"] = reward.judge.model_path
        paths["worker.reward.judge.template"] = reward.judge.template
    return local_paths(paths)


def local_paths(paths: dict[str, str | None]) -> dict[str, str]:
    """The values of `paths` that exist here (a hub id or a module name is no path)."""
    return {key: path for key, path in paths.items() if path and os.path.exists(path)}


def _look(lock: str, record: bytes, paths: dict[str, str], settle_s: float) -> dict[str, Any]:
    """On one node: what of the driver's files it does not see, after waiting up to `settle_s` for them."""
    deadline = time.monotonic() + settle_s
    while True:
        missing = [key for key, path in paths.items() if not os.path.exists(path)]
        try:
            with open(lock, "rb") as file:
                folder = None if file.read() == record else "its .run.lock there records another run"
        except FileNotFoundError:
            folder = "it has no .run.lock there"
        except OSError as err:
            folder = f"its .run.lock cannot be read there ({err.strerror or err})"
        if (not missing and folder is None) or time.monotonic() >= deadline:
            return {"host": socket.gethostname(), "missing": missing, "folder": folder}
        time.sleep(1.0)


def check_nodes_see_run_files(
    folder: str, record: bytes, paths: dict[str, str], settle_s: float | None = None
) -> None:
    """SetupError naming each node of the Ray cluster (the driver's own left out) that does not see the checkpoint
    folder the driver holds (its run lock reads `record` on the driver) or one of `paths` (by config key), after up
    to `settle_s` (SETTLE_S); nothing to do on a cluster of one node."""
    settle_s = SETTLE_S if settle_s is None else settle_s
    here = ray.get_runtime_context().get_node_id()
    others = [node for node in cluster_nodes() if node.node_id != here]
    if not others:
        return
    look = ray.remote(num_cpus=0, max_retries=0)(_look)
    asked = {
        look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote(
            os.path.join(folder, LOCK_FILE), record, paths, settle_s
        ): node
        for node in others
    }
    ready, waiting = ray.wait(list(asked), num_returns=len(asked), timeout=ANSWER_S + settle_s)
    problems, silent = [], [asked[ref].ip for ref in waiting]
    for ref in waiting:
        ray.cancel(ref, force=True)
    for ref in ready:
        try:
            seen = ray.get(ref)
        except ray.exceptions.RayError as err:  # the node died, or its worker could not start
            silent.append(f"{asked[ref].ip} ({type(err).__name__})")
            continue
        found = []
        if seen["folder"] is not None:
            found.append(
                f"the checkpoint folder trainer.save_checkpoint_path={folder} is not the driver's ({seen['folder']}): "
                "each node would keep its own part of every checkpoint, and a resume would fail"
            )
        found += [f"{key}={paths[key]} does not exist" for key in seen["missing"]]
        if found:
            problems.append(f"node {asked[ref].ip} (host {seen['host']}): " + "; ".join(found))
    if silent:
        logger.warning(
            "Nodes %s did not say within %.0f s whether they see the run's files at the driver's paths; going on "
            "without knowing.",
            ", ".join(silent),
            ANSWER_S + settle_s,
        )
    if problems:
        raise SetupError(
            f"Not every node of the Ray cluster sees the run's files at the driver's paths (waited {settle_s:.0f} s "
            f"for a shared filesystem to show them): {'. '.join(problems)}. {HOW_TO_SHARE}"
        )
