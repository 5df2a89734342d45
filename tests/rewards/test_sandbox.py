# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.rewards.sandbox with real subprocesses: every way a program can end, and that nothing of it survives the run.

The fallbacks (an audit hook instead of a network namespace, a process group instead of a PID namespace) run the
same checks under the plans this machine would fall back to, so they keep working where namespaces are refused.
"""

import logging
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from verl.rewards import sandbox
from verl.rewards.sandbox import (
    SandboxLimits,
    SandboxResult,
    bootstrap,
    bwrap,
    cgroups,
    harness,
    isolation,
    plans,
    run_many,
    run_python,
    runner,
)


pytestmark = pytest.mark.skipif(
    bwrap.executable() is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)


REPO = Path(__file__).resolve().parents[2]

FORK_BOMB = "import os\nwhile True:\n    os.fork()\n"
DAEMON = textwrap.dedent(
    """
    import os, time
    started, running = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            print("daemon running", flush=True)
            os.write(running, b"1")
            time.sleep(60)
        os._exit(0)
    os.read(started, 1)  # the daemon runs (however busy the machine)
    print("main done")
    """
)


def connect_program(port: int) -> str:
    return f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')\n"


def processes_of(result: SandboxResult) -> list[psutil.Process]:
    """Live processes of the run: carrying its marker, or (with a dedicated uid) of its uid."""
    found = []
    for process in psutil.process_iter(["uids", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if result.uid is not None and process.info["uids"].real == result.uid:
                found.append(process)
            elif process.environ().get(sandbox.MARKER_ENV) == result.sandbox_id:
                found.append(process)
        except psutil.Error:
            continue
    return found


def descendants() -> int:
    return len(psutil.Process().children(recursive=True))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP socket listening on 127.0.0.1 that must never see a connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def assert_never_accepted(server: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        server.accept()


def test_limits_are_validated_by_name() -> None:
    for name, value in [("wall_s", 0), ("cpu_s", -1.0), ("memory_mb", 0.5), ("output_kb", True), ("max_processes", 0)]:
        with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be a positive"):
            SandboxLimits(**{name: value})


def test_isolation_is_probed_once_and_named() -> None:
    report = isolation()  # the default: bubblewrap
    assert report == {
        "network": "netns",
        "user": "dedicated-uid" if os.geteuid() == 0 else "user-namespace",
        "processes": "pid-namespace",
        "filesystem": "bwrap",
        "limits": report["limits"],
        "system calls": "seccomp filter",
    }
    assert runner._isolation() is runner._isolation()
    weaker = isolation("namespaces")
    assert weaker["network"] in ("netns", "userns+netns", "audit-hook")
    assert weaker["user"] in ("dedicated-uid", "user-namespace", "same-uid")
    assert weaker["processes"] in ("pid-namespace", "process-group")
    assert weaker["filesystem"] == "host"
    if os.geteuid() == 0:
        assert weaker["user"] == "dedicated-uid", "root must get a dedicated uid on this kind of machine"
        assert report["limits"] == weaker["limits"] == "cgroup v1 per run" or "v2" in report["limits"]


def test_the_report_says_why_runs_get_no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    layout = cgroups._Layout.__new__(cgroups._Layout)
    layout.version, layout.bases, layout.reason = "", {}, "PermissionError: [Errno 13] /sys/fs/cgroup/x"
    monkeypatch.setattr(cgroups, "_LAYOUT", layout)
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    assert isolation()["limits"] == "per process (no writable cgroup: PermissionError: [Errno 13] /sys/fs/cgroup/x)"


def test_a_machine_without_a_system_call_filter_is_named_in_a_warning(monkeypatch, caplog) -> None:
    monkeypatch.setattr(runner.platform, "machine", lambda: "riscv64")
    monkeypatch.setattr(runner, "SECCOMP_FILTER", plans.seccomp.program("riscv64"))
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    with caplog.at_level(logging.INFO, logger=runner.__name__):
        assert isolation()["system calls"] == "none (no seccomp filter for riscv64)"
    [record] = [record for record in caplog.records if "Code sandbox isolation" in record.getMessage()]
    assert record.levelno == logging.WARNING


def test_without_bubblewrap_untrusted_code_is_refused_unless_the_weaker_mode_is_named(monkeypatch) -> None:
    monkeypatch.setenv("VERL_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    with pytest.raises(sandbox.SandboxUnavailable, match=r"apt-get install bubblewrap.*isolation=namespaces"):
        run_python("print(1)")
    assert run_python("print(1)", limits=SandboxLimits(isolation="namespaces")).stdout == "1\n"
    with pytest.raises(ValueError, match="SandboxLimits.isolation must be one of"):
        SandboxLimits(isolation="none")


def test_a_sandbox_that_stops_starting_is_an_error_not_failing_programs(monkeypatch, tmp_path) -> None:
    """bwrap that passes the isolation probe, then cannot make a namespace (the kernel's count spent under load):
    every harness ended before its first case, and each correct program was scored a runtime error (reward 0), with a
    warning only. After one retry it is SandboxUnavailable, which stops the run."""
    import shutil

    flaky, count = tmp_path / "bwrap", tmp_path / "count"
    flaky.write_text(
        f"#!/bin/sh\nn=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}\n"
        'if [ "$n" -ge 1 ]; then echo "bwrap: Creating new namespace failed: No space left on device" >&2; exit 1; fi\n'
        f'exec {shutil.which("bwrap")} "$@"\n'
    )
    flaky.chmod(0o755)
    monkeypatch.setenv("VERL_BWRAP", str(flaky))
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    with pytest.raises(
        sandbox.SandboxUnavailable, match=r"stopped before running any program, twice .*namespace fail"
    ):
        sandbox.run_python_cases("print(int(input()) + 1)", [("1\n", ""), ("2\n", "")])
    assert int(count.read_text()) == 3  # the probe, the harness and its one retry


def test_a_trainer_that_is_not_root_is_warned_its_programs_run_as_itself(monkeypatch, caplog) -> None:
    """isolation=namespaces under a non-root trainer runs programs as the trainer's own user: they can read and write
    all its files and, without a PID namespace, kill its processes through ctypes. The docs said "world-readable
    files"; the run said nothing."""
    from verl.rewards.sandbox import plans

    report = {"network": "audit-hook", "user": "same-uid", "processes": "process-group", "filesystem": "host"}
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    monkeypatch.setattr(runner, "_candidate_plans", lambda mode: [plans._Plan(dedicated_uid=False)])
    monkeypatch.setattr(runner, "_probe", lambda plan: report)
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    with caplog.at_level(logging.WARNING, logger=runner.__name__):
        runner._isolation("namespaces")
    assert "runs programs as the trainer's own user: they can read and write every file" in caplog.text
    assert "and signal its processes" in caplog.text


def test_machine_wide_counters_are_masked() -> None:
    """/proc/stat, /proc/meminfo, ... were readable: a run forking 1,234 times showed in a concurrent run's /proc/stat
    (a channel between a wrong sample and a correct sibling). The process's own /proc entries stay."""
    code = textwrap.dedent(
        """
        import os
        for path in ("/proc/stat", "/proc/meminfo", "/proc/loadavg", "/proc/vmstat"):
            try:
                with open(path) as f:
                    print(path, repr(f.read()))
            except OSError as error:
                print(path, type(error).__name__)
        print(os.path.isdir("/proc/pressure") and os.listdir("/proc/pressure"), open("/proc/self/stat").read()[:1])
        """
    )
    result = run_python(code)
    assert result.status == "ok", result.stderr
    *masked, last = result.stdout.splitlines()
    assert all(line.split()[1] in ("''", "PermissionError") for line in masked), masked
    assert last.split()[0] in ("[]", "False") and last.split()[1].isdigit()  # its own pid


def test_stdin_to_stdout_with_a_minimal_environment() -> None:
    code = "import os, sys\nprint(input()[::-1])\nprint(sorted(os.environ))\nprint(sys.flags.isolated)\n"
    result = run_python(code, "hello\n")
    assert (result.status, result.returncode) == ("ok", 0), result.stderr
    reversed_line, environ, isolated = result.stdout.splitlines()
    assert reversed_line == "olleh"
    assert eval(environ) == sorted(["HOME", "LANG", "PATH", "TMPDIR", sandbox.MARKER_ENV])
    assert isolated == "1"
    assert result.wall_s < 5


def test_an_exception_is_an_error_with_the_traceback() -> None:
    result = run_python("def f():\n    return 1 / 0\nf()\n")
    assert (result.status, result.returncode) == ("error", 1)
    assert 'solution.py", line 2, in f' in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "<string>" not in result.stderr, "the bootstrap's own frames are not shown"


def test_exit_codes_and_signals() -> None:
    assert run_python("import os\nos._exit(3)").returncode == 3
    assert run_python("import os\nos._exit(3)").status == "error"
    killed = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    assert (killed.status, killed.returncode) == ("killed", -15)


def test_an_exit_code_of_128_plus_n_is_not_taken_for_signal_n() -> None:
    """bwrap reports a child killed by signal N as exit code 128 + N; a program that exits so by itself claims no
    kill, CPU limit (SIGXCPU) or output limit (SIGXFSZ), and a real kill still reads as one."""
    for code in (137, 152, 153):
        result = run_python(f"import sys\nsys.exit({code})")
        assert (result.status, result.returncode) == ("error", code), result.stderr
    killed = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert (killed.status, killed.returncode) == ("killed", -9)
    # killing what relays its status leaves a plain exit code, never a verdict
    forged = run_python("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos._exit(152)")
    assert forged.status == "error" and forged.returncode > 0, (forged.status, forged.returncode)


def test_a_wall_limit_above_the_sample_s_budget_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A case gets at most what is left of sample_wall_s: with wall_s=3 and sample_wall_s=1, a case that sleeps 2 s
    times out at about 1 s, never at 3 s. That cap is said once, not per sample."""
    harness._warn_wall_capped.cache_clear()
    limits = SandboxLimits(wall_s=3.0, sample_wall_s=1.0)
    with caplog.at_level(logging.WARNING, logger=harness.__name__):
        [result] = sandbox.run_python_cases("import time\ntime.sleep(2)\n", [""], limits)
        sandbox.run_python_cases("print(1)\n", [""], limits)
    assert result.status == "timeout", (result.status, result.stderr)
    warned = [record.getMessage() for record in caplog.records if "exceeds sample_wall_s" in record.getMessage()]
    assert len(warned) == 1 and "wall_s=3.0" in warned[0], caplog.text


def test_programs_run_at_a_lower_priority_than_the_trainer() -> None:
    """SandboxLimits.nice: sandboxed programs (and each case's child) yield the CPU to the trainer's processes."""
    expected = min(os.nice(0) + 7, 19)
    code = "import os\nprint(os.nice(0))\n"
    result = run_python(code, limits=SandboxLimits(nice=7))
    assert result.status == "ok" and int(result.stdout) == expected, result.stderr
    cases = sandbox.run_python_cases(code, [("", ""), ("", "")], SandboxLimits(nice=7))
    assert [int(case.stdout) for case in cases] == [expected, expected]
    assert int(run_python(code).stdout) == min(os.nice(0) + 10, 19)  # the default
    with pytest.raises(ValueError, match="SandboxLimits.nice must be from 1 to 19"):
        SandboxLimits(nice=20)


def test_a_busy_loop_ends_at_the_wall_limit() -> None:
    """Killed once it has had wall_s of time on a CPU, long before its 5 s CPU limit. On a busy machine that takes
    more wall time (up to WAIT_CAP x wall_s: measured 9.8 s in all beside two busy processes and another test
    process), so the CPU time it used is what shows the wall limit ended it."""
    result = run_python("while True:\n    pass\n", limits=SandboxLimits(wall_s=1.0, cpu_s=5.0))
    assert result.status == "timeout", (result.status, result.wall_s, result.cpu_s)
    assert result.cpu_s < 1.0 + 0.5, result
    assert result.cpu_s > 0.5 or result.wall_s >= 0.95 * bootstrap.WAIT_CAP * 1.0, result  # not cut short
    sleeping = run_python("import time\ntime.sleep(60)\n", limits=SandboxLimits(wall_s=1.0))
    assert sleeping.status == "timeout" and 1.0 <= sleeping.wall_s < 1.0 + 5.0  # not the program's 60 s


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _spin_in_a_thread(seconds: float) -> None:
    import threading

    thread = threading.Thread(target=_spin, args=(seconds,))
    thread.start()
    thread.join()  # the main thread sleeps meanwhile


def test_a_process_s_wait_for_a_cpu_is_read_from_the_kernel() -> None:
    """Three processes spin on one core (equal shares), the third in a thread while its main thread sleeps: each
    waits about two thirds of the time; a sleeping process, a gone one and a tree that keeps the core busy itself
    have lost nothing to others."""
    import multiprocessing

    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(affinity)})  # the spinning processes inherit it
    try:
        spinning = [multiprocessing.Process(target=_spin, args=(3.0,)) for _ in range(2)]
        spinning.append(multiprocessing.Process(target=_spin_in_a_thread, args=(3.0,)))
        for process in spinning:
            process.start()
    finally:
        os.sched_setaffinity(0, affinity)
    sleeping = subprocess.Popen(["sleep", "10"])
    try:
        started = time.monotonic()
        time.sleep(1.0)
        elapsed = time.monotonic() - started
        waits = [bootstrap.CpuWait(lambda pid=process.pid: [pid])(elapsed) for process in spinning]
        assert all(elapsed * 0.4 < wait <= elapsed for wait in waits), (elapsed, waits)
        assert bootstrap.CpuWait(lambda: [sleeping.pid])(elapsed) < 0.05
        assert bootstrap.CpuWait(lambda: [os.getpid()])(0.0) == 0.0  # at most the elapsed time less the CPU time used
    finally:
        for process in spinning:
            process.kill()
            process.join()
        sleeping.kill()
        sleeping.wait()
    assert bootstrap.CpuWait(lambda: [spinning[0].pid])(1.0) == 0.0  # gone


def test_waits_of_a_process_that_ended_still_count() -> None:
    """A case's process waits for the CPU, then exits, then its harness waits: the waits add up. Only live threads
    counted, so the first wait vanished with its process and the trainer gave up on a harness that was only starved
    (the harness test failed two runs in three beside a busy pytest worker)."""
    core = min(os.sched_getaffinity(0))
    pin = lambda: os.sched_setaffinity(0, {core})  # noqa: E731
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    tree = "import os, time\nchild = os.fork()\nif child == 0:\n    while True: pass\nos.waitpid(child, 0)\ntime.sleep(60)\n"
    root = subprocess.Popen([sys.executable, "-c", tree], preexec_fn=pin)
    try:
        time.sleep(0.3)
        waited, started = bootstrap.CpuWait(lambda: [root.pid]), time.monotonic()
        waited(0.0)  # sees the spinning child
        time.sleep(1.0)
        while_alive = waited(time.monotonic() - started)
        for child in psutil.Process(root.pid).children():
            child.kill()
        deadline = time.monotonic() + 10
        while psutil.Process(root.pid).children() and time.monotonic() < deadline:  # reaped by the root
            time.sleep(0.05)
        after = waited(time.monotonic() - started)
    finally:
        for process in (busy, root):
            process.kill()
            process.wait()
    assert while_alive > 0.2, while_alive
    # without the ended process's wait it fell to the harness's own (~0); under a loaded machine the cap at the
    # elapsed time less the CPU time used may take a little back (0.372 -> 0.357 once, beside the full suite)
    assert after >= 0.8 * while_alive, (while_alive, after)


def test_a_wait_under_way_counts_before_the_kernel_adds_it() -> None:
    """The kernel adds a thread's run-queue delay only when the thread next gets a CPU. A process of the idle class
    beside a busy one on the same core runs for a moment about every quarter second, so its delay as the kernel tells
    it lags behind by up to that (measured: 0.5 s); a CpuWait that looks every 20 ms counts the time between two looks
    at which the process was runnable and had not run, so it never lags by more than about a look."""
    core = min(os.sched_getaffinity(0))

    def idle_on_the_core() -> None:
        os.sched_setaffinity(0, {core})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    busy = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core})
    )
    starved = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=idle_on_the_core)
    try:
        time.sleep(0.3)
        waited = bootstrap.CpuWait(lambda: [starved.pid])
        started, first, lags = time.monotonic(), waited(99.0), []
        while time.monotonic() - started < 1.0:
            time.sleep(0.02)
            lags.append(time.monotonic() - started - (waited(99.0) - first))
            assert waited.runnable
    finally:
        for process in (busy, starved):
            process.kill()
            process.wait()
    assert max(lags) < 0.1, [round(lag, 3) for lag in lags]


class _Waits:
    """Stands in for CpuWait in wait_for_exit's arithmetic: the wait as a function of the seconds elapsed."""

    def __init__(self, wait: Callable[[float], float], runnable: bool = False, used: float = 0.0) -> None:
        self.wait, self.runnable, self.used, self.calls = wait, runnable, used, 0

    def __call__(self, elapsed: float) -> float:
        self.calls += 1
        return self.wait(elapsed)


def test_a_wall_limit_stretches_by_the_wait_up_to_the_cap() -> None:
    """A sleeping run is held for the limit plus its wait, at most WAIT_CAP x the limit, and not once it has used the
    limit's CPU time; a runnable one with no new wait is looked at once more after PROBE_S; one that keeps waiting is
    held to the cap."""
    sleeping = subprocess.Popen(["sleep", "10"])
    try:
        for waited, least, calls in (
            (_Waits(lambda elapsed: 0.0), 0.2, 1),
            (_Waits(lambda elapsed: 0.3), 0.5, 2),
            (_Waits(lambda elapsed: 0.3, used=0.2), 0.2, 1),  # it had the limit's CPU time (on several cores)
            (_Waits(lambda elapsed: 99.0), 0.8, 2),
            (_Waits(lambda elapsed: 0.0, runnable=True), 0.2 + bootstrap.PROBE_S, 2),
            (_Waits(lambda elapsed: max(0.0, elapsed - 0.2), runnable=True), 0.8, None),
        ):
            started = time.monotonic()
            assert not bootstrap.wait_for_exit(sleeping.pid, 0.2, waited)
            assert least <= time.monotonic() - started < least + 0.5
            assert calls is None or waited.calls == calls
        exiting = subprocess.Popen(["sleep", "0.4"])
        assert bootstrap.wait_for_exit(exiting.pid, 0.2, _Waits(lambda elapsed: 0.5))  # within the stretched limit
        exiting.wait()
    finally:
        sleeping.kill()
        sleeping.wait()


def test_the_wall_limit_does_not_count_the_time_spent_waiting_for_a_cpu() -> None:
    """Two busy processes share the program's only core, so a program of ~0.1 CPU seconds takes longer than wall_s in
    wall time (at the folder's quarter weight it gets about a fifth of the core); it passes all the same, alone and as
    a harness's cases (its run-queue wait does not count). Where the machine is busier still (another test process on
    the same core left a case 0.07 CPU seconds in 1.2 s), a case may end `timeout`, but only once it has been held to
    WAIT_CAP x wall_s, not at wall_s as before."""
    import multiprocessing

    program = "x = 0\nfor i in range(10**6):\n    x += i\nprint(x)\n"
    limits = SandboxLimits(wall_s=0.3)
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(affinity)})  # the runs and the busy processes inherit it
    busy = [multiprocessing.Process(target=_spin, args=(30.0,)) for _ in range(2)]
    try:
        for process in busy:
            process.start()
        time.sleep(0.3)
        results = [run_python(program, "", limits), *sandbox.run_python_cases(program, ["", ""], limits)]
    finally:
        os.sched_setaffinity(0, affinity)
        for process in busy:
            process.kill()
            process.join()
    seen = [(result.status, round(result.wall_s, 2), round(result.cpu_s, 2)) for result in results]
    for result in results:
        if result.status == "ok":
            assert result.stdout == f"{sum(range(10**6))}\n", seen
        else:  # starved past the cap: it ran for less than wall_s of CPU and was held for the whole stretched limit
            assert result.status == "timeout", seen
            assert result.wall_s >= 0.95 * bootstrap.WAIT_CAP * limits.wall_s and result.cpu_s < limits.wall_s, seen


