# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
# ruff: noqa: UP031 - %-formatting in the records the harness writes (fixed layouts, read by harness.py)
"""The first code of every sandboxed interpreter (sent as source to `python -I -c`; standard library only). The
trainer imports it for `wait_for_exit` and `kill_group`.

It reads and deletes the program (which then cannot read its harness from the scratch directory), installs an audit
hook where the network (or, with a shared uid and no PID namespace, the trainer's processes) is not otherwise
isolated, and runs the program as __main__. In a new PID namespace an init forks the program, reaps orphans and
relays its exit status; the kernel kills what is left when init exits. Given a manifest, the harness (_harness)
forks a child per case (_run_case) instead; a case with a code suffix runs the program as the module IMPORTED_AS.
"""

import os
import signal
import sys


_NETWORK_EVENTS = set(
    "socket.connect socket.bind socket.sendto socket.sendmsg socket.getaddrinfo socket.gethostbyname "
    "socket.gethostbyaddr socket.getnameinfo os.system os.exec os.posix_spawn os.spawn subprocess.Popen pty.spawn".split()
)
_NETWORK_SYMBOLS = {"socket", "connect", "bind", "sendto", "sendmsg", "getaddrinfo", "syscall"}
OPEN_FILES_ENV = "VERL_SANDBOX_OPEN_FILES"
"""The program's RLIMIT_NOFILE, set once only its own descriptors are left (a case's: 0, 1 and 2)."""
TMPFS_INODES_ENV = "VERL_SANDBOX_TMPFS_INODES"
"""Under bwrap as root: the inodes of each private tmpfs, remounted before the bootstrap drops to the run's uid."""
STATUS_FD_ENV = "VERL_SANDBOX_STATUS_FD"
"""Under bwrap, without a harness: the descriptor the bootstrap writes the program's wait status to (_relay). bwrap
reports a child killed by signal N as exit code 128 + N, which a program can also exit with by itself."""
TMPFS = ("/tmp", "/dev/shm")
"""The private tmpfs bwrap mounts besides the working directory (bwrap.py)."""
IMPORTED_AS = "solution"
"""The program's module name in a case with a code suffix (the tests that call its functions): not __main__, so an
`if __name__ == "__main__":` block (example calls, reading input()) does not run, as where graders import the
solution (APPS/TACO, HumanEval). sys.modules has it under this name and as __main__."""


def _namespace(name):
    try:
        return os.readlink("/proc/self/ns/" + name)
    except OSError:
        return ""


def _fresh_pid_namespace():
    # After unshare(CLONE_NEWPID) and before the first fork the new namespace has no init yet, and reading its
    # link fails although the entry exists (kernels older than 4.12 have no such entry at all).
    try:
        os.lstat("/proc/self/ns/pid_for_children")
    except OSError:
        return False
    return _namespace("pid_for_children") != _namespace("pid")


def _ours(pid, marker):
    try:
        with open("/proc/%d/environ" % pid, "rb") as environ:
            return marker in environ.read().split(b"\0")
    except OSError:
        return False


def _install_guard(network, kill):
    marker = ("VERL_SANDBOX_ID=" + os.environ.get("VERL_SANDBOX_ID", "")).encode()

    def hook(event, args):
        if network and (event in _NETWORK_EVENTS or (event == "ctypes.dlsym" and args[1] in _NETWORK_SYMBOLS)):
            raise PermissionError("network access and spawning programs are disabled in this sandbox (%s)" % event)
        if kill and event in ("os.kill", "os.killpg"):
            target = args[0] if event == "os.kill" else -args[0]
            if target > 0 and target != os.getpid() and not _ours(target, marker):
                raise PermissionError("this sandbox may only signal its own processes")
            if target < 0 and -target != os.getpgid(0):
                raise PermissionError("this sandbox may only signal its own process group")

    sys.addaudithook(hook)


