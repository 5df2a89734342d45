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
"""Run untrusted Python code (a model's program) in a subprocess with resource limits, and clean up after it.

A code reward executes thousands of generated programs per step, and any of them may loop forever, allocate all
memory, print without end, fork-bomb, daemonize, open connections or write over files. Each run here gets a fresh
scratch directory, a minimal environment, `sys.executable -I`, its own session, and limits set between fork and
exec (RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE on the files that take its output, RLIMIT_NPROC, no core dumps). After
every run, whatever happened, every process it started is killed, and the result says what stopped it.

Starting that interpreter (about 40 ms) costs far more than most programs run, so `run_python_cases` runs all test
cases of one program in one such process: a harness compiles the program once and forks a child per case, which
gets the case's stdin and output files, fresh per-process limits and the harness's state from before any case;
after each case the harness kills and reaps what the case started and empties the scratch directory, and it reports
through a pipe no process of the program can reach (see `run_python_cases`).

Isolation (`SandboxLimits.isolation`; `isolation(mode)` says what this machine gives):
- "bwrap" (the default): bubblewrap (verl/rewards/bwrap.py) gives the program a root of its own (the system's /usr
  and the base interpreter, read-only; its scratch folder; private /tmp and /dev/shm), new PID, network, IPC, UTS
  and cgroup namespaces, and an unprivileged uid: as root a dedicated host uid (UID_BASE + a slot claimed with a
  lock file) the bootstrap becomes inside, else a user namespace. Without bwrap, or where it cannot start, runs are
  refused (SandboxUnavailable says what to install or allow).
- "namespaces" (opt-in, weaker): the built-in mode. A dedicated uid as root, else a user namespace, else the
  trainer's uid; an empty network namespace, else an audit hook refusing sockets and spawning (not a security
  boundary); a PID namespace under a small init, else kills by session and marker. The host's world-readable files,
  /tmp, /dev/shm and /proc are visible.
In both, where a cgroup can be made (cgroups.py: v2, or v1 memory/pids/cpu), each run gets one: its processes'
memory together (tmpfs files included) is capped at memory_mb + CGROUP_OVERHEAD_MB, their number at max_processes,
their CPU rate at one core, and at the end everything in it is killed. Elsewhere the limits are per process.
"""

import contextlib
import ctypes
import fcntl
import functools
import json
import logging
import marshal
import math
import os
import pwd
import re
import resource
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from verl.rewards import bwrap, cgroups, sandbox_bootstrap, sandbox_fusion
from verl.rewards.sandbox_bootstrap import empty_directory, kill_group, wait_for_exit
from verl.rewards.sandbox_types import (
    ISOLATION_MODES,
    STATUSES,
    STDERR_TAIL_BYTES,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailable,
)


__all__ = [
    "ISOLATION_MODES",
    "STATUSES",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "isolation",
    "run_many",
    "run_many_cases",
    "run_python",
    "run_python_cases",
]


logger = logging.getLogger(__name__)

MARKER_ENV = "VERL_SANDBOX_ID"
"""Environment variable carried by every process of a run: how cleanup finds processes that left its session."""
UID_BASE = 60000
"""As root, run slot N runs as uid and gid UID_BASE + N (uids that exist in the user database are skipped)."""
MAX_SLOTS = 1000
SLOT_DIRECTORIES = ("/run/verl-sandbox-slots", "/tmp/verl-sandbox-slots")
"""Where the slot lock files live: the first of these that can be created (the same for every process)."""
PROGRAM_NAME = "solution.py"
MANIFEST_NAME = "cases.marshal"
"""run_python_cases: the harness's instructions (per-case descriptors and code suffixes), deleted before any case."""
CASES_PER_PROCESS = 32
"""run_python_cases runs at most this many cases in one process (each holds three open files in the trainer)."""
HARNESS_GRACE_S = 2.0
"""run_python_cases: seconds the harness may take beyond wall_s for a case (or its start-up) before the trainer
gives up on it, kills the process and counts the running case as a timeout."""

CGROUP_OVERHEAD_MB = 64
"""Memory a run's cgroup allows beyond memory_mb, for the sandbox's own processes (bwrap, the harness)."""

CaseSpec = str | tuple[str, str]
"""One case of run_python_cases: its stdin, or (stdin, code_suffix), the suffix run after the code."""

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_UNPRIVILEGED_UNSHARE = (_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWPID, _CLONE_NEWUSER | _CLONE_NEWNET)
# A signal from a crash of the program itself is a runtime error; any other unexplained signal is "killed".
_CRASH_SIGNALS = frozenset(
    signal.Signals[name] for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGSYS", "SIGTRAP")
)
_MEMORY_ERRORS = re.compile(r"\bMemoryError\b|Cannot allocate memory|\[Errno 12\]|std::bad_alloc")
_PROCESS_ERRORS = re.compile(r"BlockingIOError: \[Errno 11\]|Resource temporarily unavailable|can't start new thread")


def _load_libc() -> tuple[Any, Any]:
    """libc's unshare and mount, looked up once here: the child may not load anything between fork and exec."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        unshare, mount = libc.unshare, libc.mount
    except (OSError, AttributeError):  # not Linux
        return None, None
    unshare.argtypes, unshare.restype = [ctypes.c_int], ctypes.c_int
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    mount.restype = ctypes.c_int
    return unshare, mount


_UNSHARE, _MOUNT = _load_libc()


@dataclass(frozen=True)
class _Plan:
    """How runs are isolated on this machine: the candidate `isolation()` settled on."""

    dedicated_uid: bool
    privileged_unshare: tuple[int, ...] = ()
    """Namespace flag sets tried in order while still root, before dropping to the dedicated uid."""
    unprivileged_unshare: tuple[int, ...] = _UNPRIVILEGED_UNSHARE
    """Tried in order afterwards when the network is still shared (these include CLONE_NEWUSER)."""
    reexpose: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(directory the dedicated uid cannot enter, interpreter directories under it to bind back in)."""
    bwrap: str = ""
    """The bwrap executable the program starts under ("" for the built-in namespaces)."""


