# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Start or join Ray (RAY_ADDRESS, or already initialised), build the worker groups, reward runner, data loaders and
loggers, then train. The resource check runs before any model loads."""

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

from verl.algorithms.advantages import estimator_needs_critic
from verl.data.rollout_dump import set_aside_later_rollouts
from verl.data.tokenizer import get_processor, get_tokenizer, template_reads, vocabulary_difference
from verl.models.config import read_model_config, tokenizer_beyond_model, vocabulary_refusal
from verl.rewards.local import LocalReward
from verl.rewards.ray_actor import ActorReward, RewardActorStartError, create_reward_actor, stop_actor
from verl.single_controller.ray.base import RayClassWithInitArgs, RayWorkerGroup, create_colocated_worker_cls
from verl.single_controller.ray.resource import RayResourcePool, cluster_nodes, describe_cluster
from verl.trainer.async_trainer import IN_FLIGHT_FILE, AsyncRayPPOTrainer
from verl.trainer.checkpointing import (
    check_matches_run,
    check_written_by,
    checkpoint_size_estimate,
    log_checkpoint_plan,
    nothing_to_train,
    read_trainer_state,
    resume_path,
    saved_settings,
    step_of,
)
from verl.trainer.config import PPOConfig, admission_splits, round_size, worker_pools
from verl.trainer.data_loader import create_dataloader
from verl.trainer.disaggregated_trainer import DisaggregatedRayPPOTrainer
from verl.trainer.node_check import check_nodes_see_run_files, rl_worker_paths
from verl.trainer.preemption import RunSignals, run_status
from verl.trainer.ray_setup import SetupError, init_ray, write_timeline
from verl.trainer.ray_trainer import RayPPOTrainer, count_training_steps
from verl.trainer.run_lock import CheckpointFolderError, RunLock
from verl.utils import quiet, stall_report
from verl.utils.cli import cluster_address
from verl.utils.config import config_to_dict
from verl.utils.device import resolve_device_type
from verl.utils.logger import Tracker
from verl.utils.logger.backends import check_logger_services
from verl.utils.logger.tracker import LoggerStartError
from verl.utils.module_loading import user_error_message
from verl.workers.rollout.vllm_compat import EngineSettingError


logger = logging.getLogger(__name__)

ENV_CLOSE_TIMEOUT_S = 30.0
"""Longest a run's end waits for workers to close their rollout environments."""
TRAINERS = {"sync": RayPPOTrainer, "colocated": AsyncRayPPOTrainer, "disaggregated": DisaggregatedRayPPOTrainer}
"""The trainer of each worker.rollout.mode."""


@dataclass
class WorkerGroups:
    """The run's worker groups and resource pools; `shutdown` frees all of them."""

    actor: Any
    critic: Any | None = None
    reward_model: Any | None = None
    rollout: Any | None = None
    """mode=disaggregated: the rollout pool's engines."""
    owned: list[tuple[Any, Any]] = field(default_factory=list)
    """(group, pool) pairs, in creation order."""
    rollout_env: bool = False
    """worker.rollout.env is set: its shared resources end before the processes do."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of every worker (trainer.stall_report_s)."""

    def shutdown(self) -> None:
        if self.rollout_env:
            self._close_rollout_envs()
        for group, pool in reversed(self.owned):
            group.shutdown()
            pool.remove()

    def _close_rollout_envs(self) -> None:
        """Ask the engines' processes to end their environments' shared resources (tool servers a killed process
        would leave running); best effort within ENV_CLOSE_TIMEOUT_S."""
        import ray

        handles = []
        for group in (self.actor, self.rollout):
            if group is None:
                continue
            try:
                handles += group.submit("close_rollout_envs").handles
            except Exception as err:  # a group half built when the run failed: its processes go anyway
                logger.warning("Could not ask a worker group to close its rollout environment: %s", err)
        if not handles:
            return
        ready, _ = ray.wait(handles, num_returns=len(handles), timeout=ENV_CLOSE_TIMEOUT_S)
        for handle in ready:
            try:
                ray.get(handle)
            except Exception as err:  # the run's own error, if any, is the one to show
                logger.warning("A worker could not close its rollout environment: %s", err)


