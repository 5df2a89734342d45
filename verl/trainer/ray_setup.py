# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Starting (or joining) Ray for a run: the workers' environment and setup hook, and the reaper that ends the run's
processes if the driver is killed."""

import os
import signal
import threading

import ray

from verl.trainer.config import PPOConfig
from verl.trainer.reaper import start_reaper
from verl.utils import quiet
from verl.utils.worker_setup import WORKER_SETUP_HOOK


class SetupError(RuntimeError):
    """A user error found before any worker starts (data, checkpoint directory): the CLI prints its message alone."""


def worker_env(device: str) -> dict[str, str]:
    """Environment of every Ray worker process (vLLM's INFO lines, its engine config dump, are left out)."""
    env = {"TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARN", "NCCL_DEBUG": "WARN"}
    env.update(quiet.worker_env_vars())
    if device == "cpu":
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # one in-process engine per worker (SPMD), see the vLLM notes
    else:
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
        # CUDA_DEVICE_MAX_CONNECTIONS stays CUDA's default (8): 1, a Megatron tensor-parallel setting, would put
        # every stream on one hardware queue, and FSDP's all-gathers and reduce-scatters would stop overlapping compute
    return env


TASK_EVENTS_ENV = "RAY_task_events_report_interval_ms"
"""Ray's task-event reporting interval; 0 turns the per-task records off (see init_ray)."""

PRESTART_ENV = "RAY_prestart_worker_first_driver"
"""Whether Ray starts an idle worker process when the driver connects; 0 turns it off (see init_ray)."""


def init_ray(config: PPOConfig, device: str) -> None:
    """Start (or join) Ray for an RL run: its worker processes, the reward model's pool and any reward actors."""
    trainer, reward = config.trainer, config.worker.reward
    processes = trainer.nnodes * trainer.n_gpus_per_node + reward.model.nnodes * reward.model.n_gpus_per_node
    processes += config.worker.rollout.pool_size()  # mode=disaggregated: the engines' own processes
    # Reward actors idle most of the time: they may share the machine's cores rather than block the workers.
    start_ray(device, processes + 2 * reward.num_cpus)


def start_ray(device: str, cpu_slots: int) -> None:
    """Join the Ray that RAY_ADDRESS names, or start a local one with at least `cpu_slots` logical CPUs on CPU (one
    per worker process); nothing if this process is connected already."""
    quiet.install_driver_filters()  # before Ray announces itself
    if ray.is_initialized():
        return
    # The setup hook silences known-harmless third-party messages in every worker, before vLLM is imported.
    runtime_env = {"env_vars": worker_env(device), "worker_process_setup_hook": WORKER_SETUP_HOOK}
    previous = signal.getsignal(signal.SIGTERM)
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env)
    else:
        _start_local_ray(device, cpu_slots, runtime_env)
    # ray.init replaces the SIGTERM handler: on a Ray it starts, with its head node's, which kills Ray's daemons under
    # this process (the driver then aborts with a C++ stack dump). A handler the caller installed (the runner's
    # RunSignals) stays.
    if callable(previous) and _main_thread():
        signal.signal(signal.SIGTERM, previous)


def _start_local_ray(device: str, cpu_slots: int, runtime_env: dict) -> None:
    num_cpus = (os.cpu_count() or 1) if device == "cuda" else max(os.cpu_count() or 1, cpu_slots)
    # Ray keeps an event record of every task (each worker call is one) in its GCS for the dashboard and `ray list
    # tasks`, up to 100k of them, so the GCS grows for days (docs/reliability.md). A run the trainer starts has no
    # dashboard, so the records are turned off (unless the user set the variable).
    os.environ.setdefault(TASK_EVENTS_ENV, "0")
    # Ray starts an idle worker for the driver's tasks as it connects; the run's actors all need their own processes
    # (their environments differ), so it would only take CPU while the workers start and memory for the whole run.
    os.environ.setdefault(PRESTART_ENV, "0")
    start_reaper()  # after a kill -9 of this process, nothing of the run outlives it by more than a few seconds
    # A closed terminal sends SIGHUP to its whole process group, Ray's daemons included, which would die before the
    # driver could save: they start with SIGHUP ignored (an ignored signal stays ignored across exec, as with nohup),
    # and the driver handles it as SIGTERM (verl/trainer/preemption.py).
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN) if _main_thread() else None
    try:
        ray.init(num_cpus=num_cpus, runtime_env=runtime_env, include_dashboard=False)
    finally:
        if hangup is not None:
            signal.signal(signal.SIGHUP, hangup)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