def test_a_program_that_keeps_its_core_busy_with_its_own_processes_gains_no_time() -> None:
    """Four processes of one program wait for each other, which does not stretch wall_s: the wait counts only as far
    as the run's CPU time leaves room for it, so the run uses at most about wall_s of CPU (counting all the wait, it
    ran to WAIT_CAP x wall_s, 2 s of CPU)."""
    program = "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"
    limits = SandboxLimits(wall_s=0.5)
    results = [run_python(program, "", limits), *sandbox.run_python_cases(program, ["", ""], limits)]
    seen = [(result.status, round(result.wall_s, 2), round(result.cpu_s, 2)) for result in results]
    assert [result.status for result in results] == ["timeout"] * 3, seen
    assert all(result.cpu_s < limits.wall_s + 0.25 for result in results), seen


def test_cpu_limit() -> None:
    result = run_python("while True:\n    pass\n", limits=SandboxLimits(wall_s=10.0, cpu_s=1.0))
    assert result.status == "cpu_limit", (result.returncode, result.stderr)
    # ended by the CPU limit, before the wall limit; the kernel checks the limit against CPU time sampled in whole
    # ticks, which on a busy machine can run ahead of the precise time cpu_s reports (seen: 0.87 s at the limit)
    assert result.wall_s < 10.0 and result.cpu_s >= 0.6