def create_worker_groups(config: PPOConfig, device: str) -> WorkerGroups:
    """One colocated process per device with the actor+rollout(+ref) role, the critic for gae, and the reward model
    (or its own group on its own devices when its n_gpus_per_node > 0). With mode=disaggregated the engines are a
    group of their own."""
    from verl.workers.fsdp_workers import FSDPWorker  # imports vLLM: only when training really starts

    trainer = config.trainer
    groups = WorkerGroups(
        actor=None, rollout_env=bool(config.worker.rollout.env), env=stall_report.env(trainer.stall_report_s)
    )
    try:
        reward_model = config.worker.reward.model
        roles = {}
        if reward_model.model_path:
            from verl.rewards.model_worker import RewardModelWorker

            roles["reward_model"] = RayClassWithInitArgs(
                RewardModelWorker,
                config=reward_model,
                policy_tokenizer_path=config.worker.actor.model.tokenizer_path,
                device=device,
            )
        if reward_model.model_path and reward_model.n_gpus_per_node > 0:
            nodes = [reward_model.n_gpus_per_node] * reward_model.nnodes
            name = f"{trainer.experiment_name}_reward_model"
            groups.reward_model = _new_group(groups, nodes, device, name, roles.pop("reward_model"))
        actor_role = "actor_rollout" if config.algorithm.disable_kl else "actor_rollout_ref"
        roles[actor_role] = RayClassWithInitArgs(FSDPWorker, config=config.worker, role=actor_role, device=device)
        if estimator_needs_critic(config.algorithm.adv_estimator):  # gae, or a user's estimator that takes values
            roles["critic"] = RayClassWithInitArgs(FSDPWorker, config=config.worker, role="critic", device=device)
        nodes = [trainer.n_gpus_per_node] * trainer.nnodes
        group = _new_group(groups, nodes, device, trainer.experiment_name, create_colocated_worker_cls(roles))
        views = group.spawn(roles.keys())
        groups.reward_model = views.get("reward_model", groups.reward_model)
        critic, actor = views.get("critic"), views[actor_role]
        # the actor last, so its vLLM engine sizes its cache against the memory the others leave free
        for role in (groups.reward_model, critic, actor):
            if role is not None:
                role.init_model()
        groups.actor, groups.critic = actor, critic
        rollout = config.worker.rollout
        if rollout.mode == "disaggregated":  # the engines on a pool of their own
            from verl.workers.rollout.rollout_worker import RolloutWorker

            nodes = [rollout.n_gpus_per_node] * rollout.nnodes
            engine_cls = RayClassWithInitArgs(RolloutWorker, config=config.worker, device=device)
            groups.rollout = _new_group(groups, nodes, device, f"{trainer.experiment_name}_rollout", engine_cls)
            groups.rollout.init_model()
    except BaseException:
        groups.shutdown()
        raise
    return groups


def check_run_fits(config: PPOConfig, device: str) -> None:
    """SetupError unless the cluster holds every worker pool and the reward and judge actors together: one that did
    not fit beside the others waited 120 s for a placement group, then blamed "other actors". A pool's bundle holds a
    whole GPU, so a judge's share of a GPU needs one that no pool takes."""
    reward = config.worker.reward
    parts = worker_pools(config)
    cpus = dict(parts)  # every process of a pool takes one CPU, and a GPU on CUDA
    if (reward.reward_function or reward.routes or reward.rubric) and reward.run_in == "actor":
        cpus["the reward actor (worker.reward.num_cpus)"] = reward.num_cpus
    if reward.judge.enabled:
        cpus["the judge (worker.reward.judge.num_cpus)"] = reward.judge.num_cpus
        if reward.judge.num_gpus > 0:
            parts["the judge (worker.reward.judge.num_gpus, rounded up)"] = math.ceil(reward.judge.num_gpus)
    nodes = cluster_nodes()
    gpus = sum(node.gpus for node in nodes)
    # auto is resolved in this process: a driver without a GPU joining a GPU cluster (a local Ray may count GPUs a
    # CPU-only torch cannot use, and trains on the CPU as before)
    if device == "cpu" and config.trainer.device == "auto" and gpus > 0 and cluster_address() is not None:
        raise SetupError(
            f"trainer.device=auto chose the CPU, as this process (the driver) sees no CUDA device, but the Ray cluster "
            f"has {gpus:g} GPU: run the trainer on a node with a GPU (the device is resolved where the driver runs), "
            "or set trainer.device=cpu to train on the CPUs."
        )
    needs = [("CPU", cpus, sum(node.cpus for node in nodes))]
    if device == "cuda":
        needs.append(("GPU", parts, gpus))
    for kind, wanted, have in needs:
        if sum(wanted.values()) > have + 1e-9:
            listed = ", ".join(f"{name}: {count:g}" for name, count in wanted.items())
            joined = (
                ""
                if cluster_address() is not None
                else " (this run started a Ray of its own: set RAY_ADDRESS=HEAD_IP:6379 to join a cluster)"
            )
            raise SetupError(
                f"The run needs {sum(wanted.values()):g} {kind} at once ({listed}), but the Ray cluster has "
                f"{have:g}: {describe_cluster(nodes)}. Ask for fewer processes, or add nodes{joined}."
            )