@dataclass(frozen=True)
class _ChildSetup:
    """What the child does between fork and exec (subprocess's preexec_fn), decided beforehand in the parent.

    This runs in a forked copy of a possibly multi-threaded trainer, where another thread may have held any lock at
    the moment of the fork, so it only makes system calls (os, resource, and libc through ctypes functions looked
    up at import), imports nothing and logs nothing. The order matters: namespaces that need root (CLONE_NEWNET,
    CLONE_NEWPID, CLONE_NEWNS and its mounts) come before dropping to the dedicated uid, and an unprivileged user
    namespace after it, because a process that has left the initial user namespace can no longer switch to another
    uid there. RLIMIT_NPROC comes last: a user namespace created before it keeps the parent's limit for the uid as a
    whole and counts the run's processes apart, so the run gets a budget of its own.
    """

    uid: int | None
    privileged_unshare: tuple[int, ...]
    unprivileged_unshare: tuple[int, ...]
    reexpose: tuple[tuple[bytes, tuple[bytes, ...]], ...]
    rlimits: tuple[tuple[int, int, int], ...]
    max_processes: int
    shared_tasks: int
    """Tasks the uid already has, added to the budget when the run shares the uid's RLIMIT_NPROC count."""
    nice: int = 10
    bwrap: str = ""
    """Start the interpreter under this bwrap (which makes the namespaces), or directly ("")."""
    cgroup_procs: tuple[bytes, ...] = ()
    """The run's cgroup.procs files, joined first (the run's total memory, processes and CPU rate)."""
    tmpfs_bytes: int = 0
    """Under bwrap: the size of the run's private /tmp and of its /dev/shm."""

    def __call__(self) -> None:
        for path in self.cgroup_procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        os.nice(self.nice)
        done = self._unshare(self.privileged_unshare)
        if done & _CLONE_NEWNS:
            self._reexpose_interpreter()
        for which, soft, hard in self.rlimits:
            resource.setrlimit(which, (soft, hard))
        if self.uid is not None and not self.bwrap:  # under bwrap the bootstrap drops to the uid, once inside
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)
        if not done & _CLONE_NEWNET:
            done |= self._unshare(self.unprivileged_unshare)
        own_budget = self.uid is not None or bool(done & _CLONE_NEWUSER)
        # the supervisor and the namespace's init, or bwrap and its init
        nproc = self.max_processes + (2 if done & _CLONE_NEWPID or self.bwrap else 0)
        nproc += 0 if own_budget else self.shared_tasks
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        if hard != resource.RLIM_INFINITY:
            nproc = min(nproc, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    @staticmethod
    def _unshare(candidates: tuple[int, ...]) -> int:
        """The first flag set of `candidates` that unshare accepts (0 if none)."""
        if _UNSHARE is None:
            return 0
        for flags in candidates:
            if _UNSHARE(flags) == 0:
                return flags
        return 0

    def _reexpose_interpreter(self) -> None:
        """Cover each directory the uid cannot enter with an empty tmpfs and bind the interpreter back under it."""
        _mount(None, b"/", None, _MS_REC | _MS_PRIVATE)  # nothing below may propagate to the host
        for hidden, paths in self.reexpose:
            handles = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in paths]  # reachable once covered
            flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
            _mount(b"tmpfs", hidden, b"tmpfs", flags, b"mode=0755,size=1m")
            for path, handle in zip(paths, handles):
                os.makedirs(path, mode=0o755, exist_ok=True)
                _mount(b"/proc/self/fd/%d" % handle, path, None, _MS_BIND | _MS_REC)
                os.close(handle)
            _mount(None, hidden, None, _MS_REMOUNT | _MS_RDONLY | flags)


def _mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None = None) -> None:
    if _MOUNT is None or _MOUNT(source, target, fstype, flags, data) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source!r} on {target!r}: {os.strerror(error)}")


@dataclass(frozen=True)
class _KillAllOfUid:
    """preexec_fn of a helper that becomes `uid` and sends SIGKILL to every process of it, then exits unexecuted.

    kill(-1) as that uid reaches all its processes in one atomic step, so even a fork bomb that left the session
    cannot outrun it; only system calls are made (see _ChildSetup).
    """

    uid: int

    def __call__(self) -> None:
        try:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)


# The child's first code. It reads and deletes the program (so the program cannot read its own test harness from
# the scratch directory), installs the audit hook where the network (or, with a shared uid and no PID namespace,
# the trainer's processes) is not isolated otherwise, and runs the program as __main__. In a new PID namespace it
# forks that namespace's init, which forks the program and reaps every orphan, and relays the program's exit status
# or signal through a pipe; when init exits the kernel kills whatever is left in the namespace. Given a manifest
# (run_python_cases), the program's place is taken by the harness (_harness), and each case's child, forked from
# it, installs the hook and runs the program (_run_case); the supervisor and init close the manifest's descriptors.
_BOOTSTRAP = Path(sandbox_bootstrap.__file__).read_text(encoding="utf-8")

# Run in a sandbox by `isolation()` to see which namespaces a run actually ends up in.
_PROBE = """
import json, os
def namespace(name):
    try:
        return os.readlink("/proc/self/ns/" + name)
    except OSError:
        return ""
print(json.dumps({name: namespace(name) for name in ("net", "pid", "user")}))
"""


