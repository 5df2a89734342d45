# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Starting (or joining) Ray for a run: the workers' environment and setup hook, and the reaper that ends the run's
processes if the driver is killed."""

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import ray

from verl.trainer import warm_workers
from verl.trainer.config import PPOConfig
from verl.trainer.preemption import (
    daemons_ended_with_the_signal,
    exit_if_stopped,
    forget_stops,
    signal_received,
    stop_the_fit_loop,
)
from verl.trainer.reaper import start_reaper
from verl.utils import quiet
from verl.utils.cli import cluster_address
from verl.utils.worker_setup import DRIVER_CWD_ENV, WORKER_SETUP_HOOK


logger = logging.getLogger(__name__)

FULL_DISK_WARNING_SHARE = 0.9
"""How full the disk of Ray's temp folder may be before a local Ray's start warns (Ray refuses new objects past
95%)."""


class SetupError(RuntimeError):
    """A user error found before any worker starts: the CLI prints its message alone."""


DRIVER_ENV_PREFIXES = (
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "NCCL_",
    "GLOO_",
    "VLLM_",
    "VERL_",
    "PYTORCH_",
    "TORCH_",
)
DRIVER_ENV_NAMES = ("USE_MODELSCOPE_HUB", "MODELSCOPE_CACHE", "TOKENIZERS_PARALLELISM", "PYTHONPATH")
"""The driver's variables every worker gets: on a cluster joined through RAY_ADDRESS a worker inherits the environment
of `ray start`, not the driver's (HF_HUB_OFFLINE set for an unreachable hub, HF_HOME, HF_TOKEN, NCCL_DEBUG, the
PYTHONPATH a reward file's own imports need, ...)."""


def worker_env(device: str) -> dict[str, str]:
    """Environment of every Ray worker process: defaults that leave vLLM's INFO lines out, under the driver's
    DRIVER_ENV_* variables, under what `device` needs; keys a `ray job submit` runtime environment sets are its own
    (Ray refuses to merge two values)."""
    env = {"TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARN", "NCCL_DEBUG": "WARN"}
    env.update(quiet.worker_env_vars())
    env.update({k: v for k, v in os.environ.items() if k.startswith(DRIVER_ENV_PREFIXES) or k in DRIVER_ENV_NAMES})
    env[DRIVER_CWD_ENV] = os.getcwd()  # a joined cluster's workers start where `ray start` ran (worker_setup)
    if env.get("PYTHONPATH"):  # made absolute: a worker's Python reads it before it moves to the driver's directory
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    if device == "cpu":
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # one in-process engine per worker (SPMD), see the vLLM notes
    else:
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
        # CUDA_DEVICE_MAX_CONNECTIONS stays at CUDA's default: 1 (a Megatron setting) would stop FSDP's collectives
        # overlapping compute
    try:
        job = json.loads(os.environ.get(JOB_CONFIG_ENV) or "{}").get("runtime_env") or {}
    except (ValueError, AttributeError):
        job = {}
    return {name: value for name, value in env.items() if name not in (job.get("env_vars") or {})}


JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""Where `ray job submit` gives the driver its job's config (its runtime_env among it)."""


TASK_EVENTS_ENV = "RAY_task_events_report_interval_ms"
"""Ray's task-event reporting interval; 0 turns per-task records off."""

TASK_EVENTS_INTERVAL_MS = 1000
"""The interval with trainer.ray_timeline (Ray's default): a worker's events reach the GCS within it."""
PROFILING_ENV = "RAY_PROFILING"
"""1: Ray records the timeline's events (ray.timeline)."""

GCS_LOSS_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
"""How long Ray's processes go on without their control store (gcs_server) before they end themselves."""
RAY_GCS_LOSS_S = 60
"""Ray's default for GCS_LOSS_ENV; a Ray the run starts waits trainer.signal_grace_s longer."""

PRESTART_ENV = "RAY_prestart_worker_first_driver"
"""Whether Ray prestarts an idle worker when the driver connects; 0 turns it off."""


def init_ray(config: PPOConfig, device: str) -> None:
    """Start (or join) Ray for an RL run, sized for its worker processes, reward model pool and reward actors."""
    trainer, reward = config.trainer, config.worker.reward
    processes = trainer.nnodes * trainer.n_gpus_per_node + reward.model.nnodes * reward.model.n_gpus_per_node
    processes += config.worker.rollout.pool_size()  # mode=disaggregated: the engines' own processes
    # Reward actors idle most of the time: they may share the machine's cores rather than block the workers.
    warn_if_alone(max(trainer.nnodes, reward.model.nnodes, config.worker.rollout.nnodes or 1))
    actors = 2 * reward.num_cpus + (reward.judge.num_cpus if reward.judge.enabled else 0)
    start_ray(device, processes + actors, trainer.signal_grace_s, profile=bool(trainer.ray_timeline))