def _new_group(groups: WorkerGroups, nodes: list[int], device: str, name: str, cls: RayClassWithInitArgs) -> Any:
    """A resource pool of `nodes` processes per node and a group of `cls` on it, recorded in `groups`."""
    pool = RayResourcePool(process_on_nodes=nodes, use_gpu=device == "cuda", name_prefix=name)
    try:
        group = RayWorkerGroup(pool, cls, name_prefix=name, env=groups.env)
    except BaseException:
        pool.remove()
        raise
    groups.owned.append((group, pool))
    return group


IN_FLIGHT_ROW_KEYS = (
    *(f"data.{key}" for key in ("train_files", "prompt_key", "answer_key", "image_key", "video_key", "tools_key")),
    *(f"data.{key}" for key in ("image_dir", "video_fps", "video_max_frames", "min_pixels", "max_pixels")),
    *(f"data.{key}" for key in ("format_prompt", "override_chat_template", "chat_template_kwargs")),
    "worker.actor.model.tokenizer_path",
)
"""Settings that make a prompt's row (its rendered text, images, answer): prompts in flight keep the saved run's."""


def _check_in_flight(config: PPOConfig, path: str) -> Any:
    """The prompts an asynchronous checkpoint had in flight (returned: None where it has none): dropped in mode=sync
    (said), and refused when there are more than the resumed run keeps in flight, when they are not whole rounds at
    max_staleness=0, when they do not split over its ranks, or when they are padded to another
    data.max_prompt_length. Settings that made their rows changed: said (the warning on changed settings says the run
    goes on with the new ones, and these prompts do not)."""
    in_flight = os.path.join(path, IN_FLIGHT_FILE)
    if not os.path.isfile(in_flight):
        return None
    import torch

    rows = torch.load(in_flight, weights_only=False)
    count = 0 if rows is None else len(rows)
    rollout = config.worker.rollout
    if rollout.mode == "sync" and count:
        logger.warning(
            "%s was saved by an asynchronous run with %d prompts in flight; worker.rollout.mode=sync does not "
            "regenerate them, so they are not trained (resume with that run's mode to train them).",
            path,
            count,
        )
    key, size = round_size(config.data)
    if rollout.mode != "sync" and count > (rollout.max_staleness + 1) * size:
        raise ValueError(
            f"Cannot resume from {path}: it holds {count} prompts in flight, more than this run keeps in flight "
            f"(worker.rollout.max_staleness + 1 = {rollout.max_staleness + 1} rounds of {key}={size}); resume with "
            "the saved run's round size and staleness bound."
        )
    if rollout.mode != "sync" and rollout.max_staleness == 0 and count % size != 0:
        # admission adds whole rounds up to one in flight, so none beside a partial one: the first round held fewer
        # groups than it takes, and every engine failed it ("cannot complete ... of them") under Ray's traceback
        raise ValueError(
            f"Cannot resume from {path}: its {count} prompts in flight are not whole rounds of {key}={size}, and with "
            "worker.rollout.max_staleness=0 a round admits new prompts only in whole rounds up to one in flight, so "
            f"no round could gather {size} prompts' groups. Resume with max_staleness >= 1, with rounds of {count} "
            "prompts, or with worker.rollout.mode=sync, which drops them."
        )
    for ranks, what in admission_splits(config) if rollout.mode != "sync" else ():
        if count % ranks != 0:  # the saved run had other ranks; each takes whole shares of the readmitted prompts
            raise ValueError(
                f"Cannot resume from {path}: its {count} prompts in flight do not split evenly over {what}. Resume "
                "on a number that divides them (the saved run's), or with worker.rollout.mode=sync, which drops "
                "them."
            )
    # padded to the saved run's prompt length: joined with this run's, the first step failed in torch.cat
    width = None if not count or rows.batch is None else rows.batch["input_ids"].shape[-1]
    if rollout.mode != "sync" and width is not None and width != config.data.max_prompt_length:
        raise ValueError(
            f"Cannot resume from {path}: its {count} prompts in flight are padded to data.max_prompt_length={width}, "
            f"and this run has {config.data.max_prompt_length}. Resume with the saved run's, or with "
            "worker.rollout.mode=sync, which drops them."
        )
    if rollout.mode != "sync" and count:
        saved = read_trainer_state(path).get("settings") or {}
        now = saved_settings(config)
        changed = [key for key in IN_FLIGHT_ROW_KEYS if key in saved and key in now and saved[key] != now[key]]
        if changed:
            logger.warning(
                "%s changed since %s was saved: its %d prompts in flight are regenerated from the rows the saved run "
                "made (their text, images and answers as they were); the prompts admitted after them get the new ones.",
                ", ".join(changed),
                path,
                count,
            )
    return rows