def _namespace(name: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------------------------
# Slots: one dedicated uid per concurrent run, across every process on the machine.


class _Slots:
    """Claims uid slots with flock on one lock file per slot, so that several trainer processes never share a uid.

    A slot's uid must exist in no user database and have no process left, zombies included (a zombie counts against
    RLIMIT_NPROC until something reaps it, and in a container whose PID 1 does not reap, nothing will).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}
        self._directory = ""

    def _lock_directory(self) -> str:
        """A fixed, machine-wide path (not TMPDIR, which Ray and users change per process) owned by this uid."""
        if not self._directory:
            for directory in SLOT_DIRECTORIES:
                try:
                    os.makedirs(directory, mode=0o700, exist_ok=True)
                except OSError:
                    continue
                info = os.lstat(directory)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    raise RuntimeError(f"{directory} is not a directory owned by uid {os.geteuid()}; remove it.")
                self._directory = directory
                break
            else:
                raise RuntimeError(f"cannot create a sandbox slot directory in any of {SLOT_DIRECTORIES}.")
        return self._directory

    def claim(self) -> int:
        """A free slot, locked until `release`; waits while every slot is busy."""
        directory = self._lock_directory()
        while True:
            busy = _uids_with_processes()
            for slot in range(MAX_SLOTS):
                uid = UID_BASE + slot
                with self._lock:
                    if slot in self._held:
                        continue
                if _uid_exists(uid):
                    continue
                handle = os.open(os.path.join(directory, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(handle)
                    continue
                if uid in busy:  # left over by a run that crashed: clear it, or leave the slot if zombies remain
                    _kill_all_of_uid(uid)
                    if uid in _uids_with_processes():
                        os.close(handle)
                        continue
                with self._lock:
                    self._held[slot] = handle
                return slot
            time.sleep(0.05)

    def release(self, slot: int) -> None:
        with self._lock:
            handle = self._held.pop(slot)
        os.close(handle)  # closing the descriptor drops the flock


_SLOTS = _Slots()


@functools.cache
def _uid_exists(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _uids_with_processes() -> set[int]:
    uids = set()
    for process in psutil.process_iter(["uids"]):
        with suppress(TypeError, AttributeError):
            uids.add(process.info["uids"].real)
    return uids


def _kill_all_of_uid(uid: int) -> None:
    helper = subprocess.Popen([sys.executable], preexec_fn=_KillAllOfUid(uid), close_fds=True)  # noqa: S603
    helper.wait()


def _tasks_of_current_uid() -> int:
    """Processes and threads of this uid: what RLIMIT_NPROC counts for it."""
    uid, total = os.getuid(), 0
    for process in psutil.process_iter(["uids", "num_threads"]):
        info = process.info
        if info["uids"] is not None and info["uids"].real == uid:
            total += info["num_threads"] or 1
    return total


# ---------------------------------------------------------------------------------------------------------------
# Isolation probing: which candidate plan works here, decided once per process.


def _interpreter_directories() -> list[str]:
    """The directories the interpreter needs (prefixes, the executable's directory and the links leading to it)."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    link = os.path.abspath(sys.executable)
    for _ in range(40):
        paths.add(os.path.realpath(os.path.dirname(link)))
        if not os.path.islink(link):
            break
        link = os.path.join(os.path.dirname(link), os.readlink(link))
    minimal: list[str] = []
    for path in sorted(paths, key=len):
        if not any(path == kept or path.startswith(kept.rstrip("/") + "/") for kept in minimal):
            minimal.append(path)
    return minimal


def _hidden_directories() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each interpreter directory under a directory "other" users cannot enter, that topmost such directory."""
    groups: dict[str, list[str]] = {}
    for path in _interpreter_directories():
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                groups.setdefault(ancestor, []).append(path)
                break
    return tuple((hidden, tuple(paths)) for hidden, paths in sorted(groups.items()))


def _candidate_plans(mode: str = "namespaces") -> list[_Plan]:
    if mode == "bwrap":
        found = bwrap.executable()
        if found is None:
            raise SandboxUnavailable(
                "The code sandbox (isolation=bwrap, the default) needs bubblewrap, and `bwrap` is not on PATH: "
                f"{bwrap.INSTALL_HINT}. Or opt into the weaker built-in mode, in which programs can read the host's "
                "files: reward_function_kwargs isolation=namespaces (docs/rewards.md, 'Threat model')."
            )
        # root: bwrap makes the namespaces, the bootstrap then becomes a dedicated uid (see bwrap.command)
        return [_Plan(dedicated_uid=os.geteuid() == 0, unprivileged_unshare=(), bwrap=found)]
    if os.geteuid() != 0:
        return [_Plan(dedicated_uid=False)]
    reexpose = _hidden_directories()
    mount = _CLONE_NEWNS if reexpose else 0
    privileged = (mount | _CLONE_NEWNET | _CLONE_NEWPID, mount | _CLONE_NEWNET)
    return [_Plan(True, privileged, _UNPRIVILEGED_UNSHARE, reexpose), _Plan(dedicated_uid=False)]


@dataclass(frozen=True)
class _Isolation:
    plan: _Plan
    report: dict[str, str]


_ISOLATION_LOCK = threading.Lock()
_ISOLATIONS: dict[str, _Isolation] = {}


def _probe(plan: _Plan) -> dict[str, str] | None:
    """Run the probe under `plan`; the mechanisms in force, or None when the plan cannot run a program here."""
    try:
        result = _run(_PROBE, "", SandboxLimits(), plan)
    except (OSError, subprocess.SubprocessError) as error:
        logger.debug("sandbox plan %s cannot start a program: %s", plan, error)
        return None
    if result.status != "ok":
        logger.debug("sandbox plan %s failed the probe: %s %s", plan, result.status, result.stderr[-500:])
        return None
    seen = json.loads(result.stdout)
    limits = f"cgroup {cgroups.available()} per run" if cgroups.available() else "per process (no writable cgroup)"
    if plan.bwrap:
        return {
            "network": "netns",
            "user": "dedicated-uid" if plan.dedicated_uid else "user-namespace",
            "processes": "pid-namespace",
            "filesystem": "bwrap",
            "limits": limits,
        }
    new_user = seen["user"] != _namespace("user")
    if seen["net"] in ("", _namespace("net")):
        network = "audit-hook"
    else:
        network = "userns+netns" if new_user else "netns"
    if plan.dedicated_uid:
        user = "dedicated-uid"
    else:
        user = "user-namespace" if new_user else "same-uid"
    processes = "pid-namespace" if seen["pid"] not in ("", _namespace("pid")) else "process-group"
    return {"network": network, "user": user, "processes": processes, "filesystem": "host", "limits": limits}


def _isolation(mode: str = "bwrap") -> _Isolation:
    with _ISOLATION_LOCK:
        if mode not in _ISOLATIONS:
            for plan in _candidate_plans(mode):
                report = _probe(plan)
                if report is not None:
                    _ISOLATIONS[mode] = _Isolation(plan, report)
                    break
            else:
                if mode == "bwrap":
                    raise SandboxUnavailable(
                        f"bubblewrap ({bwrap.executable()}) cannot start a sandboxed program here; the usual cause is "
                        f"that user namespaces are not allowed: {bwrap.INSTALL_HINT}. Run with logging at DEBUG "
                        "for bwrap's own message, or opt into the weaker mode isolation=namespaces."
                    )
                raise SandboxUnavailable(
                    f"the sandbox cannot start {sys.executable} here (every isolation plan failed); run with "
                    "logging at DEBUG for the reasons."
                )
            chosen = _ISOLATIONS[mode]
            logger.info("Code sandbox isolation: %s.", ", ".join(f"{k} {v}" for k, v in chosen.report.items()))
            if chosen.plan.reexpose and chosen.plan.dedicated_uid:
                logger.info(
                    "Code sandbox: %s cannot be entered by other users, so runs see it as an empty directory "
                    "holding only the interpreter (%s).",
                    ", ".join(hidden for hidden, _ in chosen.plan.reexpose),
                    ", ".join(path for _, paths in chosen.plan.reexpose for path in paths),
                )
            if not chosen.plan.dedicated_uid and not chosen.plan.bwrap and os.geteuid() == 0:
                logger.warning(
                    "The code sandbox runs programs as root (in a user namespace where one is allowed): no "
                    "unprivileged uid can run %s here, so RLIMIT_NPROC does not apply and programs can write the "
                    "trainer's files.",
                    sys.executable,
                )
        return _ISOLATIONS[mode]


def isolation(mode: str = "bwrap") -> dict[str, str]:
    """The isolation runs of `mode` get on this machine: {"network", "user", "processes", "filesystem", "limits"}.

    Probed once per process and mode by running a tiny program under the strongest plan that works here; raises
    SandboxUnavailable (with what to install or allow) when none does. "sandbox_fusion" is the remote service's.
    """
    if mode == "sandbox_fusion":
        return dict.fromkeys(("network", "user", "processes", "filesystem", "limits"), "sandbox-fusion service")
    return dict(_isolation(mode).report)


# ---------------------------------------------------------------------------------------------------------------
# One run.


def _find_leftovers(sandbox_id: str, uid: int | None, since: float) -> list[psutil.Process]:
    """Live processes of the run: of its dedicated uid, or carrying its marker (only new processes can)."""
    found = []
    for process in psutil.process_iter(["uids", "create_time", "status"]):
        info = process.info
        if info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) or process.pid == os.getpid():
            continue
        if uid is not None and info["uids"] is not None and info["uids"].real == uid:
            found.append(process)
            continue
        if info["create_time"] is None or info["create_time"] < since:
            continue
        try:
            if process.environ().get(MARKER_ENV) == sandbox_id:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _clean_up(sandbox_id: str, uid: int | None, since: float) -> None:
    """Kill every process the run left, until none is found."""
    for attempt in range(50):
        leftovers = _find_leftovers(sandbox_id, uid, since)
        if not leftovers:
            return
        if uid is not None:
            _kill_all_of_uid(uid)
        for process in leftovers:
            with suppress(psutil.Error):
                process.kill()
        time.sleep(min(0.005 * (attempt + 1), 0.1))
    logger.warning("Sandbox run %s: processes survive repeated SIGKILL (uid %s).", sandbox_id, uid)


@dataclass
class _Interpreter:
    """A sandboxed interpreter that `_start_interpreter` started on a program."""

    process: subprocess.Popen
    sandbox_id: str
    """The marker (MARKER_ENV) in the environment of the run's processes."""
    since: float
    """No process of the run was created before this (wall clock: psutil's create_time may be off by a second)."""
    start: float
    """When the interpreter was started (monotonic clock)."""

    def end(
        self, uid: int | None, cgroup: cgroups.RunCgroup | None = None
    ) -> tuple[int, resource.struct_rusage, float]:
        """Kill the interpreter's process group, reap the interpreter, then kill every process the run left (its
        cgroup's, else of the dedicated `uid` or marked); the interpreter's exit code, resource usage, reaping time."""
        kill_group(self.process.pid)  # before reaping, while the group id cannot have been reused
        if cgroup is not None:
            cgroup.kill_all()
        _, status, usage = os.wait4(self.process.pid, 0)
        reaped = time.monotonic()
        self.process.returncode = os.waitstatus_to_exitcode(status)
        if cgroup is None or not cgroup.kill_all():
            _clean_up(self.sandbox_id, uid, self.since)
        return self.process.returncode, usage, reaped


def _start_interpreter(
    scratch: str,
    code: str,
    setup: _ChildSetup,
    stdin: int | IO[bytes],
    output: tuple[IO[bytes], IO[bytes]],
    manifest: tuple[str, ...] = (),
    pass_fds: tuple[int, ...] = (),
) -> _Interpreter:
    """Write `code` into the scratch directory and start the sandboxed interpreter on it, through the bootstrap
    (given a manifest's name, as the harness), in a session of its own, set up by `setup` before it runs."""
    sandbox_id = uuid.uuid4().hex
    with open(os.path.join(scratch, PROGRAM_NAME), "w", encoding="utf-8") as program:
        program.write(code)
    home = bwrap.WORKDIR if setup.bwrap else scratch  # under bwrap: a tmpfs counted in the run's memory
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home}
    env[MARKER_ENV] = sandbox_id
    if setup.bwrap:  # a user of its own in its own PID namespace: the harness may kill(-1)
        privileged = setup.uid is not None
        args = [*bwrap.command(setup.bwrap, scratch, privileged, setup.tmpfs_bytes), bwrap.interpreter()]
        user = f"u{setup.uid}" if privileged else "0"
        args += ["-I", "-c", _BOOTSTRAP, _namespace("net"), PROGRAM_NAME, user, *manifest]
    else:
        shared_uid = "1" if setup.uid is None else "0"
        args = [sys.executable, "-I", "-c", _BOOTSTRAP, _namespace("net"), PROGRAM_NAME, shared_uid, *manifest]
    since = time.time() - 5.0  # psutil's create_time may be off by a second (boot time in whole seconds)
    start = time.monotonic()
    process = subprocess.Popen(  # noqa: S603
        args,
        stdin=stdin,
        stdout=output[0],
        stderr=output[1],
        cwd=scratch,
        env=env,
        start_new_session=True,
        preexec_fn=setup,
        close_fds=True,
        pass_fds=pass_fds,
    )
    return _Interpreter(process, sandbox_id, since, start)


def _program_exit_code(setup: _ChildSetup, returncode: int) -> int:
    """The interpreter's exit code, with bwrap's 128 + N (how it reports death by signal N) read back as -N."""
    return 128 - returncode if setup.bwrap and 128 < returncode < 128 + signal.NSIG else returncode


def _read_head(file: IO[bytes], limit: int) -> tuple[str, int]:
    size = os.fstat(file.fileno()).st_size
    file.seek(0)
    return file.read(limit).decode("utf-8", "replace"), size


def _read_tail(file: IO[bytes], limit: int) -> tuple[str, int]:
    size = os.fstat(file.fileno()).st_size
    file.seek(max(0, size - limit))
    return file.read(limit).decode("utf-8", "replace"), size


def _classify(
    timed_out: bool,
    returncode: int,
    cpu: float,
    limits: SandboxLimits,
    largest_output: int,
    stderr: str,
    oom_killed: bool = False,
) -> str:
    if timed_out:
        return "timeout"
    signum = -returncode if returncode < 0 else 0
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu >= limits.cpu_s):
        return "cpu_limit"
    if signum == signal.SIGXFSZ or largest_output >= limits.output_kb * 1024:
        return "output_limit"
    if oom_killed and returncode != 0:  # the run's cgroup hit its memory limit and the kernel killed one of its own
        return "memory_limit"
    if returncode == 0:
        return "ok"
    if _MEMORY_ERRORS.search(stderr):
        return "memory_limit"
    if _PROCESS_ERRORS.search(stderr):
        return "process_limit"
    if signum and signum not in _CRASH_SIGNALS:
        return "killed"
    return "error"