def _exit_like(status):
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _supervise(close):
    read_end, write_end = os.pipe()
    init = os.fork()
    if init:
        os.close(write_end)
        for fd in close:
            os.close(fd)
        data = b""
        while True:
            chunk = os.read(read_end, 64)
            if not chunk:
                break
            data += chunk
        _, status = os.waitpid(init, 0)
        _exit_like(int(data) if data else status)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    program = os.fork()
    if program:
        os.close(read_end)
        for fd in close:
            os.close(fd)
        while True:
            pid, status = os.wait()
            if pid == program:
                os.write(write_end, str(status).encode())
                os._exit(0)
    os.close(read_end)
    os.close(write_end)


def _relay(status_fd):
    # The program runs in a forked child; this process waits for it, writes its wait status to `status_fd` (which
    # only the trainer reads, and the program never holds) and ends like it. Undumpable, so a program of the same uid
    # can neither ptrace it nor open its descriptors through /proc: it can kill it, and then no status is written.
    program = os.fork()
    if program == 0:
        os.close(status_fd)
        return
    try:
        _prctl(4, 0)  # PR_SET_DUMPABLE
    except (ImportError, OSError, AttributeError):
        pass  # still relayed, but a program of the same uid could then ptrace this process
    while True:
        pid, status = os.waitpid(program, 0)
        if pid == program:
            break
    os.write(status_fd, b"%d" % status)
    _exit_like(status)


def _source_lines(path, text):
    import linecache

    linecache.cache[path] = (len(text), None, text.splitlines(True), path)


def _main_module(path, text, name="__main__"):
    import types

    _source_lines(path, text)
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules["__main__"] = sys.modules[name] = module
    return module


def _print_traceback(error, path):
    import traceback

    frames = error.__traceback__
    while frames is not None and frames.tb_frame.f_code.co_filename != path:
        frames = frames.tb_next
    traceback.print_exception(type(error), error, frames)


def _run(source, path):
    module = _main_module(path, source.decode("utf-8", "replace"))
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except SystemExit:
        raise
    except BaseException as error:
        _print_traceback(error, path)
        raise SystemExit(1) from None


def _run_case(source, path, program, suffix):
    # The program was compiled once by the harness (or failed to compile: then every case reports that error); the
    # suffix is compiled here, numbered as if appended to the program's text, and runs in the same namespace. Its
    # text reaches linecache (for tracebacks) only once the program has run: it may hold the case's secret
    # (judge.Case.secret), which the program's own judge line would need. With a suffix (the tests that call the
    # program's functions) the program is the module IMPORTED_AS, whose `if __name__ == "__main__":` block is skipped.
    text, name = source.decode("utf-8", "replace"), IMPORTED_AS if suffix else "__main__"
    module = _main_module(path, text, name)
    clean = dict(vars(__builtins__) if hasattr(__builtins__, "__dict__") else __builtins__)
    io = (os.write, os._exit)
    try:
        if isinstance(program, BaseException):
            raise program
        exec(program, module.__dict__)
        if suffix:
            code = compile("\n" * source.count(b"\n") + suffix, path, "exec")
            _source_lines(path, text + suffix)
            exec(code, _judge_namespace(module.__dict__, clean, io, name))
        status = 0
    except SystemExit as exit:
        status = _exit_status(exit.code)
    except BaseException as error:
        _print_traceback(error, path)
        status = 1
    _finish(status, module)


def _judge_namespace(program, clean, io, module_name):
    # Where a case's suffix runs: the program's names, but the builtins (and os.write, os._exit) as they were before
    # the program ran, so its own all() or isinstance(), or one it put into builtins, does not judge it. The
    # function under test comes from _verl_program where its name is a builtin's.
    namespace = {name: value for name, value in program.items() if name not in clean}
    namespace.update(__builtins__=clean, __name__=module_name, _verl_program=program, _verl_io=io)
    return namespace


def _exit_status(code):
    # What the interpreter makes of an uncaught SystemExit.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _flush(status):
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except BaseException:
            status = 120  # as the interpreter exits when it cannot flush them
    return status


