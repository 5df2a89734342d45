# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One sandboxed run (`run_python`, `run_many`): its workspace (uid slot, cgroup, scratch directory), the interpreter
under bwrap or the built-in namespaces, its end (every process it started killed) and its status; and the isolation
probe that picks the plan."""

import contextlib
import json
import logging
import math
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from verl.rewards.sandbox import bootstrap, bwrap, cgroups, fusion
from verl.rewards.sandbox.bootstrap import WAIT_CAP, CpuWait, _namespace, empty_directory, kill_group, wait_for_exit
from verl.rewards.sandbox.limits import STDERR_TAIL_BYTES, SandboxLimits, SandboxResult, SandboxUnavailable
from verl.rewards.sandbox.plans import SECCOMP_FILTER, _candidate_plans, _ChildSetup, _Plan
from verl.rewards.sandbox.slots import _SLOTS, UID_BASE, _kill_all_of_uid, _tasks_of_current_uid


logger = logging.getLogger(__name__)


MARKER_ENV = "VERL_SANDBOX_ID"
"""Environment variable carried by every process of a run: how cleanup finds processes that left its session."""

PROGRAM_NAME = "solution.py"

CGROUP_OVERHEAD_MB = 64
"""Memory a run's cgroup allows beyond memory_mb, for the sandbox's own processes (bwrap, the harness)."""
SLOT_WAIT_CAP = 2
"""As root, a run waits for a free uid slot at most this many times the longest a run with its limits may hold one
(WAIT_CAP x the larger of wall_s and sample_wall_s), then raises SandboxUnavailable: slots that stay busy so long
are leaked (see slots._Slots.claim), and training stops rather than wait forever."""
TMPFS_INODES_PER_MB = 64
"""Inodes of each private tmpfs per MiB of memory_mb, where no cgroup charges them (each costs kernel memory)."""

# A signal from a crash of the program itself is a runtime error; any other unexplained signal is "killed".
_CRASH_SIGNALS = frozenset(
    signal.Signals[name] for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGSYS", "SIGTRAP")
)
_MEMORY_ERRORS = re.compile(r"\bMemoryError\b|Cannot allocate memory|\[Errno 12\]|std::bad_alloc")
_PROCESS_ERRORS = re.compile(r"BlockingIOError: \[Errno 11\]|Resource temporarily unavailable|can't start new thread")

_BOOTSTRAP = Path(bootstrap.__file__).read_text(encoding="utf-8")  # the child's first code (bootstrap.py)

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
    limits = (
        f"cgroup {cgroups.available()} per run"
        if cgroups.available()
        else f"per process (no writable cgroup: {cgroups.unavailable_reason()})"
    )
    calls = "seccomp filter" if SECCOMP_FILTER else f"none (no seccomp filter for {platform.machine()})"
    if plan.bwrap:
        return {
            "network": "netns",
            "user": "dedicated-uid" if plan.dedicated_uid else "user-namespace",
            "processes": "pid-namespace",
            "filesystem": "bwrap",
            "limits": limits,
            "system calls": calls,
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
    return {
        "network": network,
        "user": user,
        "processes": processes,
        "filesystem": "host",
        "limits": limits,
        "system calls": calls,
    }


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
            weaker = not cgroups.available() or not SECCOMP_FILTER  # no run totals, or no system-call filter
            logger.log(
                logging.WARNING if weaker else logging.INFO,
                "Code sandbox isolation: %s.",
                ", ".join(f"{k} {v}" for k, v in chosen.report.items()),
            )
            if chosen.plan.reexpose and chosen.plan.dedicated_uid:
                logger.info(
                    "Code sandbox: %s cannot be entered by other users, so runs see it as an empty directory "
                    "holding only the interpreter (%s).",
                    ", ".join(hidden for hidden, _ in chosen.plan.reexpose),
                    ", ".join(path for _, paths in chosen.plan.reexpose for path in paths),
                )
            if not chosen.plan.dedicated_uid and not chosen.plan.bwrap and os.geteuid() != 0:
                logger.warning(
                    "The code sandbox (isolation=namespaces) runs programs as the trainer's own user: they can read "
                    "and write every file it can (keys, checkpoints, the dataset)%s. Use isolation=bwrap where "
                    "bubblewrap can run.",
                    "" if chosen.report["processes"] == "pid-namespace" else " and signal its processes",
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
    """The isolation runs of `mode` get here: {"network", "user", "processes", "filesystem", "limits"}, probed once
    with the strongest plan that works; SandboxUnavailable (saying what to install or allow) when none does."""
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
    status_fd: int | None = None
    """Where the bootstrap writes the program's wait status (bootstrap.STATUS_FD_ENV), when it relays one."""

    def end(
        self, setup: _ChildSetup, cgroup: cgroups.RunCgroup | None = None
    ) -> tuple[int, resource.struct_rusage, float]:
        """Kill the interpreter's group, reap it, then kill every process the run left (by cgroup, else the run's uid
        or marker); returns the program's exit code, resource usage and reaping time.

        bwrap reports death by signal N as exit code 128 + N, as a program may exit by itself: where the bootstrap
        relays the program's wait status (`status_fd`) that status decides, and without one (the program killed its
        relay) the code stands as an exit code; a harness's 128 + N (it never exits so) is read back as -N."""
        kill_group(self.process.pid)  # before reaping, while the group id cannot have been reused
        if cgroup is not None:
            cgroup.kill_all()
        _, status, usage = os.wait4(self.process.pid, 0)
        reaped = time.monotonic()
        self.process.returncode = returncode = os.waitstatus_to_exitcode(status)
        if cgroup is None or not cgroup.kill_all():
            _clean_up(self.sandbox_id, setup.uid, self.since)
        if self.status_fd is not None:
            relayed = _read_status(self.status_fd)
            if relayed is not None:
                returncode = relayed
        elif setup.bwrap and 128 < returncode < 128 + signal.NSIG:
            returncode = 128 - returncode
        return returncode, usage, reaped


