# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by the whole suite."""

import contextlib
import faulthandler
import os
import random
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Generator

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key


def _rearm_faulthandler(config: pytest.Config) -> None:
    """Point the fatal signals back at faulthandler, writing every thread's stack to pytest's stderr.

    `ray.init` in this process installs Ray's own SIGSEGV handler, and `ray.shutdown` leaves the default one: a
    native crash in a later test (Ray's threads outlive its shutdown) would end the run with no word of where."""
    fd = config.stash.get(fault_handler_stderr_fd_key, None)
    if fd is not None:
        faulthandler.disable()
        faulthandler.enable(file=fd, all_threads=True)


# Ray runs its worker processes at nice 15. With two pytest processes side by side (`make test`), the other one's
# processes (nice 0) starve a training run's workers (measured: beside two busy processes a run's workers were still
# loading their model after 200 s), so every Ray a test starts (here, in the trainer, in a subprocess) keeps its
# workers at nice 0.
os.environ.setdefault("RAY_worker_niceness", "0")

SHARED_RAY_FIXTURE = "local_ray"


class _SharedRay:
    """The one Ray session of the modules that use `local_ray`: started by the first of them and kept until a test of
    another module runs (which then finds no Ray in this process, as if each module had its own)."""

    modules: frozenset[str] = frozenset()
    up = False

    @classmethod
    def start(cls) -> None:
        if cls.up:
            return
        import ray

        from verl.trainer import warm_workers
        from verl.utils.worker_setup import WORKER_SETUP_HOOK

        runtime_env = {
            "env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false"},
            "worker_process_setup_hook": WORKER_SETUP_HOOK,
        }
        runtime_env = warm_workers.with_warm_workers(runtime_env, "cpu")  # as the trainer's own Ray does
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        cls.up = True

    @classmethod
    def resources_all_free(cls, wait_s: float = 10.0) -> bool:
        """Whether every CPU of the session is free again (actors end, and placement groups go, asynchronously)."""
        import ray

        deadline = time.monotonic() + wait_s
        while True:
            if ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources().get("CPU", 0.0):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    @classmethod
    def stop(cls) -> None:
        if cls.up:
            import ray

            ray.shutdown()
            cls.up = False


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _end_descendants_then_time_out(item: pytest.Item, settings) -> None:
    """pytest-timeout's end of a hung test (every thread's stack, then this process's exit), after killing every
    process this one started: a child forked before its exec (stuck there) holds the worker's pipes to pytest-xdist,
    which then never learns that the worker is gone, and the whole run waits for ever instead of going on."""
    import psutil
    import pytest_timeout

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    pytest_timeout.timeout_timer(item, settings)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    """The thread method's timer (pyproject.toml's hang guard), ending the test's processes too."""
    if settings.method != "thread":
        return None  # pytest-timeout's own
    timer = threading.Timer(settings.timeout, _end_descendants_then_time_out, (item, settings))
    timer.name = f"hang guard {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel
    timer.start()
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shuffle-modules",
        type=int,
        default=None,
        metavar="SEED",
        help="run the test modules in an order shuffled with SEED (a module's tests keep theirs), to find a test that "
        "depends on what an earlier module left in its process",
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules that use `local_ray` one after another, where the first of them is, so that one Ray session
    serves them all (a Ray costs ~7 s to start and stop); every other module keeps its place.

    Under pytest-xdist (`make test`: two processes, whole modules each, in this order) the heaviest modules go first,
    so that no long module starts last while the other process has nothing left: those that use `local_ray` (the
    training runs; each process then keeps one Ray for them), then by their number of `slow` tests. With
    `--shuffle-modules SEED` the modules run in a shuffled order instead."""
    shared = {_module_of(item) for item in items if SHARED_RAY_FIXTURE in getattr(item, "fixturenames", ())}
    _SharedRay.modules = frozenset(shared)
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(_module_of(item), []).append(item)
    seed = config.getoption("--shuffle-modules")
    if seed is not None:  # every xdist worker shuffles alike, as xdist requires
        modules = list(by_module)
        random.Random(seed).shuffle(modules)
        items[:] = [item for module in modules for item in by_module[module]]
        return
    if hasattr(config, "workerinput"):  # an xdist worker; every worker computes the same order, as xdist requires
        slow = {
            module: sum(item.get_closest_marker("slow") is not None for item in its)
            for module, its in by_module.items()
        }
        heaviest_first = sorted(by_module, key=lambda module: (module not in shared, -slow[module]))
        items[:] = [item for module in heaviest_first for item in by_module[module]]
        return
    ordered: list[pytest.Item] = []
    for module, module_items in by_module.items():
        if module not in shared:
            ordered.extend(module_items)
        elif module == next(name for name in by_module if name in shared):  # the first: all of them here
            ordered.extend(item for name in by_module if name in shared for item in by_module[name])
    items[:] = ordered


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    if _module_of(item) not in _SharedRay.modules:
        _SharedRay.stop()  # before the module's own fixtures, which may start a Ray of their own
    yield
    _rearm_faulthandler(item.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _SharedRay.stop()


def _release_process_group() -> None:
    """End the process group a module left in this process (a vLLM engine built here joins a world of one and never
    leaves it), so that the next module, whichever runs next, starts outside any: `init_process_group` would fail
    ("initialize the default process group twice") and `init_distributed` would skip its checks."""
    parallel_state = sys.modules.get("vllm.distributed.parallel_state")
    if parallel_state is not None:  # vLLM's own groups first, or a later engine would reuse the ended ones
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    yield
    _rearm_faulthandler(item.config)
    if nextitem is None or _module_of(nextitem) != _module_of(item):
        rank_pools = sys.modules.get("tests.workers.fsdp_testing")
        if rank_pools is not None:
            rank_pools.close_pools()  # a module's rank processes (fsdp_testing.spawn) serve that module only
        _release_process_group()
    # A vLLM engine built in this process (a test's own, not the rollout's, which restores it) leaves
    # torch.set_num_threads a no-op, which later tests' data-loader workers rely on (verl.trainer.data_loader)
    import torch

    torch.set_num_threads = torch._C.set_num_threads


class SmallDisk:
    """A real tmpfs mount of a given size: writes beyond it fail with ENOSPC, as on a full disk."""

    def __init__(self, path: str, size_kib: int) -> None:
        self.path = path
        self.resize(size_kib, remount=False)

    def resize(self, size_kib: int, remount: bool = True) -> None:
        options = f"{'remount,' if remount else ''}size={size_kib}k"
        if remount:
            args = ["mount", "-o", options, self.path]
        else:
            args = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", self.path]
        subprocess.run(args, check=True, capture_output=True, text=True)

    def used_kib(self) -> int:
        return (shutil.disk_usage(self.path).used + 1023) // 1024


@pytest.fixture
def small_disk(tmp_path):
    """Factory: small_disk(size_kib) mounts a tmpfs of that size under tmp_path; skipped where mount is refused."""
    mounts: list[SmallDisk] = []

    def make(size_kib: int) -> SmallDisk:
        path = str(tmp_path / f"disk{len(mounts)}")
        os.makedirs(path)
        if shutil.which("mount") is None:
            pytest.skip("no mount command: cannot make a small disk")
        try:
            disk = SmallDisk(path, size_kib)
        except subprocess.CalledProcessError as err:
            pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {err.stderr.strip()}")
        mounts.append(disk)
        return disk

    yield make
    for disk in mounts:
        subprocess.run(["umount", "-l", disk.path], check=False, capture_output=True)


@pytest.fixture(scope="module")
def local_ray():
    """A Ray in this process (`address="local"`; never `ray stop`, which ends every Ray on the machine): 4 logical
    CPUs for 2 workers and the reward/judge actors, vLLM in-process, quiet tokenizers, and the trainer's worker setup
    hook. The modules that use it share one session (see `_SharedRay`): a module must leave no actor or placement
    group behind."""
    _SharedRay.start()
    yield
    if not _SharedRay.resources_all_free():
        warnings.warn("a test module left Ray resources in use; the next module gets a Ray of its own", stacklevel=1)
        _SharedRay.stop()


@pytest.fixture
def write_reward_file(tmp_path) -> Callable[[str, str], str]:
    """Write a reward module into tmp_path and return its path."""

    def write(source: str, name: str = "reward.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write