def _finish(status, module):
    # End like the interpreter (threads joined, atexit, streams flushed, the program's objects finalized), but
    # leave the harness's heap alone: tearing it down would touch every copy-on-write page.
    import atexit
    import gc

    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()
    except BaseException:
        pass
    atexit._run_exitfuncs()
    status = _flush(status)
    try:
        gc.collect()
        module.__dict__.clear()
        gc.collect()
    except BaseException:
        pass
    _flush(0)
    os._exit(status)


def _prctl(option, value):
    import ctypes

    function = ctypes.CDLL(None, use_errno=True).prctl
    function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if function(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(%d, %d)" % (option, value))


def _limit_inodes(count, paths):
    # bwrap mounted them nosuid and nodev; a remount changes nr_inodes alone (size and mode stay).
    import ctypes

    mount = ctypes.CDLL(None, use_errno=True).mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    for path in paths:
        if mount(None, path.encode(), None, 0x20 | 0x2 | 0x4, b"nr_inodes=%d" % count) != 0:  # MS_REMOUNT, ...
            raise OSError(ctypes.get_errno(), "remount %s with nr_inodes" % path)


def _state():
    # What a case could change in the harness from outside (prlimit, setpriority, sched_setaffinity): when it
    # differs from the start, the harness stops and the remaining cases run in a fresh process.
    import resource

    limits = [resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource)) if name[:7] == "RLIMIT_"]
    return limits, os.getpriority(os.PRIO_PROCESS, 0), os.sched_getaffinity(0)


WAIT_CAP = 4.0
"""A run's wall limit stretches by the time it waited for a CPU, to at most WAIT_CAP times the limit."""


def child_pids(pid):
    """The children of process `pid` (a number or "self"), as numbered in this /proc; [] where the kernel does not
    list them."""
    found = []
    try:
        for task in os.listdir("/proc/%s/task" % pid):
            with open("/proc/%s/task/%s/children" % (pid, task), "rb") as file:
                found.extend(int(child) for child in file.read().split())
    except (OSError, ValueError):
        pass
    return found


class CpuWait:
    """The seconds of `elapsed` that a run lost waiting for a CPU, as a function of `elapsed` (call it as the run goes
    on): the longest wait of one thread of the processes `roots()` and their descendants (the first 256), plus the
    waits of the threads that have ended (a case's process waits, exits, then its harness waits: waits one after the
    other add up), at most `elapsed` less the CPU time they used (/proc/<pid>/stat), so a run that keeps its core busy
    with its own threads or processes gains nothing; 0.0 where /proc does not tell.

    A thread's wait is its run-queue delay (/proc/<pid>/task/<tid>/schedstat), which the kernel adds only when the
    thread next gets a CPU; so a thread found runnable at two calls without having run in between (its CPU time and
    delay unchanged) also counts the time between them. `runnable` says whether a thread was runnable at the last
    call (a wait not yet counted may be under way), `used` the CPU seconds the processes had used. With `from_now`,
    waits and CPU time count from its creation on, for processes that ran before it."""

    def __init__(self, roots, from_now=False):
        self.roots, self.runnable, self.used, self._threads = roots, False, 0.0, {}
        self._waits, self._ended = {}, 0.0  # each live thread's wait at the last call; the ended threads' waits
        self._base, self._used0 = (None if from_now else {}), 0  # each thread's wait and the CPU ticks at creation
        if from_now:
            self(0.0)

    def __call__(self, elapsed):
        import time

        now, used, pending, seen, threads, waits = time.monotonic(), 0, list(self.roots()), 0, {}, {}
        while pending and seen < 256:
            pid, seen = pending.pop(), seen + 1
            try:
                with open("/proc/%d/stat" % pid, "rb") as file:
                    stat = file.read()
                used += sum(int(ticks) for ticks in stat[stat.rfind(b")") + 2 :].split()[11:15])  # u/s, children's
                for task in os.listdir("/proc/%d/task" % pid):
                    with open("/proc/%d/task/%s/schedstat" % (pid, task), "rb") as file:
                        ran, delay = (int(field) for field in file.read().split()[:2])
                    with open("/proc/%d/task/%s/stat" % (pid, task), "rb") as file:
                        runnable = file.read().rsplit(b")", 1)[1][1:2] == b"R"
                    key, queued = (pid, task), 0.0
                    before = self._threads.get(key)
                    if runnable and before is not None and before[:3] == (ran, delay, True):
                        queued = before[3] + now - before[4]  # runnable throughout, and has not run since
                    threads[key] = (ran, delay, runnable, queued, now)
                    waits[key] = delay / 1e9 + queued
            except (OSError, IndexError, ValueError):
                continue
            pending.extend(child_pids(pid))
        self._threads, self.runnable = threads, any(thread[2] for thread in threads.values())
        if self._base is None:
            self._base, self._used0 = waits, used
        waits = {key: max(wait - self._base.get(key, 0.0), 0.0) for key, wait in waits.items()}
        for key, wait in self._waits.items():
            if key in waits:
                continue
            if os.path.exists("/proc/%d/task/%s" % key):  # not read this time (a process past the first 256, a read
                waits[key] = wait  # that failed as a thread ended): its last wait, not counted as ended twice
            else:
                self._ended += wait
        self._waits = waits
        longest = self._ended + max(waits.values(), default=0.0)
        self.used = (used - self._used0) / os.sysconf("SC_CLK_TCK")
        return max(0.0, min(longest, elapsed - self.used))