def test_memory_limit() -> None:
    result = run_python("data = bytearray(10 * 2**30)\nprint('allocated')\n")
    assert result.status == "memory_limit", result.stderr
    assert "allocated" not in result.stdout


def test_output_flood_is_capped() -> None:
    result = run_python("while True:\n    print('x' * 100)\n", limits=SandboxLimits(output_kb=64))
    assert result.status == "output_limit", result.stderr
    assert 60 * 1024 < len(result.stdout.encode()) <= 64 * 1024
    assert result.wall_s < 5


def test_a_fork_bomb_ends_and_leaves_nothing() -> None:
    before = descendants()
    result = run_python(FORK_BOMB, limits=SandboxLimits(wall_s=5.0))
    assert result.status in ("process_limit", "timeout")
    assert result.wall_s < 5.0 + 3.0
    assert processes_of(result) == []
    assert descendants() == before


def test_a_daemon_is_killed_after_the_run() -> None:
    result = run_python(DAEMON)
    assert result.status == "ok", result.stderr
    assert "daemon running" in result.stdout  # it did start, and outlived the program
    assert result.wall_s < 5
    assert processes_of(result) == []


def test_no_network(listener: socket.socket) -> None:
    result = run_python(connect_program(listener.getsockname()[1]))
    assert result.status == "error"
    assert "connected" not in result.stdout
    assert_never_accepted(listener)


