# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A seccomp filter for sandboxed programs, in the spirit of Docker's default profile. It refuses the calls of
channels that outlive a run or cross between concurrent runs despite private namespaces, and of kernel memory no
cgroup charges:

- Keyrings (`add_key`, `request_key`, `keyctl`): a uid's keyring outlives its processes and a named session keyring
  can be joined by another uid, so a run could hand its answers to another (Docker refuses them too).
- File locks (`flock`; `fcntl` F_GETLK/F_SETLK/F_SETLKW and F_OFD_ forms), leases (F_SETLEASE, F_GETLEASE) and
  dnotify (F_NOTIFY): they belong to the inode, and read-only system files are the same inodes in every run.
- inotify and fanotify: a watch on a shared read-only file sees another run open or read it.
- New namespaces (`unshare`, `clone` with a CLONE_NEW* flag, `setns`): an own user namespace grants capabilities,
  hence packet sockets whose ring buffers no cgroup charges. `clone3` answers ENOSYS (its flags are behind a
  pointer), so glibc falls back to `clone`.
- Sockets other than AF_UNIX: cgroup v1 does not charge the loopback's TCP buffers; AF_PACKET as above.
- Raising socket buffers (`setsockopt` SO_SNDBUF/SO_RCVBUF and FORCE forms): an AF_UNIX socket queues up to its send
  buffer, uncharged without a cgroup; at the default size RLIMIT_NOFILE bounds the total (max_open_files).
- AIO and io_uring: the AIO event budget is machine-wide (a run could starve the trainer's `io_setup`), and its
  /proc/sys counter shows other runs' use.
- `perf_event_open` (ring buffers in a per-user locked-memory budget runs share), `bpf` and `userfaultfd` (a common
  kernel-exploit step): no judged program needs them, and Docker refuses them too.
- `sysinfo`: the machine's process count, free memory and load averages (what /proc/stat, /proc/meminfo and
  /proc/loadavg, hidden, would show), whatever the namespaces: a concurrent run's processes or memory show there.
- `syslog`: the kernel log holds other runs' lines (a crash's "segfault" line names the process, whose name a
  program sets), readable where kernel.dmesg_restrict is 0; a program with CAP_SYSLOG could also clear it or change
  the console's level (Docker refuses it too).
- `fallocate` answers EOPNOTSUPP (glibc then writes, within RLIMIT_FSIZE): FALLOC_FL_KEEP_SIZE would allocate past
  the size limit on the trainer's files the program writes (its stderr).

Not refused: `statfs`/`fstatfs`, although they give the free blocks and inodes of the host filesystems a run sees
(its stderr file, the read-only system folders), which other runs' output moves: glibc's posix_fallocate emulation
(after the EOPNOTSUPP above) reads the block size with fstatfs, and honest programs call it.

The filter is classic BPF (bwrap's `--seccomp FD`, `prctl(PR_SET_SECCOMP)`): another architecture is killed (its
call numbers differ), x32 calls on x86_64 and the calls above are refused, the rest allowed. Only x86_64 and aarch64
get a filter; elsewhere `program()` returns b"" and the isolation report (a warning) says so.
"""

import errno
import platform
import struct


# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian machines only).
_NR_OFFSET, _ARCH_OFFSET = 0, 4
_ARG0_LOW_OFFSET = 16  # the low 32 bits of args[0] (clone's and unshare's flags, socket's family)
_ARG1_LOW_OFFSET = 16 + 8 * 1  # the low 32 bits of args[1] (fcntl's command, setsockopt's level)
_ARG2_LOW_OFFSET = 16 + 8 * 2  # the low 32 bits of args[2] (setsockopt's option)
# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: load the 32-bit word at offset k of seccomp_data
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: if A == k skip jt instructions, else skip jf
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: if A & k
_RET_K = 0x06  # BPF_RET | BPF_K
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_X32_SYSCALL_BIT = 0x40000000

_FCNTL_COMMANDS = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
"""fcntl's F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_GETLEASE, F_NOTIFY."""
_NEW_NAMESPACES = 0x7E020080
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME."""
_AF_UNIX = 1
_SOL_SOCKET = 1
_SOCKET_BUFFERS = (7, 8, 32, 33)
"""SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE (asm-generic, which x86_64 and aarch64 use)."""

# The system call numbers (asm/unistd.h) on (x86_64, aarch64); None where that machine has no such call.
_REFUSED = {
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "flock": (73, 32),
    "inotify_init": (253, None),
    "inotify_init1": (294, 26),
    "inotify_add_watch": (254, 27),
    "fanotify_init": (300, 262),
    "fanotify_mark": (301, 263),
    "setns": (308, 268),
    "io_setup": (206, 0),
    "io_destroy": (207, 1),
    "io_getevents": (208, 4),
    "io_submit": (209, 2),
    "io_cancel": (210, 3),
    "io_pgetevents": (333, 292),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "perf_event_open": (298, 241),
    "bpf": (321, 280),
    "userfaultfd": (323, 282),
    "sysinfo": (99, 179),
    "syslog": (103, 116),
}
_CHECKED = {
    "fcntl": (72, 25),
    "clone": (56, 220),
    "unshare": (272, 97),
    "socket": (41, 198),
    "setsockopt": (54, 208),
    "clone3": (435, 435),
    "fallocate": (285, 47),
}
_MACHINES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
"""Each supported machine's column in the tables above and its AUDIT_ARCH_*."""