PROBE_S = 0.05
"""How long a run that is runnable at its deadline, with no new wait counted, is watched again for a wait under way."""


class Stretch:
    """A deadline `limit` seconds from its creation that moves on by the time the run `waited` (a CpuWait) loses
    waiting for a CPU, to at most WAIT_CAP x `limit`, and not once the run has used `limit` seconds of CPU."""

    def __init__(self, limit, waited=None):
        import time

        self.limit, self.waited, self.lost, self.probe = limit, waited, 0.0, 0.0
        self.start = time.monotonic()

    @property
    def deadline(self):
        return self.start + self.limit + self.lost + self.probe

    def extend(self):
        """Called at the deadline: whether it moved on (a new wait was counted, or a runnable run gets a look again
        PROBE_S later for a wait the kernel has not yet counted)."""
        import time

        if self.waited is None:
            return False
        cap = (WAIT_CAP - 1) * self.limit
        wait = min(self.waited(time.monotonic() - self.start), cap)
        if self.waited.used >= self.limit:
            return False  # it has had the limit's time of CPU (a run on several cores, or its own quota, waits too)
        if wait - self.lost >= 0.01:
            self.lost, self.probe = wait, 0.0
        elif self.probe or not self.waited.runnable or wait >= cap - 0.01:
            return False  # no new wait after a look again, or nothing runnable, or the cap is reached
        else:  # runnable, so a wait the kernel counts only when the run next gets a CPU may be under way
            self.probe = time.monotonic() - self.deadline + PROBE_S
        return True


def wait_for_exit(pid: int, timeout: float, waited=None) -> bool:
    """Wait up to `timeout` seconds for the child `pid` to exit, without reaping it (so its pid and group id stay
    reserved until the group is killed); False on timeout. With `waited` (a CpuWait for the run), the time the run
    lost waiting for a CPU does not count (a Stretch of the limit)."""
    stretch = Stretch(timeout, waited)
    while not _exits_by(pid, stretch.deadline):
        if not stretch.extend():
            return False
    return True