def _limit(which: int, value: int) -> tuple[int, int]:
    """(soft, hard) for `value`, kept under the current hard limit (which only root could raise)."""
    hard = resource.getrlimit(which)[1]
    return (value, value) if hard == resource.RLIM_INFINITY else (min(value, hard), min(value, hard))


def _child_setup(
    limits: SandboxLimits,
    plan: _Plan,
    uid: int | None,
    harness: bool = False,
    cgroup: cgroups.RunCgroup | None = None,
) -> _ChildSetup:
    """The child's setup; with `harness`, one more process in the budget, so each case's program gets the same."""
    cpu_soft = max(1, math.ceil(limits.cpu_s))
    cpu_soft, cpu_hard = _limit(resource.RLIMIT_CPU, cpu_soft)[0], _limit(resource.RLIMIT_CPU, cpu_soft + 1)[1]
    return _ChildSetup(
        uid=uid,
        privileged_unshare=plan.privileged_unshare,
        unprivileged_unshare=plan.unprivileged_unshare,
        reexpose=tuple((os.fsencode(hidden), tuple(map(os.fsencode, paths))) for hidden, paths in plan.reexpose),
        rlimits=(
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_CPU, cpu_soft, cpu_hard),
            (resource.RLIMIT_AS, *_limit(resource.RLIMIT_AS, limits.memory_mb * 2**20)),
            (resource.RLIMIT_FSIZE, *_limit(resource.RLIMIT_FSIZE, limits.output_kb * 1024)),
        ),
        max_processes=limits.max_processes + (1 if harness else 0),
        shared_tasks=0 if uid is not None else _tasks_of_current_uid(),
        nice=limits.nice,
        bwrap=plan.bwrap,
        cgroup_procs=cgroup.procs_files() if cgroup is not None else (),
        tmpfs_bytes=limits.memory_mb * 2**20,
    )