def _check_in_flight_columns(config: PPOConfig, path: str, rows: Any, dataset: Any) -> None:
    """The prompts an asynchronous checkpoint had in flight (`rows`) are admitted beside this run's training rows:
    refused when they do not join (data with another column: the first step failed in DataProto.concat, after every
    worker had started), naming both sets of columns."""
    if config.worker.rollout.mode == "sync" or rows is None or len(rows) == 0:
        return
    import numpy as np

    from verl.protocol import DataProto, collate_fn

    sample = collate_fn([dataset[0]])
    sample.non_tensor_batch["uid"] = np.array(["new"], dtype=object)  # as admission gives each
    try:
        DataProto.concat([rows[:1], sample])
    except ValueError:
        saved, now = sorted(set(rows.non_tensor_batch) - {"uid"}), sorted(set(sample.non_tensor_batch) - {"uid"})
        raise ValueError(
            f"Cannot resume from {path}: its {len(rows)} prompts in flight have the columns {saved}, and this run's "
            f"data.train_files gives {now}. Resume with the saved run's data, or with worker.rollout.mode=sync, which "
            "drops them."
        ) from None


def _check_critic_vocabulary(config: PPOConfig, tokenizer: Any) -> None:
    """The critic reads the actor's token ids: SetupError when its tokenizer maps tokens to other ids (another
    model family's critic would score other tokens than the ones generated, and train without an error)."""
    critic = config.worker.critic.model
    if not estimator_needs_critic(config.algorithm.adv_estimator) or critic.tokenizer_path == (
        config.worker.actor.model.tokenizer_path
    ):
        return
    other = get_tokenizer(critic.tokenizer_path, trust_remote_code=critic.trust_remote_code, warn_no_pad=False)
    difference = vocabulary_difference(tokenizer, other, ("actor's", "critic's"))
    if difference is not None:
        raise SetupError(
            f"worker.critic.model.tokenizer_path={critic.tokenizer_path} does not share the actor's vocabulary "
            f"({config.worker.actor.model.tokenizer_path}): {difference}. The critic reads the actor's token ids; "
            "start it from a model of the actor's family (usually the actor's own model_path)."
        )


def _check_model_vocabulary(config: PPOConfig, tokenizer: Any) -> None:
    """SetupError where the tokenizer gives ids past the actor's embedding (another model's tokenizer_path)."""
    model = config.worker.actor.model
    model_config = read_model_config("worker.actor.model.model_path", model.model_path)
    problem = model_config is not None and tokenizer_beyond_model(tokenizer, model_config)
    if problem:
        raise SetupError(vocabulary_refusal("worker.actor.model.", model.model_path, model.tokenizer_path, problem))


