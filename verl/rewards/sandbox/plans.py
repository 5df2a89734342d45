# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""How runs are isolated on this machine: the candidate plans, and what a run's first process does between fork
and exec (cgroup, niceness, namespaces, rlimits, uid), in the built-in mode or before bwrap starts."""

import ctypes
import os
import resource
import stat
import sys
from dataclasses import dataclass
from typing import Any

from verl.rewards.sandbox import bwrap, seccomp
from verl.rewards.sandbox.limits import SandboxUnavailable


_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_UNPRIVILEGED_UNSHARE = tuple(
    _CLONE_NEWUSER | _CLONE_NEWNS | flags for flags in (_CLONE_NEWNET | _CLONE_NEWPID, _CLONE_NEWNET)
)
_PTMX = tuple(
    dict.fromkeys(os.fsencode(os.path.realpath(p)) for p in ("/dev/ptmx", "/dev/pts/ptmx") if os.path.exists(p))
)
"""Where a pty is opened on this machine (each counts against kernel/pty/max, which no cgroup charges)."""


def _load_libc() -> tuple[Any, Any, Any]:
    """libc's unshare, mount and prctl, looked up once here: the child may not load anything between fork and exec."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        unshare, mount, prctl = libc.unshare, libc.mount, libc.prctl
    except (OSError, AttributeError):  # not Linux
        return None, None, None
    unshare.argtypes, unshare.restype = [ctypes.c_int], ctypes.c_int
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    mount.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return unshare, mount, prctl


_UNSHARE, _MOUNT, _PRCTL = _load_libc()

SECCOMP_FILTER = seccomp.program()
"""The filter every sandboxed interpreter starts under (seccomp.py); b"" on a machine it has no filter for."""


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


# The filter as struct sock_fprog, made once here (the child may not allocate).
_FILTER_BUFFER = ctypes.create_string_buffer(SECCOMP_FILTER, len(SECCOMP_FILTER))
_FPROG = _SockFprog(len(SECCOMP_FILTER) // 8, ctypes.addressof(_FILTER_BUFFER))
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


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

    It runs in a fork of a possibly multi-threaded trainer (any lock may be held), so it only makes system calls:
    no imports, no logging. Order matters: root-only namespaces (NEWNET, NEWPID, NEWNS and its mounts) come before
    dropping to the dedicated uid, an unprivileged user namespace after it (outside the initial user namespace a
    process can no longer switch uid); RLIMIT_NPROC comes last, so a user namespace gives the run its own budget.
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
    """The run's cgroup.procs files, joined first."""
    tmpfs_bytes: int = 0
    """Under bwrap: the size of the run's private /tmp and of its /dev/shm."""
    tmpfs_inodes: int = 0
    """Under bwrap as root without a cgroup (which would charge them): inodes per private tmpfs, set by the
    bootstrap's remount (bwrap has no such option)."""
    open_files: int = 0
    """RLIMIT_NOFILE, set by the bootstrap just before the program's code (the harness needs more descriptors)."""

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
            self._cover(reexpose=True)
        for which, soft, hard in self.rlimits:
            resource.setrlimit(which, (soft, hard))
        if self.uid is not None and not self.bwrap:  # under bwrap the bootstrap drops to the uid, once inside
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)
        if not done & _CLONE_NEWNET:
            unshared = self._unshare(self.unprivileged_unshare)
            if unshared & _CLONE_NEWNS:
                self._cover(reexpose=False)
            done |= unshared
        own_budget = self.uid is not None or bool(done & _CLONE_NEWUSER)
        # the supervisor and the namespace's init, or bwrap and its init
        nproc = self.max_processes + (2 if done & _CLONE_NEWPID or self.bwrap else 0)
        nproc += 0 if own_budget else self.shared_tasks
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        if hard != resource.RLIM_INFINITY:
            nproc = min(nproc, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if not self.bwrap and _PRCTL is not None and SECCOMP_FILTER:  # under bwrap, bwrap installs the filter
            no_new_privileges = _PRCTL(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            if no_new_privileges or _PRCTL(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(_FPROG), 0, 0):
                raise OSError(ctypes.get_errno(), "prctl refused the sandbox's seccomp filter")

    @staticmethod
    def _unshare(candidates: tuple[int, ...]) -> int:
        """The first flag set of `candidates` that unshare accepts (0 if none)."""
        if _UNSHARE is None:
            return 0
        for flags in candidates:
            if _UNSHARE(flags) == 0:
                return flags
        return 0

    def _cover(self, reexpose: bool) -> None:
        """As bwrap does, in the run's mount namespace: hide /proc/sys (machine-wide counters: a channel between
        runs) and bind /dev/null over the pty multiplexers (ptys count against a machine-wide limit); with
        `reexpose`, cover each directory the uid cannot enter with a tmpfs holding only the interpreter."""
        _mount(None, b"/", None, _MS_REC | _MS_PRIVATE)  # nothing below may propagate to the host
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        _mount(b"tmpfs", b"/proc/sys", b"tmpfs", flags | _MS_RDONLY, b"size=4k")
        for path in _PTMX:
            _mount(b"/dev/null", path, None, _MS_BIND)
        for hidden, paths in self.reexpose if reexpose else ():
            handles = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in paths]  # reachable once covered
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
        # as root, bwrap makes the namespaces and the bootstrap then becomes a dedicated uid (bwrap.command)
        return [_Plan(dedicated_uid=os.geteuid() == 0, unprivileged_unshare=(), bwrap=found)]
    if os.geteuid() != 0:
        return [_Plan(dedicated_uid=False)]
    privileged = (_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID, _CLONE_NEWNS | _CLONE_NEWNET)
    return [_Plan(True, privileged, _UNPRIVILEGED_UNSHARE, _hidden_directories()), _Plan(dedicated_uid=False)]