@contextlib.contextmanager
def _workspace(
    limits: SandboxLimits, plan: _Plan, harness: bool = False
) -> Iterator[tuple[str, _ChildSetup, cgroups.RunCgroup | None]]:
    """A uid slot (with a dedicated uid), a cgroup (where one can be made) and a scratch directory for one process,
    given back whatever happens."""
    slot = scratch = cgroup = None
    try:
        if plan.dedicated_uid:
            slot = _SLOTS.claim()
        uid = None if slot is None else UID_BASE + slot
        if cgroups.available():
            # the program, its children, bwrap and its init (2), and the harness when there is one
            budget = limits.max_processes + 2 + (1 if harness else 0)
            cgroup = cgroups.RunCgroup((limits.memory_mb + CGROUP_OVERHEAD_MB) * 2**20, budget)
        setup = _child_setup(limits, plan, uid, harness=harness, cgroup=cgroup)
        scratch = tempfile.mkdtemp(prefix="verl-sandbox-")
        if uid is not None:
            os.chown(scratch, uid, uid)
        yield scratch, setup, cgroup
    finally:
        if cgroup is not None:
            cgroup.kill_all()
            cgroup.remove()
        if scratch is not None:
            _remove_tree(scratch)
        if slot is not None:
            _SLOTS.release(slot)