def _prepare_inputs(config: PPOConfig) -> tuple[Any, Any, Any, Any, str | None]:
    """What needs no Ray and no model, so its errors come first: tokenizer, processor, data loaders (every row
    checked) and the checkpoint to resume from (looked up and checked against the run, not loaded)."""
    trainer_config = config.trainer
    model = config.worker.actor.model
    path = resume_path(
        trainer_config.load_checkpoint_path, trainer_config.find_last_checkpoint, trainer_config.save_checkpoint_path
    )
    in_flight = None  # the prompts an asynchronous run's checkpoint had in flight
    if path is not None:
        check_written_by(path, "rl")
        check_matches_run(path, model.model_path, model.lora)
        critic = estimator_needs_critic(config.algorithm.adv_estimator)
        if critic and not os.path.isdir(os.path.join(path, "critic")):
            raise ValueError(
                f"Cannot resume from {path}: algorithm.adv_estimator={config.algorithm.adv_estimator} trains a critic, "
                "and the checkpoint has none (its run trained without one). Resume with that run's estimator, or start "
                "a new run in another trainer.save_checkpoint_path."
            )
        if critic:  # another critic model failed inside the workers' checkpoint load, naming neither step nor key
            critic_model = config.worker.critic.model
            check_matches_run(path, critic_model.model_path, critic_model.lora, "worker.critic.model", role="critic")
        if not config.trainer.val_only:  # a validation trains none of them: any mode and round size may validate it
            in_flight = _check_in_flight(config, path)
    # an unreachable wandb / swanlab logs offline, said now; a project name either refuses, before Ray starts
    check_logger_services(trainer_config.logger, trainer_config.project_name)
    data = config.data
    options = {"trust_remote_code": model.trust_remote_code, "override_chat_template": data.override_chat_template}
    tokenizer = get_tokenizer(model.tokenizer_path, **options)
    # the model's own processor, as the workers' and vLLM's: data.min/max_pixels resize the images before it
    processor = get_processor(model.tokenizer_path, **options)
    _check_model_vocabulary(config, tokenizer)
    _check_critic_vocabulary(config, tokenizer)
    rollout = config.worker.rollout
    tools = None
    client_env = False
    if rollout.env:  # a tool environment describes its tools in every prompt, through the chat template
        from verl.envs import load_environment
        from verl.envs.base import release_env
        from verl.envs.client_env import ChatClientEnv
        from verl.envs.tools import tool_call_format

        env = load_environment(rollout.env, rollout.env_kwargs)
        client_env = isinstance(env, ChatClientEnv)
        schemas = getattr(env, "tool_schemas", None)
        tools = schemas() if schemas is not None else None
        if not isinstance(env, ChatClientEnv):  # the workers build their own; what this one started ends now
            release_env(env, f"{type(env).__name__} (worker.rollout.env)")
        if tools and not template_reads(processor or tokenizer, "tools"):
            logger.warning(
                "worker.rollout.env=%r: the chat template of %s does not read `tools`, so the tools' schemas are not "
                "in the prompts; the model knows of them only from what the prompts say (data.format_prompt).",
                rollout.env,
                model.tokenizer_path,
            )
        if hasattr(env, "tool_format"):  # a format its calls cannot be read in is refused before any worker starts
            quiet.install_driver_filters()  # before vLLM's parsers may be imported
            try:
                tool_call_format(tokenizer, tools, data.chat_template_kwargs)
            except NotImplementedError as err:
                raise SetupError(f"worker.rollout.env={rollout.env!r} with {model.tokenizer_path}: {err}") from None
    train_dataloader, val_dataloader = create_dataloader(
        data, tokenizer, processor, limit_images=rollout.limit_images, tools=tools
    )
    if in_flight is not None:
        _check_in_flight_columns(config, path, in_flight, train_dataloader.dataset)
    if client_env:
        loaders = [("data.train_files", train_dataloader), ("data.val_files", val_dataloader)]
        _check_client_env_prompts(rollout.env, loaders)
        _check_task_rows(env, loaders)
    unused = [] if rollout.env else train_dataloader.dataset.agent_loop_fields()
    if unused:
        logger.warning(
            "data.train_files sets %s, fields of verl's agent loop (its tools and interactions), which this trainer "
            "does not read: episodes with tools come from worker.rollout.env (README, Multi-turn and tool-use "
            "rollouts). Without one, each prompt gets one response; the fields reach the reward function.",
            ", ".join(unused),
        )
    return train_dataloader, val_dataloader, tokenizer, processor, path