@pytest.mark.parametrize("mode", ["bwrap", "namespaces"])
def test_the_scratch_directory_is_fresh_and_removed(mode: str) -> None:
    """namespaces: a fresh host folder per run, removed after it; bwrap: a tmpfs of the run's own (gone with it)."""
    code = "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen('left.txt', 'w').write('x')\n"
    limits = SandboxLimits(isolation=mode)
    first, second = run_python(code, limits=limits), run_python(code, limits=limits)
    for result in (first, second):
        cwd, listing = result.stdout.splitlines()
        assert listing == "[]", "the program's own file is deleted before it runs, and no other file is there"
        if mode == "bwrap":
            assert cwd == bwrap.WORKDIR
            continue
        assert os.path.basename(cwd).startswith("verl-sandbox-")
        assert not os.path.exists(cwd)
    if mode == "namespaces":
        assert first.stdout.splitlines()[0] != second.stdout.splitlines()[0]


def test_a_trainer_tmpdir_under_the_program_s_working_directory_is_no_matter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer's TMPDIR (where scratch folders are made) lies under the folder the sandbox mounts as the program's
    working directory: the scratch folder is mounted at a fixed path of its own, so the working directory stays empty
    and every case runs (before, bwrap made the scratch path's parents in that tmpfs and every case scored 0)."""
    monkeypatch.setattr(bwrap, "WORKDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    code = "import os\nprint(os.getcwd(), os.listdir('.'), input())\n"
    results = sandbox.run_python_cases(code, ["1\n", "2\n", "3\n"])
    assert [(result.status, result.stdout) for result in results] == [
        ("ok", f"{tmp_path} [] {index}\n") for index in (1, 2, 3)
    ], results[0].stderr
    assert run_python(code, "4\n").stdout == f"{tmp_path} [] 4\n"


HOSTILE_TREE = """
import os, resource
outside = {outside!r}
top = os.getcwd()
for i in range(200):  # a symlink farm pointing outside, and at the scratch directory itself
    os.symlink(outside, f"out{{i}}")
    os.symlink(top, f"self{{i}}")
os.mkdir("closed")
os.symlink(outside, "closed/inside")
os.chmod("closed", 0)
for _ in range(10000):  # 10^4 deep: paths far beyond PATH_MAX, and shutil.rmtree's recursion limit
    os.mkdir("d")
    os.chdir("d")
    os.symlink(outside, "link")
os.chmod(".", 0)
resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
print(top)
"""


def test_a_deep_tree_and_a_symlink_farm_are_removed_without_touching_what_the_links_point_at(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    os.chmod(outside, 0o751)
    # the built-in mode: the tree is on the host's disk, in the scratch folder the trainer removes
    limits = SandboxLimits(wall_s=60.0, cpu_s=30.0, isolation="namespaces")
    result = run_python(HOSTILE_TREE.format(outside=str(outside)), limits=limits)
    assert result.status == "ok", result.stderr
    assert not os.path.lexists(result.stdout.strip())  # the whole scratch directory is gone
    assert (outside / "keep.txt").read_text() == "x" and (outside.stat().st_mode & 0o777) == 0o751


def test_the_next_case_starts_empty_after_a_deep_tree(tmp_path) -> None:
    code = (
        "import os, sys\nif sys.stdin.read() == 'build':\n"
        + textwrap.indent("for _ in range(5000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('built')\n", "    ")
        + "else:\n    print(sorted(os.listdir('.')))\n"
    )
    built, after = sandbox.run_python_cases(code, [("build", ""), ("look", "")], SandboxLimits(wall_s=60.0))
    assert built.stdout.strip() == "built" and after.stdout.strip() == "[]", (built.stderr, after.stderr)


def test_the_program_cannot_write_outside_the_scratch_directory() -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root trainer runs programs as another uid; a non-root one shares its own files")
    owned_by_root = tempfile.mkdtemp()
    os.chmod(owned_by_root, 0o755)
    targets = [os.path.join(owned_by_root, "written.txt"), str(REPO / "sandbox-write-probe.txt")]
    try:
        for target in targets:
            for mode in ("bwrap", "namespaces"):  # bwrap: the folder is not even there; namespaces: another uid's
                result = run_python(f"open({target!r}, 'w').write('x')\n", limits=SandboxLimits(isolation=mode))
                error = "FileNotFoundError" if mode == "bwrap" else "PermissionError"
                assert result.status == "error" and error in result.stderr, result.stderr
                assert not os.path.exists(target)
    finally:
        for target in targets:
            if os.path.exists(target):
                os.remove(target)
        os.rmdir(owned_by_root)


def test_run_many_keeps_order_and_runs_in_parallel() -> None:
    program = "import time\nstart = time.time()\ntime.sleep(1)\nprint(input() + '{i}', start, time.time())\n"
    results = run_many([(program.format(i=i), "job") for i in range(4)], max_workers=4)
    assert [result.stdout.split()[0] for result in results] == [f"job{i}" for i in range(4)]
    spans = [tuple(map(float, result.stdout.split()[1:])) for result in results]
    # run one after another, the four sleeps would span at least their summed lengths: they overlapped (measured
    # against their own lengths, which a loaded machine stretches, not against a fixed 4 s)
    assert (
        max(end for _, end in spans) - min(start for start, _ in spans)
        < sum(end - start for start, end in spans) - 0.5
    )
    assert run_many([]) == []
    with pytest.raises(ValueError, match="max_workers"):
        run_many([("print(1)", "")], max_workers=0)


def _fallback_plans() -> dict[str, plans._Plan]:
    """The plans this machine would fall back to: no network namespace, and no PID namespace."""
    ns, net = plans._CLONE_NEWNS, plans._CLONE_NEWNET
    if os.geteuid() != 0:
        return {
            "audit-hook": plans._Plan(False, (), ()),
            "process-group": plans._Plan(False, (), (plans._CLONE_NEWUSER | net,)),
        }
    reexpose = runner._isolation().plan.reexpose
    mount = ns if reexpose else 0
    return {
        "audit-hook": plans._Plan(True, (mount,) if mount else (), (), reexpose),
        "process-group": plans._Plan(True, (mount | net,), (), reexpose),
    }


@pytest.mark.parametrize("fallback", ["audit-hook", "process-group"])
def test_fallbacks_still_isolate(fallback: str, listener: socket.socket) -> None:
    plan = _fallback_plans()[fallback]
    report = runner._probe(plan)
    if report is None:
        pytest.skip(f"the {fallback} plan cannot run a program on this machine")
    assert report["network" if fallback == "audit-hook" else "processes"] == fallback
    limits = SandboxLimits(wall_s=5.0)
    assert runner._run("print(input())", "hi", limits, plan).stdout == "hi\n"

    network = runner._run(connect_program(listener.getsockname()[1]), "", limits, plan)
    assert network.status == "error" and "connected" not in network.stdout
    assert_never_accepted(listener)
    if fallback == "audit-hook":
        assert "network access and spawning programs are disabled" in network.stderr
        spawn = runner._run("import subprocess\nsubprocess.run(['true'])\n", "", limits, plan)
        assert spawn.status == "error" and "PermissionError" in spawn.stderr

    before = descendants()
    daemon = runner._run(DAEMON, "", limits, plan)
    assert "daemon running" in daemon.stdout and processes_of(daemon) == []
    bomb = runner._run(FORK_BOMB, "", limits, plan)
    assert bomb.status in ("process_limit", "timeout") and bomb.wall_s < 5.0 + 3.0
    assert processes_of(bomb) == []
    assert descendants() == before

    cases = harness._run_cases(CASE_PROGRAM, [("bomb", ""), ("abc", ""), ("raise", "")], limits, plan)
    assert cases[0].status in ("process_limit", "timeout") and cases[0].wall_s < 5.0 + 3.0
    assert [(case.status, case.stdout) for case in cases[1:]] == [("ok", "cba\n"), ("error", "")]
    assert processes_of(cases[0]) == [] and descendants() == before
    assert_cases_start_from_the_same_state(
        lambda code, stdins: harness._run_cases(code, [(i, "") for i in stdins], limits, plan)
    )


def test_cases_without_a_pid_namespace_or_a_dedicated_uid() -> None:
    """Where the harness may not kill(-1) (the trainer's own uid, no PID namespace), it kills its children instead."""
    plan = plans._Plan(False, (), ())
    report = runner._probe(plan)
    if report is None:
        pytest.skip("no program runs here without namespaces")
    assert report["processes"] == "process-group" and report["user"] == "same-uid"
    limits = SandboxLimits(wall_s=5.0)
    assert_cases_start_from_the_same_state(
        lambda code, stdins: harness._run_cases(code, [(i, "") for i in stdins], limits, plan)
    )
    daemon = harness._run_cases(DAEMON, [("", ""), ("", "")], limits, plan)
    assert [(case.status, case.stdout) for case in daemon] == [("ok", "daemon running\nmain done\n")] * 2
    assert processes_of(daemon[0]) == []


# ---------------------------------------------------------------------------------------------------------------
# Several cases of one program in one process (run_python_cases).

CASE_PROGRAM = textwrap.dedent(
    """
    import os, sys
    case = input()
    if case == "sleep":
        import time
        time.sleep(60)
    if case == "spin":
        while True:
            pass
    if case == "raise":
        raise ValueError("case raised")
    if case == "flood":
        while True:
            print("x" * 100)
    if case == "memory":
        data = bytearray(10 * 2**30)
    if case == "bomb":
        while True:
            os.fork()
    if case == "signal":
        import signal
        os.kill(os.getpid(), signal.SIGTERM)
    if case == "exit":
        sys.exit(4)
    print(case[::-1])
    """
)


def test_cases_fail_one_by_one_and_the_others_pass() -> None:
    before = descendants()
    cases = ["abc", "sleep", "raise", "flood", "memory", "bomb", "spin", "signal", "exit", "xyz"]
    limits = SandboxLimits(wall_s=2.0, cpu_s=1.0, output_kb=16)
    started = time.monotonic()
    results = sandbox.run_python_cases(CASE_PROGRAM, cases, limits)
    elapsed = time.monotonic() - started
    statuses = {case: result.status for case, result in zip(cases, results)}
    seen = [
        (case, result.status, round(result.wall_s, 2), round(result.cpu_s, 2)) for case, result in zip(cases, results)
    ]
    assert statuses["bomb"] in ("process_limit", "timeout")
    del statuses["bomb"]
    spin = results[cases.index("spin")]
    if spin.status == "timeout" and spin.wall_s >= 0.95 * bootstrap.WAIT_CAP * 2.0:
        statuses["spin"] = "cpu_limit"  # so starved beside busy processes that the cap came before its CPU second
    assert statuses == {
        "abc": "ok",
        "sleep": "timeout",
        "raise": "error",
        "flood": "output_limit",
        "memory": "memory_limit",
        "spin": "cpu_limit",
        "signal": "killed",
        "exit": "error",
        "xyz": "ok",
    }, seen
    by_case = dict(zip(cases, results))
    assert by_case["abc"].stdout == "cba\n" and by_case["xyz"].stdout == "zyx\n"
    assert by_case["raise"].stderr.rstrip().endswith("ValueError: case raised")
    assert (
        'solution.py", line 11, in <module>' in by_case["raise"].stderr and "<string>" not in by_case["raise"].stderr
    )
    assert 15 * 1024 < len(by_case["flood"].stdout.encode()) <= 16 * 1024
    assert (by_case["signal"].returncode, by_case["exit"].returncode) == (-15, 4)
    assert 2.0 <= by_case["sleep"].wall_s < 2.0 + 4.0 and (by_case["spin"].cpu_s >= 0.6 or spin.status == "timeout")
    # all cases in one process; where the machine is very busy, the trainer may give up once on a harness that did
    # not get a CPU between two cases (seen once beside two busy processes and another test process), and a fresh
    # one runs the rest (the statuses above are the same either way); never a process per case
    ids = list(dict.fromkeys(result.sandbox_id for result in results))
    assert len(ids) == 1 or (len(ids) == 2 and os.getloadavg()[0] > 2.0), [
        (case, ids.index(result.sandbox_id)) for case, result in zip(cases, results)
    ]
    # Two wall limits (sleep and, at worst, the bomb), one CPU limit, and a little for everything else; where the
    # machine is busy, the bomb's and the spinning case's limits stretch by their waits (at most WAIT_CAP x).
    assert elapsed < (2 * 2.0 + 1.0 + 10.0 if os.getloadavg()[0] <= 2.0 else 2 * bootstrap.WAIT_CAP * 2.0 + 10.0), seen
    assert processes_of(results[0]) == [] and descendants() == before


def test_case_suffixes_run_after_the_code_in_its_namespace() -> None:
    code = "def add(a, b):\n    return a + b\n"
    cases = [("", "\nassert add(1, 2) == 3\nprint('pass')\n"), ("", "\nassert add(1, 2) == 4\nprint('pass')\n")]
    passed, failed = sandbox.run_python_cases(code, cases)
    assert (passed.status, passed.stdout) == ("ok", "pass\n")
    assert failed.status == "error" and failed.stdout == ""
    assert 'solution.py", line 4, in <module>' in failed.stderr, "the suffix is numbered after the code"
    assert "assert add(1, 2) == 4" in failed.stderr and "AssertionError" in failed.stderr
    broken = sandbox.run_python_cases("def f(:\n", ["", ""])
    assert [result.status for result in broken] == ["error", "error"]
    assert all("SyntaxError" in result.stderr for result in broken)
    with pytest.raises(TypeError, match="stdin string or a"):
        sandbox.run_python_cases(code, [("", "", "")])  # type: ignore[list-item]
    assert sandbox.run_python_cases(code, []) == []


def state_program(marker: str) -> str:
    """Prints what it can see of earlier cases, then leaves all of that behind (and a daemon writing to `marker`)."""
    return textwrap.dedent(
        f"""
        import builtins, os, sys, time
        daemon = None
        if os.path.exists({marker!r}):
            pid = int(open({marker!r}).read())
            try:
                os.kill(pid, 0)
                daemon = "alive"
            except (ProcessLookupError, PermissionError):  # the audit hook refuses pids without the run's marker
                daemon = "gone"
        seen = [getattr(builtins, "MARK", None), os.environ.get("MARK"), "marked" in sys.modules, os.listdir("."), daemon]
        print(seen)
        builtins.MARK = 1
        os.environ["MARK"] = "1"
        sys.modules["marked"] = sys
        open("left.txt", "w").write("x")
        os.makedirs("closed/inner")
        os.chmod("closed", 0)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open({marker!r} + ".tmp", "w") as file:
                    file.write(str(os.getpid()))
                os.rename({marker!r} + ".tmp", {marker!r})
                time.sleep(60)
            os._exit(0)
        time.sleep(0.2)
        """
    )


def assert_cases_start_from_the_same_state(run: Callable[[str, list[str]], list[SandboxResult]]) -> None:
    marker = f"/tmp/verl-sandbox-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        results = run(state_program(marker), ["", "", ""])
        assert [result.status for result in results] == ["ok"] * 3, [result.stderr for result in results]
        first, *later = [result.stdout.strip() for result in results]
        assert first == "[None, None, False, [], None]"
        assert later == ["[None, None, False, [], 'gone']"] * 2
        assert processes_of(results[0]) == []
    finally:
        for path in (marker, marker + ".tmp"):
            if os.path.exists(path):
                os.remove(path)


def test_cases_start_from_the_same_state() -> None:
    """Globals, modules, the environment, files in the working directory and processes do not carry over."""
    assert_cases_start_from_the_same_state(sandbox.run_python_cases)


def test_each_case_gets_the_full_process_budget() -> None:
    """A fork bomb's processes are gone before the next case, which can start max_processes - 1 children again."""
    code = textwrap.dedent(
        """
        import os, time
        if input() == "bomb":
            while True:
                os.fork()
        children = []
        for _ in range(6):
            child = os.fork()
            if child == 0:
                time.sleep(0.3)
                os._exit(0)
            children.append(child)
        for child in children:
            os.waitpid(child, 0)
        print("forked", len(children))
        """
    )
    results = sandbox.run_python_cases(code, ["bomb", "ok", "bomb", "ok"], SandboxLimits(wall_s=2.0, max_processes=8))
    assert results[0].status in ("process_limit", "timeout") and results[2].status in ("process_limit", "timeout")
    for result in results[1::2]:
        assert (result.status, result.stdout) == ("ok", "forked 6\n"), result.stderr
    assert len({result.sandbox_id for result in results}) == 1


FORGER = textwrap.dedent(
    """
    import os, sys
    case = input()
    fake = b"D 1 0 0 0.001 0.001\\nS 2\\nD 2 0 0 0.001 0.001\\n"
    if case == "forge":
        print(fake.decode(), end="")
        print(fake.decode(), file=sys.stderr, end="")
        written = [fd for fd in range(3, 256) if os.path.exists(f"/proc/self/fd/{fd}")]
        with open("/proc/self/status") as status:
            harness = next(int(line.split()[1]) for line in status if line.startswith("PPid:"))
        reached = []
        for what, mode in ((f"/proc/{harness}/fd", None), (f"/proc/{harness}/mem", "r+b")):
            try:
                if mode is None:
                    os.listdir(what)
                else:
                    open(what, mode).close()
                reached.append(what)
            except OSError:
                pass
        print("inherited", written, "reached", reached, flush=True)
        os._exit(0)
    raise SystemExit(3)
    """
)


def test_a_case_cannot_forge_the_harness_results() -> None:
    """Printing the harness's records, or looking for its descriptors and memory, does not make a case pass."""
    forge, failing, also_failing = sandbox.run_python_cases(FORGER, ["forge", "fail", "fail"])
    assert forge.status == "ok" and forge.stdout.endswith("inherited [] reached []\n"), forge.stdout
    assert (failing.status, failing.returncode) == ("error", 3)
    assert (also_failing.status, also_failing.returncode) == ("error", 3)


def test_a_case_that_attacks_the_harness_fails_alone() -> None:
    """Killing, stopping or limiting the harness counts against that case; the next cases run in a fresh process."""
    code = textwrap.dedent(
        """
        import os, resource, signal
        case = input()
        if case == "kill":
            os.kill(os.getppid(), signal.SIGKILL)
        if case == "stop":
            os.kill(os.getppid(), signal.SIGSTOP)
        if case == "limit":
            resource.prlimit(os.getppid(), resource.RLIMIT_AS, (64 * 2**20, 64 * 2**20))
            print("limited")
        if case == "big":
            data = bytearray(200 * 2**20)
        import time
        time.sleep(0.1)
        print(case)
        """
    )
    cases = ["a", "kill", "b", "stop", "c", "limit", "big"]
    started = time.monotonic()
    results = sandbox.run_python_cases(code, cases, SandboxLimits(wall_s=1.0))
    elapsed = time.monotonic() - started
    statuses = [result.status for result in results]
    assert statuses == ["ok", "killed", "ok", "timeout", "ok", "ok", "ok"], [r.stderr[-300:] for r in results]
    assert [result.stdout for result in results[::2]] == ["a\n", "b\n", "c\n", "big\n"]
    assert len({result.sandbox_id for result in results}) == 4, "a fresh process after kill, stop and limit"
    # the stopped harness is given up on at the trainer's deadline, stretched (on a busy machine) by its waits
    assert elapsed < bootstrap.WAIT_CAP * (1.0 + harness.HARNESS_GRACE_S) + 5.0


def test_many_cases_keep_order_across_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "CASES_PER_PROCESS", 3)
    jobs = [(f"print(input() + '{job}')", [str(case) for case in range(7)]) for job in range(3)]
    results = sandbox.run_many_cases(jobs + [("print(1)", [])], max_workers=3)
    assert [[result.stdout for result in job] for job in results] == [
        [f"{case}{job}\n" for case in range(7)] for job in range(3)
    ] + [[]]
    assert len({result.sandbox_id for result in results[0]}) == 3
    assert sandbox.run_many_cases([]) == []
    with pytest.raises(ValueError, match="max_workers"):
        sandbox.run_many_cases(jobs, max_workers=0)


def test_run_many_cases_gives_what_run_many_gives() -> None:
    """One process per sample (all its cases) gives each case's result as one process per case does (the speed of
    the two is printed by benchmarks/bench_sandbox.py)."""
    code = "a, b = map(int, input().split())\nprint(a + b)\n"
    cases = ["1 2\n", "3 4\n", "10 20\n"]
    separate = run_many([(code, case) for _ in range(4) for case in cases], max_workers=4)
    together = sandbox.run_many_cases([(code, cases)] * 4, max_workers=4)
    assert [len(job) for job in together] == [3] * 4
    assert [result.stdout for result in separate] == [result.stdout for job in together for result in job]
    assert [result.stdout for result in separate[:3]] == ["3\n", "7\n", "30\n"]


def watch_records(records: bytes, close: bool = True) -> harness._Watch:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, records)
        if close:
            os.close(write_end)
        return harness._watch(read_end, 3, 0.1)
    finally:
        os.close(read_end)
        if not close:
            os.close(write_end)


def test_the_trainer_accepts_only_the_harness_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    finished = watch_records(b"S 0\nD 0 -9 1 2.5 0.25 0.5\nS 1\n")
    assert (finished.reports, finished.running_since is not None, finished.stalled) == (
        [(-9, True, 2.5, 0.25, 0.5, 0)],
        True,
        False,
    )
    for invalid in (
        b"D 0 0 0 0.1 0.1 0\n",
        b"S 1\n",
        b"S 0\nS 0\n",
        b"S 0\nD 1 0 0 0.1 0.1 0\n",
        b"S 0\nD 0 0 0 0.1 0.1\n",
        b"S 3\n",
        b"S 0\nW 0 0.1\nD 0 0 0 0.1 0.1 0\n",  # waits are the trainer's own look, not the harness's word
        b"ok\n",
    ):
        assert watch_records(invalid).reports == [], invalid
    assert watch_records(b"U OSError(1)\n").refused == "OSError(1)"
    assert watch_records(b"S 0\nU late\n").refused == ""
    monkeypatch.setattr(harness, "HARNESS_GRACE_S", 0.1)
    started = time.monotonic()
    stalled = watch_records(b"S 0\n", close=False)
    assert stalled.stalled and stalled.running_since is not None and time.monotonic() - started < 5.0


def watch_a_harness(program: str, crowd: int) -> tuple[harness._Watch, float]:
    """_watch a stand-in harness running `program` (its result pipe's write end is `fd`) at wall_s=0.1; with a
    `crowd`, that many busy processes share the harness's core with it."""
    core = min(os.sched_getaffinity(0))
    read_end, write_end = os.pipe()
    pin = (lambda: os.sched_setaffinity(0, {core})) if crowd else None
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin) for _ in range(crowd)]
    started = time.monotonic()
    stand_in = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", program.replace("fd", str(write_end))],
        pass_fds=(write_end,),
        preexec_fn=pin,
    )
    os.close(write_end)
    try:
        watch = harness._watch(read_end, 1, 0.1, harness=stand_in.pid)
        return watch, time.monotonic() - started
    finally:
        for process in (*busy, stand_in):
            process.kill()
            process.wait()
        os.close(read_end)