def _run(code: str, stdin: str, limits: SandboxLimits, plan: _Plan) -> SandboxResult:
    """One run under `plan`, in its own workspace."""
    with _workspace(limits, plan) as (scratch, setup, cgroup):
        return _run_in(scratch, code, stdin, limits, setup, cgroup)


def _run_in(
    scratch: str,
    code: str,
    stdin: str,
    limits: SandboxLimits,
    setup: _ChildSetup,
    cgroup: cgroups.RunCgroup | None = None,
) -> SandboxResult:
    # Unlinked files: the program sees an empty scratch directory, and a full pipe can never block it.
    with (
        tempfile.TemporaryFile(dir=scratch) as stdin_file,
        tempfile.TemporaryFile(dir=scratch) as stdout_file,
        tempfile.TemporaryFile(dir=scratch) as stderr_file,
    ):
        stdin_file.write(stdin.encode("utf-8"))
        stdin_file.seek(0)
        interpreter = _start_interpreter(scratch, code, setup, stdin_file, (stdout_file, stderr_file))
        timed_out = True
        try:
            timed_out = not wait_for_exit(interpreter.process.pid, limits.wall_s)
        finally:
            returncode, usage, reaped = interpreter.end(setup.uid, cgroup)
            returncode = _program_exit_code(setup, returncode)
            wall = reaped - interpreter.start
        stdout, stdout_size = _read_head(stdout_file, limits.output_kb * 1024)
        stderr, stderr_size = _read_tail(stderr_file, STDERR_TAIL_BYTES)
    cpu = usage.ru_utime + usage.ru_stime
    if cgroup is not None:  # under bwrap the program's CPU time does not reach the trainer's rusage
        cpu = max(cpu, cgroup.cpu_seconds())
    oom = cgroup is not None and cgroup.oom_kills() > 0
    status_name = _classify(timed_out, returncode, cpu, limits, max(stdout_size, stderr_size), stderr, oom)
    return SandboxResult(status_name, returncode, stdout, stderr, wall, cpu, interpreter.sandbox_id, setup.uid)


def _remove_tree(path: str) -> None:
    """Remove the scratch directory whatever the program left in it (trees of any depth, links, closed permissions),
    never following a link and never raising into the reward (see `empty_directory`)."""
    emptied = empty_directory(path)
    with suppress(OSError):
        os.rmdir(path)
    if not emptied or os.path.lexists(path):
        logger.warning("Could not remove the sandbox scratch directory %s.", path)