def _check_client_env_prompts(env: str, loaders: list[tuple[str, Any]]) -> None:
    """A ChatClientEnv's episodes start from the prompts' text messages (`VLLMRollout._prompt_messages`): data whose
    prompts give the model images or videos is refused here, not at the first rollout inside every worker (a
    NotImplementedError under Ray's traceback, after the models and engines had started)."""
    for key, loader in loaders:
        dataset = getattr(loader, "dataset", None)
        if dataset is None or not dataset.has_media or dataset.processor is None or dataset.text_only is not None:
            continue
        columns = [column for column in (dataset.image_key, dataset.video_key) if column in dataset.source.columns]
        raise ValueError(
            f"worker.rollout.env={env!r} is a ChatClientEnv, whose episodes run text prompts only, and {key} has the "
            f"media column(s) {columns} (data.image_key, data.video_key) that the model reads: use a MultiTurnEnv "
            "(verl.envs) for prompts with images or videos, or point data.image_key / data.video_key at no column to "
            "train on the text alone."
        )


def _check_task_rows(env: Any, loaders: list[tuple[str, Any]]) -> None:
    """A verifiers taskset's episodes start from each row's task data (`VerifiersEnv.reset`): a row without it (a
    validation set of another task, as the base config's) or with data that does not fit the taskset is refused here,
    naming the key, file and row, not at its first rollout inside every worker (a validation's: after every engine
    had started, or steps into the run)."""
    from verl.envs.base import EnvRowError
    from verl.envs.verifiers_env import VerifiersEnv

    if not isinstance(env, VerifiersEnv):
        return
    for key, loader in loaders:
        dataset = getattr(loader, "dataset", None)
        if dataset is None:
            continue
        kept, source = set(dataset.indices), dataset.source
        for start in range(0, len(source), 1024):
            for index, row in enumerate(source.rows_in(start, min(start + 1024, len(source))), start=start):
                if index not in kept:  # a row the dataset leaves out (an overlong prompt) never starts an episode
                    continue
                try:
                    env.reset(row)
                except EnvRowError as error:
                    raise ValueError(f"{key}: {source.where(index)}: {error}") from None


def run_ppo(config: PPOConfig) -> dict[str, float]:
    """Train, holding the checkpoint folder (one run per folder) to the end; what can fail without workers is checked
    before any worker (and Ray, unless already started) starts."""
    lock = RunLock(config.trainer.save_checkpoint_path)
    try:
        lock.acquire()
    except CheckpointFolderError as err:
        raise SetupError(str(err)) from None
    try:
        # A signal while the run starts or ends stops it at once (the fit loop finishes its step first); Ray's own
        # SIGTERM handler would kill its daemons under the driver
        with RunSignals().installed() as signals:
            return _train(config, signals, lock.record)
    finally:
        lock.release()