def warn_if_alone(nodes: int) -> None:
    """Warn where a run (RL or SFT) asks for several `nodes` but starts a Ray of its own, on this machine alone."""
    if nodes > 1 and cluster_address() is None and not ray.is_initialized():
        logger.warning(
            "The run asks for %d nodes but RAY_ADDRESS is unset: it starts a Ray of its own on this machine alone. "
            "To train on a cluster, start Ray on its nodes and set RAY_ADDRESS (docker/README.md).",
            nodes,
        )


def start_ray(device: str, cpu_slots: int, stop_grace_s: float, profile: bool = False) -> None:
    """Join the Ray that RAY_ADDRESS names, or start a local one (on CPU with at least `cpu_slots` logical CPUs, one
    per worker, recording a timeline with `profile`; a fit loop that loses Ray's control store stops after its step
    and saves, within `stop_grace_s`); nothing if already connected."""
    quiet.install_driver_filters()  # before Ray announces itself
    if ray.is_initialized():
        return
    # The setup hook silences known-harmless third-party messages in every worker, before vLLM is imported.
    runtime_env = {"env_vars": worker_env(device), "worker_process_setup_hook": WORKER_SETUP_HOOK}
    previous = signal.getsignal(signal.SIGTERM)

    def restore_sigterm() -> None:
        """ray.init replaces the SIGTERM handler (a started Ray's would kill its daemons under this process); a
        handler the caller installed (the runner's RunSignals) is put back at once."""
        if callable(previous) and _main_thread():
            signal.signal(signal.SIGTERM, previous)

    address = cluster_address()
    if address is not None and address.startswith(("ray://", "http://", "https://")):  # a client's, the job API's
        raise SetupError(
            f"RAY_ADDRESS={address} is a Ray Client or job-submission address: the trainer's driver writes the "
            "checkpoints and reads the data where it runs, so it must run on a node of the cluster and join it there. "
            "Run it on the head with RAY_ADDRESS=HEAD_IP:6379 (the address `ray start --head` printed), or submit it "
            "with `ray job submit -- python -m verl.trainer.main ...`."
        )
    if address is not None:
        _check_answers(address)
        try:
            with _sigterm_while_ray_starts(previous):
                ray.init(address=address, runtime_env=runtime_env)
        except ConnectionError as error:  # a token the cluster refuses (InvalidAuthToken) after 20 s of retries
            raise SetupError(
                f"Could not join the Ray cluster at RAY_ADDRESS={address}: {str(error).strip()[:300]}. A cluster "
                "started by `ray start` may require a token: run with the RAY_AUTH_MODE (and token) settings its "
                "nodes use."
            ) from None
        restore_sigterm()
    else:
        with _sigterm_while_ray_starts(previous):
            _start_local_ray(device, cpu_slots, runtime_env, profile, stop_grace_s, restore_sigterm)


@contextmanager
def _sigterm_while_ray_starts(previous: Any) -> Iterator[None]:
    """ray.init's own SIGTERM handler, in place while Ray starts (seconds, tens under load), exits with
    `sys.exit(15)`: a SIGTERM then ended the run with exit 15 and no message. That exit becomes the stop of the
    handler the caller installed (`previous`, the runner's RunSignals: its one line, exit 143)."""
    try:
        yield
    except SystemExit as stop:
        if stop.code != signal.SIGTERM or not callable(previous):
            raise
        if _main_thread():
            signal.signal(signal.SIGTERM, previous)
        previous(signal.SIGTERM, None)  # raises the run's stop
        raise


CONNECT_CHECK_S = 10.0
"""How long the cluster's control store may take to accept a connection before the run says it does not answer."""


def _check_answers(address: str) -> None:
    """A SetupError where RAY_ADDRESS's host:port accepts no connection (Ray itself retries for minutes, printing its
    own warnings, and outlives a first SIGTERM meanwhile), or is no host:port ("auto" is left to Ray; another form,
    a host without its port, was Ray's ValueError traceback)."""
    import socket

    if address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit():
        raise SetupError(
            f"RAY_ADDRESS={address} is no HOST:PORT: give the address `ray start --head` printed (e.g. "
            "10.0.0.1:6379), or unset RAY_ADDRESS to run on this machine alone."
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_CHECK_S).close()
    except OSError as error:
        raise SetupError(
            f"RAY_ADDRESS={address} does not answer ({error.strerror or error}): start the cluster's head there "
            "(`ray start --head`), correct the address (the one `ray start --head` printed), or unset RAY_ADDRESS to "
            "run on this machine alone."
        ) from None