def _read_status(fd: int) -> int | None:
    """The exit code in the wait status the bootstrap relayed on `fd` (closed here), or None where none came."""
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, 64)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    try:
        return os.waitstatus_to_exitcode(int(data))
    except ValueError:
        return None


def _start_interpreter(
    scratch: str,
    code: str,
    setup: _ChildSetup,
    stdin: int | IO[bytes],
    output: tuple[IO[bytes], IO[bytes]],
    manifest: tuple[str, ...] = (),
    pass_fds: tuple[int, ...] = (),
) -> _Interpreter:
    """Write `code` into the scratch directory and start the sandboxed interpreter on it through the bootstrap (as
    the harness, given a manifest), in a session of its own, set up by `setup`. Under bwrap without a manifest the
    bootstrap relays the program's wait status (`_Interpreter.status_fd`)."""
    sandbox_id = uuid.uuid4().hex
    with open(os.path.join(scratch, PROGRAM_NAME), "w", encoding="utf-8") as program:
        program.write(code)
    home = bwrap.WORKDIR if setup.bwrap else scratch  # under bwrap: a tmpfs counted in the run's memory
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home}
    env[MARKER_ENV] = sandbox_id
    if setup.open_files:
        env[bootstrap.OPEN_FILES_ENV] = str(setup.open_files)
    if setup.tmpfs_inodes:
        env[bootstrap.TMPFS_INODES_ENV] = str(setup.tmpfs_inodes)
    filter_fd = status_write = status_read = None
    if setup.bwrap and not manifest:
        status_read, status_write = os.pipe()
        env[bootstrap.STATUS_FD_ENV] = str(status_write)
        pass_fds = (*pass_fds, status_write)
    if setup.bwrap:  # a user of its own in its own PID namespace: the harness may kill(-1)
        privileged = setup.uid is not None
        if SECCOMP_FILTER:  # bwrap reads the filter from a pipe and installs it just before the interpreter starts
            filter_fd, write_end = os.pipe()
            os.write(write_end, SECCOMP_FILTER)
            os.close(write_end)
            pass_fds = (*pass_fds, filter_fd)
        command = [*bwrap.command(setup.bwrap, scratch, privileged, setup.tmpfs_bytes, filter_fd), bwrap.interpreter()]
        user = f"u{setup.uid}" if privileged else "0"
    else:
        command, user = [sys.executable], "1" if setup.uid is None else "0"  # "1": the uid is shared
    args = [*command, "-I", "-c", _BOOTSTRAP, _namespace("net"), PROGRAM_NAME, user, *manifest]
    since = time.time() - 5.0  # psutil's create_time may be off by a second (boot time in whole seconds)
    start = time.monotonic()
    try:
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
    except BaseException:
        if status_read is not None:
            os.close(status_read)
        raise
    finally:
        for fd in (filter_fd, status_write):
            if fd is not None:
                os.close(fd)
    return _Interpreter(process, sandbox_id, since, start, status_read)