def _exits_by(pid, deadline):
    import select
    import time

    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):
        handle = None
    if handle is not None:
        try:
            poller = select.poll()
            poller.register(handle, select.POLLIN)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if poller.poll(int(remaining * 1000) + 1):  # milliseconds, never 0
                    return True
        finally:
            os.close(handle)
    delay = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.02)


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid`, if it still exists and may be signalled."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _children():
    # Processes whose parent is this one (the harness is a subreaper, so orphans of a case end up here).
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as file:
                    stat = file.read()
                if int(stat[stat.rfind(b")") + 2 :].split()[1]) == me:
                    found.append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _end_case(child, kill_all):
    # Kill and reap everything the case started; (status, CPU seconds). In an own PID namespace or as a dedicated
    # uid, kill(-1) reaches exactly that in one step; otherwise this process's children are killed, round after
    # round as orphans arrive.
    import time

    kill_group(child)
    status, cpu = None, 0.0
    while True:
        for pid in [-1] if kill_all else _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            pid, wait_status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return status, cpu
        if pid == 0:
            time.sleep(0.001)
            continue
        cpu += usage.ru_utime + usage.ru_stime
        if pid == child:
            status = wait_status


def empty_directory(path):
    # Remove everything inside `path` without recursion or following links: each subdirectory is moved up into
    # `path` before it is emptied, so at most two directories are open at once however deep the tree (a program
    # may also lower the open-file limit). Closed directories are opened up first. True when `path` ends empty.
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass  # a folder the run does not own (bwrap's working directory): its mode is not the program's to close
    try:
        top = os.open(path, flags)
    except OSError:
        return False
    try:
        pending, moved = [None], 0
        while pending:
            name = pending.pop()
            try:
                if name is None:
                    fd = top
                else:
                    if (os.lstat(name, dir_fd=top).st_mode & 0o170000) != 0o040000:
                        os.unlink(name, dir_fd=top)
                        continue
                    os.chmod(name, 0o700, dir_fd=top)
                    fd = os.open(name, flags, dir_fd=top)
            except OSError:
                continue
            try:
                with os.scandir(fd) as entries:
                    names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
                for entry, is_directory in names:
                    try:
                        if not is_directory:
                            os.unlink(entry, dir_fd=fd)
                        elif fd == top:
                            pending.append(entry)
                        else:
                            moved += 1
                            flat = ".verl-rm-%d-%d-%s" % (os.getpid(), moved, os.urandom(4).hex())
                            os.rename(entry, flat, src_dir_fd=fd, dst_dir_fd=top)
                            pending.append(flat)
                    except OSError:
                        pass
            finally:
                if fd != top:
                    os.close(fd)
            if name is not None:
                try:
                    os.rmdir(name, dir_fd=top)
                except OSError:
                    pass
        return not os.listdir(top)
    finally:
        os.close(top)


def _read_suffix(fd):
    # A case's suffix file: the suffix's length in bytes on a line, then the suffix. Only the case's child reads it,
    # so the harness never holds another case's code; it is closed before the program runs.
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise EOFError("the case's stdin file ends inside its header")
        header += byte
    size, suffix = int(header), b""
    while len(suffix) < size:
        chunk = os.read(fd, size - len(suffix))
        if not chunk:
            raise EOFError("the case's stdin file ends inside its code suffix")
        suffix += chunk
    return suffix.decode("utf-8")


def _manifest(text):
    # "wall budget results stdin,stdout,stderr,suffix ...": descriptor numbers and limits only, on the command line.
    fields = text.split()
    cases = [tuple(int(fd) for fd in case.split(",")) for case in fields[3:]]
    return float(fields[0]), float(fields[1]), int(fields[2]), cases


def _harness(source, path, manifest, kill_all):
    # Runs the cases in turn, each in a forked child; returns only in a child, which then runs its case. Only this
    # process writes the result pipe: children close it first, and PR_SET_DUMPABLE=0 keeps same-uid processes from
    # ptrace and /proc/<pid>/{mem,fd}. A case gets what is left of `budget`, at most `wall`; neither counts the time
    # the case's processes waited for a CPU (up to WAIT_CAP times each), which its record reports.
    import gc
    import time

    wall, budget, results, cases = manifest
    deadline, stretch = time.monotonic() + budget, (WAIT_CAP - 1) * budget
    try:
        _prctl(4, 0)  # PR_SET_DUMPABLE
        _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (ImportError, OSError, AttributeError) as error:
        os.write(results, b"U %s\n" % repr(error).encode())
        os._exit(0)
    try:
        program = compile(source, path, "exec")
    except BaseException as error:
        program = error
    highest = max([results] + [fd for case in cases for fd in case]) + 1
    scratch, baseline = os.getcwd(), _state()
    gc.freeze()  # the collector in a child then leaves the harness's objects (and their copy-on-write pages) alone
    for index, (stdin, stdout, stderr, suffix_file) in enumerate(cases):
        case_wall = min(wall, deadline - time.monotonic())
        if _state() != baseline or os.listdir(scratch) or case_wall <= 0:
            break
        os.write(results, b"S %d\n" % index)
        started = time.monotonic()
        child = os.fork()
        if child == 0:
            try:
                os.setpgid(0, 0)
                suffix = _read_suffix(suffix_file)
                os.dup2(stdin, 0)
                os.dup2(stdout, 1)
                os.dup2(stderr, 2)
                os.closerange(3, highest)
                _prctl(4, 1)  # dumpable again, like any process started from an executable
            except BaseException:
                os._exit(1)
            return program, suffix
        for fd in (stdin, stdout, stderr, suffix_file):
            os.close(fd)
        try:
            os.setpgid(child, child)
        except OSError:
            pass
        waited = CpuWait(lambda: child_pids("self"))
        timed_out = not wait_for_exit(child, case_wall, waited)
        elapsed = time.monotonic() - started
        lost = min(waited(elapsed), stretch)  # the budget stretches by it too
        deadline, stretch = deadline + lost, stretch - lost
        status, cpu = _end_case(child, kill_all)
        returncode = -9 if status is None else os.waitstatus_to_exitcode(status)
        empty_directory(scratch)
        record = "D %d %d %d %.6f %.6f %.6f\n" % (index, returncode, timed_out, elapsed, cpu, lost)
        os.write(results, record.encode())
    os._exit(0)


def _main():
    host_network, program, user = sys.argv[1], sys.argv[2], sys.argv[3]
    workdir = os.environ.pop("VERL_SANDBOX_WORKDIR", "")  # under bwrap: the scratch folder is read-only
    inodes = int(os.environ.pop(TMPFS_INODES_ENV, "0"))
    if inodes:
        _limit_inodes(inodes, (*TMPFS, workdir))
    if user.startswith("u"):  # started as root by bwrap: become the run's dedicated uid before any of its code
        uid = int(user[1:])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    shared_uid = user == "1"
    os.environ.pop("PWD", None)  # bwrap sets it; a run's environment is only what the trainer gives
    manifest = _manifest(sys.argv[4]) if len(sys.argv) > 4 else None
    open_files = int(os.environ.pop(OPEN_FILES_ENV, "0"))
    status_fd = int(os.environ.pop(STATUS_FD_ENV, "-1"))
    path = os.path.join(workdir or os.getcwd(), program)
    sys.argv = [path]
    with open(program, "rb") as file:
        source = file.read()
    if not workdir:
        os.unlink(program)
    inherited = () if manifest is None else [manifest[2]] + [fd for case in manifest[3] for fd in case]
    if workdir:
        os.chdir(workdir)
    own_pids = _fresh_pid_namespace()
    network = not host_network or _namespace("net") in ("", host_network)
    if own_pids:
        _supervise(inherited)
    if status_fd >= 0:
        _relay(status_fd)
    if manifest is not None:
        case = _harness(source, path, manifest, own_pids or not shared_uid)
    if network or (shared_uid and not own_pids):
        _install_guard(network, shared_uid and not own_pids)
    if open_files:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    if manifest is not None:
        _run_case(source, path, *case)
    else:
        _run(source, path)


if __name__ == "__main__":  # `python -c` runs it as __main__; importing it runs nothing
    _main()