def _assemble(instructions: list[tuple[int, str | int, str | int, int | str]]) -> bytes:
    """struct sock_filter[] from (code, jump-if-true, jump-if-false, k) rows; a row ("label", name) marks the next
    instruction, and a jump naming a label becomes the count of instructions skipped."""
    rows, labels = [], {}
    for row in instructions:
        if row[0] == "label":
            labels[row[1]] = len(rows)
        else:
            rows.append(row)
    packed = []
    for index, (code, if_true, if_false, k) in enumerate(rows):
        jumps = [labels[j] - index - 1 if isinstance(j, str) else j for j in (if_true, if_false)]
        if not all(0 <= jump < 256 for jump in jumps):
            raise ValueError(f"seccomp filter: jump out of range at instruction {index}.")
        packed.append(struct.pack("=HBBI", code, jumps[0], jumps[1], k))
    return b"".join(packed)


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (this one by default) as struct sock_filter[]; b"" where no filter is known."""
    machine = machine or platform.machine()
    if machine not in _MACHINES:
        return b""
    column, arch = _MACHINES[machine]
    nr = {name: numbers[column] for name, numbers in _CHECKED.items()}
    code = [
        (_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        (_JEQ_K, 0, "kill", arch),
        (_LD_W_ABS, 0, 0, _NR_OFFSET),
    ]
    if machine == "x86_64":  # x32 calls
        code.append((_JGE_K, "refuse", 0, _X32_SYSCALL_BIT))
    code += [(_JEQ_K, "refuse", 0, numbers[column]) for numbers in _REFUSED.values() if numbers[column] is not None]
    code += [
        (_JEQ_K, "unimplemented", 0, nr["clone3"]),
        (_JEQ_K, "unsupported", 0, nr["fallocate"]),
        (_JEQ_K, "flags", 0, nr["clone"]),
        (_JEQ_K, "flags", 0, nr["unshare"]),
        (_JEQ_K, "family", 0, nr["socket"]),
        (_JEQ_K, "level", 0, nr["setsockopt"]),
        (_JEQ_K, 0, "allow", nr["fcntl"]),
        (_LD_W_ABS, 0, 0, _ARG1_LOW_OFFSET),
    ]
    code += [(_JEQ_K, "refuse", 0, command) for command in _FCNTL_COMMANDS[:-1]]
    code += [
        (_JEQ_K, "refuse", "allow", _FCNTL_COMMANDS[-1]),
        ("label", "flags"),
        (_LD_W_ABS, 0, 0, _ARG0_LOW_OFFSET),
        (_JSET_K, "refuse", "allow", _NEW_NAMESPACES),
        ("label", "family"),
        (_LD_W_ABS, 0, 0, _ARG0_LOW_OFFSET),
        (_JEQ_K, "allow", "refuse", _AF_UNIX),
        ("label", "level"),
        (_LD_W_ABS, 0, 0, _ARG1_LOW_OFFSET),
        (_JEQ_K, 0, "allow", _SOL_SOCKET),
        (_LD_W_ABS, 0, 0, _ARG2_LOW_OFFSET),
        *[(_JEQ_K, "refuse", 0, option) for option in _SOCKET_BUFFERS[:-1]],
        (_JEQ_K, "refuse", "allow", _SOCKET_BUFFERS[-1]),
        ("label", "allow"),
        (_RET_K, 0, 0, _RET_ALLOW),
        ("label", "refuse"),
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        ("label", "unimplemented"),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
        ("label", "unsupported"),
        (_RET_K, 0, 0, _RET_ERRNO | errno.EOPNOTSUPP),
        ("label", "kill"),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
    ]
    return _assemble(code)