def test_the_trainer_waits_for_a_harness_that_waits_for_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that gets little CPU takes longer than its limit (which stretches by its wait), and a harness that gets
    none cannot write its records. The trainer reads the harness's processes itself: on a core shared with 8 busy
    processes (about 1/9 of it) a case (the harness's child) that needs 0.1 CPU seconds, and then the harness's own
    0.1 CPU seconds, are not given up on at the trainer's 1 s deadline: it moves on while they wait (up to WAIT_CAP x
    1 s), and the record comes. A harness that runs and writes nothing is given up on (at the deadline where the
    machine is idle, by WAIT_CAP x 1 s where it is busy)."""
    monkeypatch.setattr(harness, "HARNESS_GRACE_S", 0.9)  # each record within 1 s of the last
    spin = "while time.process_time() < 0.1:\n    pass\n"
    program = (
        "import os, time\nos.write(fd, b'S 0\\n')\nif os.fork() == 0:\n    "
        + spin.replace("\n ", "\n     ")
        + "    os._exit(0)\nos.wait()\n"
        + spin
        + "os.write(fd, b'D 0 0 0 0.1 0.1 0\\n')\n"
    )
    watch, elapsed = watch_a_harness(program, crowd=8)
    assert (watch.stalled, watch.reports) == (False, [(0, False, 0.1, 0.1, 0.0, 0)]), elapsed
    assert elapsed > 1.0, "the record came only after the first deadline: nothing was tested"
    watch, elapsed = watch_a_harness("while True:\n    pass\n", crowd=0)
    assert watch.stalled and watch.reports == [] and 1.0 <= elapsed < 1.0 * bootstrap.WAIT_CAP + 0.5, elapsed


def test_cases_run_one_process_each_where_the_harness_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = harness.threading.Event()
    refused.set()
    monkeypatch.setattr(harness, "_HARNESS_REFUSED", refused)
    results = sandbox.run_python_cases("print(input())", ["a", ("b", "\nprint('suffix')")])
    assert [(result.status, result.stdout) for result in results] == [("ok", "a\n"), ("ok", "b\nsuffix\n")]
    assert len({result.sandbox_id for result in results}) == 2
    # as in the harness, a case with a suffix runs the code as the module `solution`: its __main__ block is skipped
    # (it ran as __main__ here, and input() met the end of the empty stdin); the suffix is numbered after the code
    results = sandbox.run_python_cases(GUARDED, [("", "\nprint(name())\n"), ("x\n", ""), ("", "\nassert 0\n")])
    assert [(result.status, result.stdout) for result in results[:2]] == [("ok", "solution\n"), ("ok", "x\n")]
    assert results[2].status == "error" and "line 7, in <module>\n    assert 0\nAssertionError" in results[2].stderr


GUARDED = (  # a program whose __main__ block reads stdin; `from __future__` must start the code
    "from __future__ import annotations\n"
    "def name() -> str:\n    return __name__\n"
    "if __name__ == '__main__':\n    print(input())\n"
)