def _train(config: PPOConfig, signals: RunSignals, lock_record: bytes) -> dict[str, float]:
    try:
        device = resolve_device_type(config.trainer.device)
        train_dataloader, val_dataloader, tokenizer, processor, resumed = _prepare_inputs(config)
    except (ValueError, TypeError, OSError, RuntimeError) as err:  # user errors: the data, the checkpoint directory
        raise SetupError(str(err)) from err
    total_steps = count_training_steps(config, len(train_dataloader))
    totals = "trainer.max_steps, or trainer.total_epochs over the data"
    if not config.trainer.val_only and nothing_to_train(resumed, total_steps, totals):  # val_only: validates it
        return {}
    warmup = config.trainer.critic_warmup
    if warmup >= total_steps:  # with max_steps the config refuses it; total_epochs' count is known only now
        raise SetupError(
            f"trainer.critic_warmup={warmup} trains only the critic for that many steps, and the run has "
            f"{total_steps} steps (trainer.total_epochs={config.trainer.total_epochs}): "
            "the actor would never train. Lower critic_warmup or raise total_epochs."
        )
    log_checkpoint_plan(config.trainer, checkpoint_size(config), config.trainer.save_model_only)
    init_ray(config, device)
    check_run_fits(config, device)
    check_nodes_see_run_files(config.trainer.save_checkpoint_path, lock_record, rl_worker_paths(config, resumed))
    config.worker.critic.optim.training_steps = total_steps  # the actor waits for the critic's warmup
    config.worker.actor.optim.training_steps = max(1, total_steps - config.trainer.critic_warmup)
    # One reward runner serves training and validation (they never overlap; a second actor costs a process).
    model, reward = config.worker.actor.model, config.worker.reward
    reward_fn = judge = None
    try:
        if reward.reward_function or reward.routes or reward.rubric:
            if reward.run_in == "actor":
                reward_fn = ActorReward(create_reward_actor(reward, model.tokenizer_path, model.trust_remote_code))
            else:
                reward_fn = LocalReward(reward, model.tokenizer_path, model.trust_remote_code)
        if reward.judge.enabled:
            from verl.rewards.llm_judge import create_judge_actor

            try:
                judge = create_judge_actor(reward.judge)
            except ValueError as err:  # a setting this machine cannot run (a CPU judge on a CUDA machine)
                raise SetupError(str(err)) from None
        try:
            workers = create_worker_groups(config, device)
        except EngineSettingError as err:  # e.g. a hybrid model's KV cache, which the config cannot size beforehand
            raise SetupError(user_error_message(err)) from None
        if isinstance(reward_fn, ActorReward):  # it started beside the workers, as the judge
            try:
                reward_fn.wait_until_started()
            except RewardActorStartError as err:
                workers.shutdown()
                raise SetupError(str(err)) from None
        if judge is not None:  # it started beside the workers; an engine that could not is found now
            from verl.rewards.llm_judge import wait_for_judge

            try:
                wait_for_judge(judge, reward.judge)
            except ValueError as err:
                workers.shutdown()
                raise SetupError(str(err)) from None
    except BaseException:
        if config.trainer.ray_timeline:  # a start that failed or hung is where the timeline helps most
            write_timeline(config.trainer.ray_timeline)
        _release(reward_fn, judge)
        raise
    trainer_config = config.trainer
    try:  # free the devices and CPUs at the end, so a caller (a sweep, a test) can start the next run in this Ray
        if trainer_config.rollout_data_dir and not trainer_config.val_only:
            set_aside_later_rollouts(trainer_config.rollout_data_dir, step_of(resumed) if resumed else 0)
        try:
            tracker = Tracker(
                trainer_config.logger,
                trainer_config.project_name,
                trainer_config.experiment_name,
                trainer_config.save_checkpoint_path,
                config_to_dict(config),  # secrets (api keys in reward_function_kwargs) masked
                start_step=step_of(resumed) if resumed else 0,
                val_only=trainer_config.val_only,
            )
        except LoggerStartError as err:
            raise SetupError(str(err)) from None
        ended: BaseException | None = None
        try:
            mode = config.worker.rollout.mode
            extra = {"rollout_wg": workers.rollout, "device": device} if mode == "disaggregated" else {}
            trainer = TRAINERS[mode](
                config,
                tokenizer,
                train_dataloader,
                val_dataloader,
                workers.actor,
                workers.critic,
                reward_fn,
                tracker,
                reward_model_wg=workers.reward_model,
                judge=judge,
                resume_from=resumed,
                **extra,
            )
            return trainer.fit()
        except BaseException as error:
            ended = error
            raise
        finally:
            signals.stopping()  # a signal from here on exits at once: nothing is left to save
            tracker.finish(run_status(ended))
    finally:
        if trainer_config.ray_timeline:  # before the workers stop (a stopped worker's last events are lost)
            write_timeline(trainer_config.ray_timeline)
        workers.shutdown()
        _release(reward_fn, judge)


def checkpoint_size(config: PPOConfig) -> int | None:
    """About how many bytes one checkpoint of the run takes (`checkpoint_size_estimate` of the actor, and the critic
    with gae); None for LoRA (its checkpoints hold the adapters only) or where a model's files cannot be read."""
    from verl.models.fsdp import param_dtype

    roles = [config.worker.actor] + (
        [config.worker.critic] if estimator_needs_critic(config.algorithm.adv_estimator) else []
    )
    if any(role.model.lora.rank > 0 for role in roles):
        return None
    models = [(role.model.model_path, param_dtype(role.fsdp).itemsize) for role in roles]
    return checkpoint_size_estimate(models, config.trainer.save_model_only)


def _release(reward_fn: LocalReward | ActorReward | None, judge: Any | None) -> None:
    """Stop the reward runner's processes and the judge actor, maybe after the run's error (the one to report)."""
    if reward_fn is not None:
        try:
            reward_fn.close()
        except Exception:
            logger.warning("Closing the reward's processes failed.", exc_info=True)
    if judge is not None:
        stop_actor(judge)