def _start_local_ray(
    device: str, cpu_slots: int, runtime_env: dict, profile: bool, stop_grace_s: float, after_init: Callable[[], None]
) -> None:
    num_cpus = (os.cpu_count() or 1) if device == "cuda" else max(os.cpu_count() or 1, cpu_slots)
    # Unless the user set them: no per-task event records without a timeline (no dashboard reads them; they grow the
    # GCS for days, docs/reliability.md), no idle prestarted worker (every actor needs its own process), and Ray's
    # processes outlive a lost control store long enough for the step and the save (`watch_control_store`).
    events = {TASK_EVENTS_ENV: str(TASK_EVENTS_INTERVAL_MS), PROFILING_ENV: "1"} if profile else {TASK_EVENTS_ENV: "0"}
    lost_gcs = {GCS_LOSS_ENV: str(int(stop_grace_s) + RAY_GCS_LOSS_S)}
    _set_ray_defaults({**events, PRESTART_ENV: "0", **lost_gcs})
    warning = ray_temp_disk_warning()
    if warning:
        logger.warning(warning)
    # A closed terminal's SIGHUP would kill Ray's daemons before the driver could save: they start with it ignored
    # (kept across exec, as with nohup); the driver handles it as SIGTERM (verl/trainer/preemption.py).
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN) if _main_thread() else None
    try:
        with own_process_group():
            start_reaper()  # after a kill -9 of this process, nothing of the run outlives it by more than a few seconds
            runtime_env = warm_workers.with_warm_workers(runtime_env, device)  # CPU: forks of a warm Python
            # address="local": a Ray of its own even where `ray start` recorded a cluster (Ray's address file, which a
            # bare ray.init() would join, failing on num_cpus); RAY_ADDRESS joins one
            ray.init(address="local", num_cpus=num_cpus, runtime_env=runtime_env, include_dashboard=False)
            after_init()  # before anything else: a SIGTERM now is the trainer's to handle
        watch_control_store()
    finally:
        if hangup is not None:
            signal.signal(signal.SIGHUP, hangup)


_ray_defaults_set: dict[str, str] = {}
"""The variables `_set_ray_defaults` wrote into this process's environment, with their values: not the user's."""


def _set_ray_defaults(values: dict[str, str]) -> None:
    """Each of `values` into this process's environment (Ray's processes inherit it) unless the user set it. What an
    earlier local Ray of this process wrote is not the user's: a later one (a notebook's next run after
    `ray.shutdown()`) replaces it, or removes it where this run leaves it unset (PROFILING_ENV without a timeline)."""
    for name in set(_ray_defaults_set) - set(values):
        if os.environ.get(name) == _ray_defaults_set.pop(name):
            del os.environ[name]
    for name, value in values.items():
        if name in os.environ and os.environ[name] != _ray_defaults_set.get(name):
            _ray_defaults_set.pop(name, None)  # the user's since
            continue
        os.environ[name] = _ray_defaults_set[name] = value


@contextmanager
def own_process_group() -> Iterator[None]:
    """The processes started in the block (Ray's daemons, and through them its workers) get a process group of their
    own: a signal to the driver's whole group (`timeout`, `kill -- -PGID`) reaches the driver alone, which finishes
    its step and saves before it stops them (else Ray died at once and the driver hung). A driver that leads its group
    (started from an interactive shell) cannot leave it and come back: Ray's daemons block SIGINT and ignore SIGHUP."""
    group = os.getpgrp()
    if group == os.getpid():
        yield
        return
    os.setpgid(0, 0)  # a new group whose number is this process's id
    try:
        yield
    finally:
        try:
            os.setpgid(0, group)
        except OSError as err:  # the launcher's group is gone (it exited): stay in the new one
            logger.debug("Could not return to process group %d: %s", group, err)


def ray_temp_disk_warning() -> str | None:
    """A warning when the disk of the folder where a local Ray keeps its sessions (objects spilled from memory, logs)
    is more than FULL_DISK_WARNING_SHARE full: past 95% Ray refuses new objects and the run fails."""
    folder = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"  # where Ray puts ray/session_*
    usage = shutil.disk_usage(folder)
    if usage.used < FULL_DISK_WARNING_SHARE * usage.total:
        return None
    return (
        f"The disk of Ray's temp folder {folder} is {100 * usage.used / usage.total:.0f}% full "
        f"({usage.free / 2**30:.1f} GiB free): past 95% Ray refuses new objects and the run fails. Free space, or "
        "point RAY_TMPDIR at a larger disk."
    )