def read_only_copy(file: IO[bytes]) -> int:
    """A new read-only descriptor of `file`, at its start: a program's stdin, so it cannot write the trainer's file."""
    return os.open(f"/proc/self/fd/{file.fileno()}", os.O_RDONLY | os.O_CLOEXEC)


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
    """The child's setup; with `harness`, one more process in the budget (the harness, or under bwrap the bootstrap
    that relays a single program's status), so the program gets the same."""
    cpu_soft = max(1, math.ceil(limits.cpu_s))
    cpu_soft, cpu_hard = _limit(resource.RLIMIT_CPU, cpu_soft)[0], _limit(resource.RLIMIT_CPU, cpu_soft + 1)[1]
    inodes_uncharged = bool(plan.bwrap) and uid is not None and cgroup is None  # the bootstrap is root: it remounts
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
        open_files=_limit(resource.RLIMIT_NOFILE, limits.max_open_files)[0],
        tmpfs_inodes=limits.memory_mb * TMPFS_INODES_PER_MB if inodes_uncharged else 0,
    )


@contextlib.contextmanager
def _workspace(
    limits: SandboxLimits, plan: _Plan, harness: bool = False
) -> Iterator[tuple[str, _ChildSetup, cgroups.RunCgroup | None]]:
    """A uid slot (with a dedicated uid), a cgroup (where possible) and a scratch directory, always given back."""
    slot = scratch = cgroup = None
    try:
        if plan.dedicated_uid:
            slot = _SLOTS.claim(SLOT_WAIT_CAP * WAIT_CAP * max(limits.wall_s, limits.sample_wall_s))
        uid = None if slot is None else UID_BASE + slot
        if cgroups.available():
            # the program, its children, bwrap and its init (2), and the harness or status relay when there is one
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
    # Unlinked files: the program sees an empty scratch directory, and a full pipe can never block it.
    with (
        _workspace(limits, plan, harness=bool(plan.bwrap)) as (scratch, setup, cgroup),
        tempfile.TemporaryFile(dir=scratch) as stdin_file,
        tempfile.TemporaryFile(dir=scratch) as stdout_file,
        tempfile.TemporaryFile(dir=scratch) as stderr_file,
    ):
        stdin_file.write(stdin.encode("utf-8"))
        stdin_file.flush()
        read_only = read_only_copy(stdin_file)
        try:
            interpreter = _start_interpreter(scratch, code, setup, read_only, (stdout_file, stderr_file))
        finally:
            os.close(read_only)
        timed_out = True
        try:
            pid = interpreter.process.pid
            timed_out = not wait_for_exit(pid, limits.wall_s, CpuWait(lambda: [pid]))
        finally:
            returncode, usage, reaped = interpreter.end(setup, cgroup)
            wall = reaped - interpreter.start
        stdout_size = os.fstat(stdout_file.fileno()).st_size
        stdout_file.seek(0)  # the program's writes moved the offset it shares with the trainer's descriptor
        stdout = stdout_file.read(limits.output_kb * 1024)
        stderr, stderr_size = _read_tail(stderr_file, STDERR_TAIL_BYTES)
        cpu = usage.ru_utime + usage.ru_stime
        if cgroup is not None:  # under bwrap the program's CPU time does not reach the trainer's rusage
            cpu = max(cpu, cgroup.cpu_seconds())
        oom = cgroup is not None and cgroup.oom_kills() > 0
    status_name = _classify(timed_out, returncode, cpu, limits, max(stdout_size, stderr_size), stderr, oom)
    return SandboxResult(status_name, returncode, stdout, stderr, wall, cpu, interpreter.sandbox_id, setup.uid)


def _remove_tree(path: str) -> None:
    """Remove the scratch directory whatever the program left there, never following links or raising."""
    emptied = empty_directory(path)
    with suppress(OSError):
        os.rmdir(path)
    if not emptied or os.path.lexists(path):
        logger.warning("Could not remove the sandbox scratch directory %s.", path)


def run_python(code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as a Python program on `stdin` under `limits` (defaults if None), once every process it started
    is gone; raises only when no program can start on this machine (see `isolation()`)."""
    if not isinstance(code, str) or not isinstance(stdin, str):
        raise TypeError(f"code and stdin must be strings, got {type(code).__name__} and {type(stdin).__name__}.")
    limits = limits or SandboxLimits()
    if limits.isolation == "sandbox_fusion":
        return fusion.run_case(code, stdin, limits)
    return _run(code, stdin, limits, _isolation(limits.isolation).plan)


def _check_workers(max_workers: int) -> None:
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}.")


def run_many(
    jobs: Sequence[tuple[str, str]], limits: SandboxLimits | None = None, max_workers: int = 4
) -> list[SandboxResult]:
    """Run (code, stdin) jobs, `max_workers` threads at a time; results in the order of `jobs`."""
    _check_workers(max_workers)
    limits = limits or SandboxLimits()
    if not jobs:
        return []
    if limits.isolation != "sandbox_fusion":
        _isolation(limits.isolation)  # probe once, before the threads race for it
    with ThreadPoolExecutor(max_workers=min(max_workers, len(jobs)), thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda job: run_python(job[0], job[1], limits), jobs))
