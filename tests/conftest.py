# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Fixtures shared by the whole suite."""

import faulthandler
import os
import shutil
import subprocess
from collections.abc import Generator

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _rearm_faulthandler(item.config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _rearm_faulthandler(item.config)


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
    """A Ray of the test module's own (`address="local"`; never `ray stop`, which ends every Ray on the machine):
    4 logical CPUs for 2 workers and the reward/judge actors, vLLM in-process, quiet tokenizers, and the trainer's
    worker setup hook."""
    import ray

    from verl.utils.worker_setup import WORKER_SETUP_HOOK

    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={
            "env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false"},
            "worker_process_setup_hook": WORKER_SETUP_HOOK,
        },
    )
    yield
    ray.shutdown()