def run_python(code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as a Python program with `stdin` as its standard input, under `limits` (defaults if None).

    Returns once the program and every process it started are gone; raises only when no program can be started
    at all on this machine (see `isolation()`).
    """
    if not isinstance(code, str) or not isinstance(stdin, str):
        raise TypeError(f"code and stdin must be strings, got {type(code).__name__} and {type(stdin).__name__}.")
    limits = limits or SandboxLimits()
    if limits.isolation == "sandbox_fusion":
        return sandbox_fusion.run_case(code, stdin, limits)
    return _run(code, stdin, limits, _isolation(limits.isolation).plan)


def _check_workers(max_workers: int) -> None:
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}.")


def run_many(
    jobs: Sequence[tuple[str, str]], limits: SandboxLimits | None = None, max_workers: int = 4
) -> list[SandboxResult]:
    """Run (code, stdin) jobs, `max_workers` at a time, and return their results in the order of `jobs`.

    Threads suffice: each only waits on its subprocess, so the GIL is not the bottleneck.
    """
    _check_workers(max_workers)
    limits = limits or SandboxLimits()
    if not jobs:
        return []
    if limits.isolation != "sandbox_fusion":
        _isolation(limits.isolation)  # probe once, before the threads race for it
    with ThreadPoolExecutor(max_workers=min(max_workers, len(jobs)), thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda job: run_python(job[0], job[1], limits), jobs))


# ---------------------------------------------------------------------------------------------------------------
# Several cases of one program in one process.


def _case_specs(cases: Sequence[CaseSpec]) -> list[tuple[str, str]]:
    specs = []
    for case in cases:
        if isinstance(case, str):
            specs.append((case, ""))
        elif isinstance(case, tuple) and len(case) == 2 and all(isinstance(part, str) for part in case):
            specs.append(case)
        else:
            raise TypeError(
                f"a case must be a stdin string or a (stdin, code_suffix) pair of strings, got {case!r:.80}."
            )
    return specs


def run_python_cases(code: str, cases: Sequence[CaseSpec], limits: SandboxLimits | None = None) -> list[SandboxResult]:
    """Run `code` once per case, all cases in one sandboxed process; one result per case, in order.

    Starting a sandboxed interpreter (and isolating and cleaning up after it) costs far more than a small program
    runs, so the interpreter starts once per CASES_PER_PROCESS cases, under the same isolation as `run_python`; a
    harness in it compiles the code once, then forks one child per case. Each child gets the case's stdin and its
    own stdout and stderr files (capped at output_kb), its own process group, a fresh RLIMIT_CPU count (the limit
    is per process) and the memory limit for itself, and runs the code, then the case's code suffix (an assert, a
    call; compiled apart from the code but numbered as if appended to it), as `__main__`, ending as an interpreter
    would (threads joined, atexit, flushed streams). After each case, at its end or at wall_s, the harness kills
    the case's processes (its group, then every process the case left), reaps them and empties the scratch
    directory, so every case starts from the harness's state before the first one: globals, modules, files in the
    working directory and processes do not carry over. Files in /tmp and /dev/shm do (see the module's docstring).

    Results come through a pipe only the harness holds: children close it before the code runs, and the harness
    makes itself undumpable, so no process of the uid can reach its descriptors or memory. What a case prints is
    never parsed. A case that kills or stops the harness counts as "killed" or "timeout" itself; the cases after
    it run in a fresh process, as do the cases after one that changes the harness's limits.

    Statuses are classified as in `run_python`, per case. Differences from one `run_python` per case: `wall_s`
    counts from the fork (the interpreter's start-up is not in it); `cpu_s` adds the reaped processes of the case;
    memory_mb includes the harness's extra modules (about 1.5 MiB of address space); the cases of one process share
    the hash seed and the dedicated uid; at a case's end only the program's own globals are finalized (not every
    module); and the code and a suffix are compiled separately, so a suffix cannot complete a statement the code
    leaves open. Where programs run as the trainer's
    own uid (no dedicated uid), the trainer's descriptors of the other cases' files are as reachable through /proc
    as the trainer's memory already is (a process of the same uid).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, got {type(code).__name__}.")
    limits = limits or SandboxLimits()
    if limits.isolation == "sandbox_fusion":
        return sandbox_fusion.run_cases([(code, _case_specs(cases))], limits, max_workers=1)[0]
    return _run_cases(code, _case_specs(cases), limits, _isolation(limits.isolation).plan)


def run_many_cases(
    jobs: Sequence[tuple[str, Sequence[CaseSpec]]], limits: SandboxLimits | None = None, max_workers: int = 4
) -> list[list[SandboxResult]]:
    """`run_python_cases` for each (code, cases) job, `max_workers` processes at a time; results in job order."""
    _check_workers(max_workers)
    limits = limits or SandboxLimits()
    specs = [(code, _case_specs(cases)) for code, cases in jobs]
    if not any(cases for _, cases in specs):
        return [[] for _ in specs]
    if limits.isolation == "sandbox_fusion":
        return sandbox_fusion.run_cases(specs, limits, max_workers)
    plan = _isolation(limits.isolation).plan  # probe once, before the threads race for it
    chunks = [
        (index, code, cases[start : start + CASES_PER_PROCESS])
        for index, (code, cases) in enumerate(specs)
        for start in range(0, len(cases), CASES_PER_PROCESS)
    ]
    results: list[list[SandboxResult]] = [[] for _ in specs]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(chunks)), thread_name_prefix="sandbox") as pool:
        for (index, _, _), chunk_results in zip(
            chunks, pool.map(lambda chunk: _run_cases(chunk[1], chunk[2], limits, plan), chunks)
        ):
            results[index].extend(chunk_results)
    return results


_HARNESS_REFUSED = threading.Event()
"""Set when a harness could not protect its result pipe (prctl refused): cases then run one process each."""


def _run_cases(code: str, cases: list[tuple[str, str]], limits: SandboxLimits, plan: _Plan) -> list[SandboxResult]:
    """All `cases`, CASES_PER_PROCESS per process; a process that stops early leaves the rest to a fresh one."""
    results: list[SandboxResult] = []
    while len(results) < len(cases):
        if _HARNESS_REFUSED.is_set():
            results.extend(_run(code + suffix, stdin, limits, plan) for stdin, suffix in cases[len(results) :])
            break
        results.extend(_run_harness(code, cases[len(results) : len(results) + CASES_PER_PROCESS], limits, plan))
    return results


def _run_harness(code: str, cases: list[tuple[str, str]], limits: SandboxLimits, plan: _Plan) -> list[SandboxResult]:
    """One harness process under `plan`, in its own workspace."""
    with _workspace(limits, plan, harness=True) as (scratch, setup, cgroup):
        return _run_harness_in(scratch, code, cases, limits, setup, cgroup)


@dataclass
class _Watch:
    """What the trainer learned from the harness's result pipe."""

    reports: list[tuple[int, bool, float, float]]
    """(returncode, timed out, wall seconds, CPU seconds) of each finished case, in order."""
    running_since: float | None = None
    """When the case after the reported ones started (trainer's clock), if it did and did not finish."""
    stalled: bool = False
    """The harness missed a deadline (a case or its start-up took wall_s + HARNESS_GRACE_S) and was killed."""
    refused: str = ""
    """The harness could not protect its result pipe, and ran nothing."""


