# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What a sandbox run is given and gives back, shared by the local sandbox (runner.py, harness.py) and the
remote backend (fusion.py): the limits, the result, the statuses, and the error when no program can run."""

import math
from dataclasses import dataclass, fields


STATUSES = ("ok", "error", "timeout", "cpu_limit", "memory_limit", "output_limit", "process_limit", "killed")
STDERR_TAIL_BYTES = 16 * 1024
"""How much of the end of stderr a result keeps: the traceback is at the end."""
ISOLATION_MODES = {
    "bwrap": "bubblewrap: own root (read-only system and interpreter, private /tmp and /dev/shm), user, PID, network, "
    "IPC, UTS namespaces",
    "namespaces": "weaker: the host's filesystem is readable; dedicated uid, network and PID namespaces where available",
    "sandbox_fusion": "remote: a Sandbox Fusion service runs each case (its own isolation and limits)",
}


@dataclass
class SandboxLimits:
    """Limits of one run; every value must be positive."""

    wall_s: float = 10.0
    """Seconds the run may take before it is killed ("timeout"), not counting what it lost waiting for a CPU while
    other processes kept the cores busy (its processes' run-queue delay, at most its wall time less its CPU time), up
    to 4 x wall_s of wall time (bootstrap.WAIT_CAP) and not past wall_s seconds of CPU."""
    cpu_s: float = 5.0
    """CPU seconds per process (RLIMIT_CPU, rounded up to whole seconds): SIGXCPU, then SIGKILL a second later."""
    memory_mb: int = 1024
    """Address space per process (RLIMIT_AS), in MiB."""
    output_kb: int = 1024
    """Largest stdout, stderr or other file the program may write (RLIMIT_FSIZE), in KiB."""
    max_processes: int = 16
    """Processes and threads the program may have at once, itself included (RLIMIT_NPROC)."""
    nice: int = 10
    """Niceness added to the program's (1 to 19), so sandboxed programs yield the CPU to the trainer."""
    isolation: str = "bwrap"
    """One of ISOLATION_MODES. "bwrap" is refused, with instructions, where bwrap or user namespaces are missing;
    under "namespaces" the program can read the host's world-readable files."""
    endpoint: str = ""
    """isolation="sandbox_fusion": the service's base URL (http://host:port), to which /run_code is posted."""
    sample_wall_s: float = 20.0
    """Seconds all cases of one program may take together, counted as wall_s is: each case gets what is left (at most
    wall_s), and cases left once it is spent time out unrun. Bounds a sample's cost whatever its case count; not applied by
    sandbox_fusion. A wall_s above it is never reached by a case (run_python_cases logs a warning); a single run
    (run_python) has only wall_s."""
    max_open_files: int = 64
    """RLIMIT_NOFILE of each of the program's processes (set just before its code runs). It also bounds what a run
    can queue in AF_UNIX sockets where no cgroup charges it: one default socket buffer per descriptor, as seccomp
    refuses raising SO_SNDBUF/SO_RCVBUF."""

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(
                f"SandboxLimits.isolation must be one of {sorted(ISOLATION_MODES)}, got {self.isolation!r}."
            )
        remote = self.isolation == "sandbox_fusion"
        if remote != bool(self.endpoint) or (remote and not self.endpoint.startswith(("http://", "https://"))):
            raise ValueError(
                "SandboxLimits.endpoint must be the http(s):// URL of the Sandbox Fusion service with "
                f"isolation='sandbox_fusion', and empty otherwise; got isolation={self.isolation!r}, "
                f"endpoint={self.endpoint!r}."
            )
        for spec in fields(self):
            if spec.name in ("isolation", "endpoint"):
                continue
            value = getattr(self, spec.name)
            whole = spec.name in ("memory_mb", "output_kb", "max_processes", "max_open_files", "nice")
            kind = (int,) if whole else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"SandboxLimits.{spec.name} must be a positive {'integer' if whole else 'number'}, got {value!r}."
                )
        if self.nice > 19:
            raise ValueError(f"SandboxLimits.nice must be from 1 to 19, got {self.nice!r}.")


@dataclass
class SandboxResult:
    """What one run did."""

    status: str
    """One of STATUSES: "ok" (exit 0), "error" (nonzero exit, exception, crash), "timeout" (wall clock), "cpu_limit",
    "memory_limit", "output_limit", "process_limit", or "killed" (a signal no limit explains)."""
    returncode: int
    """Exit code, or minus the signal number that ended the run."""
    stdout_bytes: bytes
    """At most output_kb KiB of stdout, as bytes (smaller than a str of non-ASCII text; `stdout` decodes it)."""
    stderr: str
    """The last STDERR_TAIL_BYTES of stderr."""
    wall_s: float
    """Seconds from start until the run ended or was killed."""
    cpu_s: float = 0.0
    """CPU seconds the run's processes used (those that were reaped)."""
    sandbox_id: str = ""
    """The run's marker, the value of VERL_SANDBOX_ID in its processes' environment."""
    uid: int | None = None
    """The dedicated uid the run used, or None when it ran as the trainer's uid."""

    @property
    def stdout(self) -> str:
        """stdout_bytes decoded as UTF-8 (invalid bytes replaced), on each access."""
        return self.stdout_bytes.decode("utf-8", "replace")


class SandboxUnavailable(RuntimeError):
    """No program can be run here with the isolation asked for; the message says how to get it."""
