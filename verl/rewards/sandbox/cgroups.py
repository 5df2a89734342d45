# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One control group (v2, or v1 memory/pids/cpu) per sandbox run: it bounds the run's total memory (tmpfs included),
process count and CPU rate, which per-process RLIMITs cannot, counts its OOM kills and CPU time, and lists its
processes for the final kill. Where none is writable, `available()` says so and runs keep per-process limits.
"""

import contextlib
import logging
import os
import signal
import threading
import time
import uuid


logger = logging.getLogger(__name__)

ROOT = "/sys/fs/cgroup"
GROUP = "verl-sandbox"
"""Runs' cgroups go in this folder under the trainer's own cgroup of each hierarchy (created once, left empty)."""
V1_CONTROLLERS = ("memory", "pids", "cpu")
CPU_WEIGHT_V2 = 25
CPU_SHARES_V1 = 256
"""The CPU weight (v2 cpu.weight; a nice-0 task has 100) and shares (v1; 1024) of the folder of all runs: together
they weigh a quarter of one nice-0 trainer process. While the trainer keeps every core busy, spinning programs take at
most that share from it, and honest ones still get enough CPU to finish within their wall limits (the lowest weight,
1/100, starved them into timeouts: docs/rewards.md)."""
V1_OPTIONAL = ("cpuacct",)
"""Used where mounted (the run's CPU time); where it is co-mounted with cpu ("cpu,cpuacct") the cpu group has it."""


def _folder_weight(path: str, value: int) -> None:
    """Set the runs' folder's CPU weight (nice only orders processes within the group: the group competes)."""
    try:
        _write(path, str(value))
    except OSError as error:
        logger.warning("Could not set %s to %d (%s): sandboxed programs compete with the trainer.", path, value, error)


def _own_path(controller: str) -> str:
    """The trainer's cgroup in hierarchy `controller` ("" for v2), relative to that hierarchy's mount point."""
    with open("/proc/self/cgroup", encoding="utf-8") as file:
        for line in file:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(",") or (controller == "" and names == ""):
                return path.lstrip("/")
    return ""


def _base(mount: str, controller: str) -> str:
    """Where this trainer's runs go in one hierarchy: under its own cgroup when the mount shows it, else the root."""
    own = os.path.join(mount, _own_path(controller))
    return os.path.join(own if os.path.isdir(own) else mount, GROUP)


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(value)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as file:
        return file.read()


class _Layout:
    """Where the runs' cgroups are made on this machine, found once."""

    def __init__(self) -> None:
        self.version = ""
        self.bases: dict[str, str] = {}  # controller ("" for v2) -> folder holding the runs' cgroups
        self.reason = ""
        try:
            if os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
                self._unified()
            else:
                self._legacy()
        except OSError as error:
            self.version, self.bases = "", {}
            self.reason = f"{type(error).__name__}: {error}"

    def _unified(self) -> None:
        base = _base(ROOT, "")
        os.makedirs(base, exist_ok=True)
        wanted = {"memory", "pids", "cpu"}
        missing = wanted - set(_read(os.path.join(base, "cgroup.controllers")).split())
        if missing:
            raise OSError(f"{base} lacks the controllers {sorted(missing)} (not delegated to this user?)")
        _write(os.path.join(base, "cgroup.subtree_control"), " ".join(f"+{name}" for name in sorted(wanted)))
        _folder_weight(os.path.join(base, "cpu.weight"), CPU_WEIGHT_V2)
        self.version, self.bases = "v2", {"": base}

    def _legacy(self) -> None:
        bases = {}
        for controller in V1_CONTROLLERS:
            mount = os.path.join(ROOT, controller)
            if not os.path.isdir(mount):
                raise OSError(f"no cgroup v1 hierarchy for {controller} at {mount}")
            bases[controller] = _base(mount, controller)
            os.makedirs(bases[controller], exist_ok=True)
        for controller in V1_OPTIONAL:
            mount = os.path.join(ROOT, controller)
            if os.path.isdir(mount) and os.path.realpath(mount) != os.path.realpath(os.path.join(ROOT, "cpu")):
                with contextlib.suppress(OSError):
                    bases[controller] = _base(mount, controller)
                    os.makedirs(bases[controller], exist_ok=True)
        _folder_weight(os.path.join(bases["cpu"], "cpu.shares"), CPU_SHARES_V1)
        self.version, self.bases = "v1", bases


_LAYOUT: _Layout | None = None
_LAYOUT_LOCK = threading.Lock()


def _layout() -> _Layout:
    global _LAYOUT
    with _LAYOUT_LOCK:
        if _LAYOUT is None:
            _LAYOUT = _Layout()
            if _LAYOUT.version:
                logger.info(
                    "Code sandbox: one cgroup %s per run under %s.", _LAYOUT.version, sorted(_LAYOUT.bases.values())
                )
        return _LAYOUT


def available() -> str:
    """ "v2" or "v1" when runs get a cgroup of their own here, else "" (see `unavailable_reason`)."""
    return _layout().version


def unavailable_reason() -> str:
    """Why no run gets a cgroup here (the error met making the runs' folder), "" where they do."""
    return _layout().reason


class RunCgroup:
    """The cgroup(s) of one run: made with its limits, joined by the run's first process, read, killed, removed."""

    def __init__(self, memory_bytes: int, max_processes: int, cpus: float = 1.0) -> None:
        layout = _layout()
        if not layout.version:
            raise OSError(f"no writable cgroup hierarchy here ({layout.reason})")
        self.version = layout.version
        name = uuid.uuid4().hex
        self.paths = {controller: os.path.join(base, name) for controller, base in layout.bases.items()}
        period = 100_000
        quota = max(1_000, int(cpus * period))
        try:
            for path in self.paths.values():
                os.mkdir(path)
            if self.version == "v2":
                path = self.paths[""]
                _write(os.path.join(path, "memory.max"), str(memory_bytes))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to limit
                    _write(os.path.join(path, "memory.swap.max"), "0")
                _write(os.path.join(path, "pids.max"), str(max_processes))
                _write(os.path.join(path, "cpu.max"), f"{quota} {period}")
            else:
                memory = self.paths["memory"]
                _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
                with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                    _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(memory_bytes))
                _write(os.path.join(self.paths["pids"], "pids.max"), str(max_processes))
                _write(os.path.join(self.paths["cpu"], "cpu.cfs_period_us"), str(period))
                _write(os.path.join(self.paths["cpu"], "cpu.cfs_quota_us"), str(quota))
        except OSError:
            self.remove()
            raise

    def procs_files(self) -> tuple[bytes, ...]:
        """The files a process writes "0" into to join the run (between fork and exec: no allocation needed)."""
        return tuple(os.fsencode(os.path.join(path, "cgroup.procs")) for path in self.paths.values())

    def _file(self, v1_controller: str, name: str) -> str:
        return os.path.join(self.paths["" if self.version == "v2" else v1_controller], name)

    def _field(self, v1_controller: str, name: str, key: str) -> int:
        """The value on the `key` line of a "key value" file of the run's cgroup (0 where it cannot be read)."""
        try:
            for line in _read(self._file(v1_controller, name)).splitlines():
                field, _, value = line.partition(" ")
                if field == key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def oom_kills(self) -> int:
        """Processes of the run the kernel killed for its memory limit."""
        return self._field("memory", "memory.events" if self.version == "v2" else "memory.oom_control", "oom_kill")

    def cpu_seconds(self) -> float:
        """CPU time the run's processes used so far, all of them together (0.0 where it is not accounted)."""
        if self.version == "v2":
            return self._field("", "cpu.stat", "usage_usec") / 1e6
        controller = "cpuacct" if "cpuacct" in self.paths else "cpu"
        try:
            return int(_read(os.path.join(self.paths[controller], "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            return 0.0

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.paths.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(pid) for pid in _read(os.path.join(path, "cgroup.procs")).split())
        return sorted(found)

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process of the run until none is left; False if some survive `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            if self.version == "v2":
                with contextlib.suppress(OSError):  # Linux 5.14+: one write kills the whole tree
                    _write(self._file("", "cgroup.kill"), "1")
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def remove(self) -> None:
        """Remove the run's cgroups, retrying while an exited but unreaped process keeps one busy."""
        for path in self.paths.values():
            for attempt in range(100):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002 * (attempt + 1))
            else:
                logger.warning("Could not remove the sandbox cgroup %s.", path)