def _watch(read_end: int, count: int, wall_s: float) -> _Watch:
    """Read the harness's records until it closes the pipe or misses a deadline.

    Records, in this order only: "S i" (case i starts), "D i returncode timed_out wall cpu" (case i ended), or
    "U reason" alone. Each must come within wall_s + HARNESS_GRACE_S of the previous one (or of the start).
    """
    watch = _Watch(reports=[])
    budget = wall_s + HARNESS_GRACE_S
    deadline = time.monotonic() + budget
    poller = select.poll()
    poller.register(read_end, select.POLLIN)
    pending = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            watch.stalled = True
            return watch
        if not poller.poll(math.ceil(remaining * 1000)):
            continue
        chunk = os.read(read_end, 65536)
        if not chunk:
            return watch
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            fields = line.decode("ascii", "replace").split()
            index = len(watch.reports)
            try:
                if fields[0] == "U" and index == 0 and watch.running_since is None:
                    watch.refused = line.decode("utf-8", "replace")[2:]
                    return watch
                if fields[0] == "S" and len(fields) == 2 and int(fields[1]) == index < count:
                    if watch.running_since is not None:
                        raise ValueError("two starts")
                    watch.running_since = time.monotonic()
                elif fields[0] == "D" and len(fields) == 6 and int(fields[1]) == index:
                    if watch.running_since is None:
                        raise ValueError("an end without a start")
                    watch.reports.append((int(fields[2]), fields[3] == "1", float(fields[4]), float(fields[5])))
                    watch.running_since = None
                else:
                    raise ValueError("unexpected record")
            except (IndexError, ValueError) as error:
                logger.warning("Sandbox harness sent %r (%s); its process is stopped.", line[:200], error)
                return watch
            deadline = time.monotonic() + budget


def _run_harness_in(
    scratch: str,
    code: str,
    cases: list[tuple[str, str]],
    limits: SandboxLimits,
    setup: _ChildSetup,
    cgroup: cgroups.RunCgroup | None = None,
) -> list[SandboxResult]:
    """Run the harness on `cases`; results of a non-empty prefix of them (the rest is for a fresh process)."""
    with ExitStack() as stack:
        # Unlinked files, as in _run_in: the program sees an empty scratch directory, and they are the trainer's
        # (owned by it, mode 0600), reachable only through the descriptors the harness hands each case.
        files = [[stack.enter_context(tempfile.TemporaryFile(dir=scratch)) for _ in range(3)] for _ in cases]
        log = stack.enter_context(tempfile.TemporaryFile(dir=scratch))  # the harness's own stdout and stderr
        for (stdin_file, _, _), (stdin, _) in zip(files, cases):
            stdin_file.write(stdin.encode("utf-8"))
            stdin_file.seek(0)
        read_end, write_end = os.pipe()
        stack.callback(os.close, read_end)
        descriptors = [tuple(file.fileno() for file in case_files) for case_files in files]
        manifest = (float(limits.wall_s), write_end, [(*fds, suffix) for fds, (_, suffix) in zip(descriptors, cases)])
        with open(os.path.join(scratch, MANIFEST_NAME), "wb") as manifest_file:
            manifest_file.write(marshal.dumps(manifest))
        try:
            pass_fds = (write_end, *(fd for fds in descriptors for fd in fds))
            interpreter = _start_interpreter(
                scratch, code, setup, subprocess.DEVNULL, (log, log), (MANIFEST_NAME,), pass_fds
            )
        finally:
            os.close(write_end)  # the harness holds the only write end: end of file means it is gone
        watch = _Watch(reports=[], stalled=True)
        try:
            watch = _watch(read_end, len(cases), limits.wall_s)
            if not watch.stalled:
                wait_for_exit(interpreter.process.pid, HARNESS_GRACE_S)
        finally:
            returncode, _, ended = interpreter.end(setup.uid, cgroup)
            returncode = _program_exit_code(setup, returncode)
        oom = cgroup is not None and cgroup.oom_kills() > 0
        harness_log, _ = _read_tail(log, STDERR_TAIL_BYTES)
        if harness_log.strip():
            logger.warning(
                "Sandbox harness %s (exit %d) wrote: %s", interpreter.sandbox_id, returncode, harness_log[-2000:]
            )
        if watch.refused:
            logger.warning(
                "Sandbox harness cannot protect its results here (%s): one process per case.", watch.refused
            )
            _HARNESS_REFUSED.set()
            return []
        results = []
        for case_files, report in zip(files, [*watch.reports, None]):
            stdout, stdout_size = _read_head(case_files[1], limits.output_kb * 1024)
            stderr, stderr_size = _read_tail(case_files[2], STDERR_TAIL_BYTES)
            largest = max(stdout_size, stderr_size)
            if report is not None:
                case_returncode, timed_out, wall, cpu = report
                status_name = _classify(timed_out, case_returncode, cpu, limits, largest, stderr, oom)
            elif watch.running_since is not None or not watch.reports:
                # The harness died, was stopped or missed its deadline during this case (or before the first):
                # the case is charged with what ended the process, and never passes.
                case_returncode, cpu = returncode, 0.0
                wall = ended - (interpreter.start if watch.running_since is None else watch.running_since)
                status_name = _classify(watch.stalled, returncode, cpu, limits, largest, stderr, oom)
                status_name = "error" if status_name == "ok" else status_name
            else:
                break
            results.append(
                SandboxResult(
                    status_name, case_returncode, stdout, stderr, wall, cpu, interpreter.sandbox_id, setup.uid
                )
            )
    return results