_watched_store: dict[str, int | None] = {"pid": None}
"""The process id of the control store of the Ray this process started last."""


def watch_control_store(poll_s: float = 1.0) -> None:
    """Watch the control store (gcs_server) of the Ray this process started. Where it dies alone (killed, out of
    memory) the workers go on, but Ray ends every process of the run GCS_LOSS_ENV seconds later, saving nothing: the
    fit loop that runs then is asked to stop after its step and save, as on SIGTERM. Its raylet too: where it ends
    with a signal to the process group the driver leads, the step in flight may never finish
    (`preemption.daemons_ended_with_the_signal`). A control store that gets SIGTERM closes its port at once but its
    process lingers (for minutes, measured), and the raylet's exit can take as long under load: once a signal's stop
    began, the store's closed port counts as its end."""
    daemons = {}
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            daemons.setdefault(process.name(), process)
    gcs, raylet = daemons.get("gcs_server"), daemons.get("raylet")
    if gcs is None:
        return
    forget_stops()  # a new Ray: no signal has reached its daemons
    _watched_store["pid"] = gcs.pid  # a later Ray of this process (a sweep) replaces the one watched

    def ours() -> bool:  # this Ray, still connected (ray.shutdown disconnects before it ends the daemons)
        return _watched_store["pid"] == gcs.pid and ray.is_initialized()

    def watch() -> None:
        armed = raylet is None
        with contextlib.suppress(psutil.NoSuchProcess):
            while gcs.status() != psutil.STATUS_ZOMBIE and not (signal_received() and not _listening(gcs)):
                if not armed and not _running(raylet) and ours():  # with a signal to the driver's group (Ray's own)
                    armed = daemons_ended_with_the_signal()
                time.sleep(poll_s)
        if not ours():
            return
        lost = f"Ray's control store (gcs_server, pid {gcs.pid}) ended"
        ends = f"Ray ends this run {os.environ.get(GCS_LOSS_ENV, RAY_GCS_LOSS_S)} s after losing it"
        signalled = signal_received() is not None
        if stop_the_fit_loop("Ray's control store (gcs_server) ended"):
            if signalled:
                logger.warning(
                    "%s after the signal, which reached Ray's daemons too: finishing the current step, then exiting "
                    "at once (%s).",
                    lost,
                    ends,
                )
                while raylet is not None and not armed and _running(raylet) and ours():
                    time.sleep(poll_s)  # its end takes the workers: the step cannot finish then
                if raylet is not None and not armed and ours():
                    daemons_ended_with_the_signal()
            else:
                logger.error(
                    "%s: the workers go on, but %s. Finishing the current step and saving a checkpoint.", lost, ends
                )
        else:
            exit_if_stopped(lost)  # the loop stopped already (a signal): Ray's teardown would hang
            if not daemons_ended_with_the_signal():  # (else: the step a signal's stop waited for failed with them)
                logger.error("%s outside the training loop: %s; the checkpoints on disk are as they were.", lost, ends)

    threading.Thread(target=watch, name="control-store-watch", daemon=True).start()


def _listening(process: psutil.Process) -> bool:
    """Whether `process` listens on a TCP port (a few ms: its sockets are read from /proc); True where unknown."""
    sockets = getattr(process, "net_connections", None) or process.connections  # (psutil < 6 names it so)
    try:
        return any(connection.status == psutil.CONN_LISTEN for connection in sockets("tcp"))
    except psutil.AccessDenied:
        return True


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def write_timeline(path: str) -> None:
    """Write Ray's timeline (`ray.timeline`: every remote call's phases, per process) as a Chrome trace to `path`,
    once the workers' last events have been reported; a failure is a warning (the run's checkpoints are saved)."""
    try:
        interval = int(os.environ.get(TASK_EVENTS_ENV, TASK_EVENTS_INTERVAL_MS)) / 1000 + 0.5
        events: list | None = None
        for _ in range(10):  # until a report interval adds nothing (a loaded machine's workers report late)
            time.sleep(interval)
            latest = ray.timeline()
            if events is not None and len(latest) == len(events):
                break
            events = latest
        events = latest
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(events, f)
    except Exception as err:
        logger.warning("Could not write trainer.ray_timeline=%s: %s", path, err)
        return
    if events:
        logger.info(
            "Wrote the Ray timeline (%d events) to %s: open it in chrome://tracing or ui.perfetto.dev.",
            len(events),
            path,
        )
    else:
        logger.warning(
            "The Ray timeline in %s is empty: a Ray the run did not start (RAY_ADDRESS's, or one this process had "
            "started) records one only when started with RAY_PROFILING=1 and %s above 0.",
            path,
            TASK_EVENTS_ENV,
        )
