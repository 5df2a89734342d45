# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The bubblewrap (`bwrap`) command line a sandboxed program starts under: what it can see and which namespaces.

Its own root holds, read-only, only the system's /usr (with /bin, /lib, /lib64, /sbin), the base interpreter and its
standard library (site-packages covered) and its scratch folder (at SCRATCH); plus a working directory, /tmp and
/dev/shm of its own (capped tmpfs), a minimal /dev and its PID namespace's /proc. It runs as an unprivileged uid in
new PID, network (empty), IPC, UTS and cgroup namespaces (and a user namespace when the trainer is not root), dies
with its parent and has no controlling terminal. No dataset, project, home or host process is visible.
"""

import functools
import os
import shutil
import sys
import sysconfig

from verl.rewards.sandbox import bootstrap


SYSTEM_DIRECTORIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
UID = 65534
"""The uid and gid the program has inside its user namespace ("nobody")."""
WORKDIR = "/work"
"""The program's working directory: a tmpfs capped like /tmp (the scratch folder it starts in is read-only)."""
SCRATCH = "/run/verl-scratch"
"""Where the run's scratch folder is mounted, whatever its host path (one under WORKDIR would make bwrap put its
parents in the WORKDIR tmpfs, which the harness must find empty)."""
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install bubblewrap; "
    "conda: conda install -c conda-forge bubblewrap); a trainer that is not root also needs unprivileged user "
    "namespaces (sysctl kernel.unprivileged_userns_clone=1 where that exists, user.max_user_namespaces > 0, and on "
    "Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)"
)


MASKED_PROC_FILES = (
    *("/proc/stat", "/proc/meminfo", "/proc/vmstat", "/proc/loadavg", "/proc/diskstats", "/proc/interrupts"),
    *("/proc/softirqs", "/proc/locks", "/proc/zoneinfo", "/proc/buddyinfo", "/proc/schedstat", "/proc/slabinfo"),
    *("/proc/pagetypeinfo", "/proc/timer_list", "/proc/kallsyms", "/proc/keys", "/proc/sched_debug"),
)
"""Machine-wide /proc files a run sees as empty (/dev/null over them)."""
MASKED_PROC_FOLDERS = ("/proc/pressure", "/proc/irq", "/proc/bus", "/proc/acpi", "/proc/scsi")
"""Machine-wide /proc folders a run sees empty (a read-only tmpfs)."""


def executable() -> str | None:
    """The bwrap on PATH (or $VERL_BWRAP), or None."""
    configured = os.environ.get("VERL_BWRAP")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("bwrap")


@functools.cache
def interpreter() -> str:
    """The base interpreter (never a virtual environment's, whose packages the program must not see)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _inside(path: str, directories: list[str]) -> bool:
    return any(path == parent or path.startswith(parent.rstrip("/") + "/") for parent in directories)


@functools.cache
def _layout() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(read-only binds, (link, target) pairs flattened, site-packages folders to cover), decided once."""
    binds: list[str] = []
    links: list[str] = []
    for path in SYSTEM_DIRECTORIES:
        if os.path.islink(path):
            links += [os.readlink(path), path]
        elif os.path.isdir(path):
            binds.append(path)
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    prefixes.add(os.path.dirname(interpreter()))
    for path in sorted(prefixes, key=len):
        if not _inside(path, binds):
            binds.append(path)
    covered = []
    scheme_vars = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    for key in ("purelib", "platlib"):
        site = os.path.realpath(sysconfig.get_path(key, vars=scheme_vars))
        if os.path.isdir(site) and site not in covered:
            covered.append(site)
    return tuple(binds), tuple(links), tuple(covered)


def command(bwrap: str, scratch: str, privileged: bool, tmpfs_bytes: int, seccomp_fd: int | None = None) -> list[str]:
    """bwrap and its options up to "--"; append the interpreter and its arguments.

    `privileged` (a root trainer): the bootstrap then becomes the run's dedicated host uid, so RLIMIT_NPROC counts
    the run's processes and its files belong to it; otherwise a user namespace maps nobody to the trainer's uid,
    without capabilities. /tmp and /dev/shm are capped at `tmpfs_bytes`. `seccomp_fd`: where bwrap reads the
    seccomp filter (seccomp.py) it installs just before the interpreter starts.
    """
    binds, links, covered = _layout()
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not privileged:
        argv += ["--unshare-user", "--disable-userns", "--uid", str(UID), "--gid", str(UID), "--cap-drop", "ALL"]
    argv += ["--hostname", "sandbox", "--die-with-parent", "--new-session", "--unsetenv", "PWD"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    made = {"/"}

    def parents(path: str) -> list[str]:  # folders bwrap would otherwise make private (0700) in privileged mode
        options = []
        parts = path.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:depth])
            if folder not in made:
                made.add(folder)
                options += ["--perms", "0755", "--dir", folder]
        return options

    for path in binds:
        argv += [*parents(path), "--ro-bind", path, path]
        made.add(path)
    for index in range(0, len(links), 2):
        argv += ["--symlink", links[index], links[index + 1]]
    for path in covered:
        argv += ["--tmpfs", path, "--remount-ro", path]
    # /proc/sys hidden: its machine-wide counters are a channel between runs. No ptys: they count against a
    # machine-wide limit (kernel/pty/max) no cgroup charges.
    argv += ["--proc", "/proc", "--tmpfs", "/proc/sys", "--remount-ro", "/proc/sys", "--dev", "/dev"]
    argv += ["--ro-bind", "/dev/null", "/dev/pts/ptmx"]
    # so are the other machine-wide counters (runc's masked paths): a run that forks 1,234 times showed in a
    # concurrent run's /proc/stat, a number a wrong sample could read from a correct sibling
    for path in MASKED_PROC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in MASKED_PROC_FOLDERS:
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
    for path in (*bootstrap.TMPFS, WORKDIR):
        argv += ["--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", path]
        made.add(path)
    # The scratch folder (program, harness instructions) is read-only: writes land in WORKDIR's tmpfs, which the
    # run's cgroup counts, not on disk.
    argv += [*parents(SCRATCH), "--ro-bind", scratch, SCRATCH, "--chdir", SCRATCH, "--setenv", "VERL_SANDBOX_WORKDIR"]
    argv += [WORKDIR, "--"]
    return argv
