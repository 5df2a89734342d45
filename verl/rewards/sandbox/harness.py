# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Several cases of one program in one sandboxed process: the trainer's side of the harness (bootstrap.py runs the
other side). The harness compiles the program once and forks a child per case; it reports through a pipe no process
of the program can reach, and the trainer reads the cases' outputs from files the harness hands each case.
"""

import functools
import logging
import math
import os
import select
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace

from verl.rewards.sandbox import fusion
from verl.rewards.sandbox.bootstrap import IMPORTED_AS, WAIT_CAP, CpuWait, Stretch, wait_for_exit
from verl.rewards.sandbox.limits import STDERR_TAIL_BYTES, SandboxLimits, SandboxResult, SandboxUnavailable
from verl.rewards.sandbox.plans import _Plan
from verl.rewards.sandbox.runner import (
    _check_workers,
    _classify,
    _isolation,
    _read_tail,
    _run,
    _start_interpreter,
    _workspace,
    read_only_copy,
)


logger = logging.getLogger(__name__)


CASES_PER_PROCESS = 32
"""run_python_cases runs at most this many cases in one process (each holds three open files in the trainer)."""
HARNESS_GRACE_S = 2.0
"""run_python_cases: seconds the harness may take beyond its longest case (wall_s stretched by the case's waits for a
CPU, at most WAIT_CAP x wall_s) or its start-up before the trainer gives up on it, kills the process and counts the
running case as a timeout; the trainer's deadline stretches too while the harness's processes wait for a CPU."""


TRICKLE_BYTES = 4096
TRICKLE_REST_S = 0.01
"""A case's stdout that gave fewer than TRICKLE_BYTES at a read rests TRICKLE_REST_S, so tiny writes cost the trainer
a read per TRICKLE_BYTES or per rest, not one per write; a writer that fills the pipe waits at most that long."""


CaseSpec = str | tuple[str, str]
"""One case of run_python_cases: its stdin, or (stdin, code_suffix), the suffix run after the code."""

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


def _one_file(code: str, suffix: str) -> str:
    """`code` and a case's `suffix` as one program, where they run as one file (sandbox_fusion; one process per case
    where the harness cannot protect its results): with a suffix, the code runs as the module IMPORTED_AS, as in the
    harness, then the suffix in its namespace (compiled apart, numbered as if appended: the code may start with
    `from __future__`), and a traceback shows their frames and lines, not this wrapper's (the suffix's once the code
    has run, as in the harness)."""
    if not suffix:
        return code
    padded = "\n" * code.count("\n") + suffix
    return f"""import linecache as _verl_lines, sys as _verl_sys, types as _verl_types
_verl_file = globals().get("__file__", "solution.py")
_verl_module = _verl_types.ModuleType({IMPORTED_AS!r})
_verl_module.__file__ = _verl_file
_verl_sys.modules["__main__"] = _verl_sys.modules[{IMPORTED_AS!r}] = _verl_module
_verl_code = {code!r}
_verl_lines.cache[_verl_file] = (0, None, _verl_code.splitlines(True), _verl_file)
try:
    exec(compile(_verl_code, _verl_file, "exec", dont_inherit=True), _verl_module.__dict__)
    _verl_lines.cache[_verl_file] = (0, None, (_verl_code + {suffix!r}).splitlines(True), _verl_file)
    exec(compile({padded!r}, _verl_file, "exec", dont_inherit=True), _verl_module.__dict__)
except SystemExit:
    raise
except BaseException as _verl_error:
    import traceback
    traceback.print_exception(type(_verl_error), _verl_error, _verl_error.__traceback__.tb_next)
    _verl_sys.exit(1)
"""


def run_python_cases(code: str, cases: Sequence[CaseSpec], limits: SandboxLimits | None = None) -> list[SandboxResult]:
    """Run `code` once per case, all cases in one sandboxed process; one result per case, in order.

    A sandboxed interpreter costs far more to start than a small program runs, so one starts per CASES_PER_PROCESS
    cases, isolated as in `run_python`; its harness compiles the code once and forks a child per case. A child gets
    the case's stdin, its own stdout pipe (read by the trainer as it runs), stderr file (capped at output_kb),
    process group, RLIMIT_CPU count and memory limit, and runs the code then the case's suffix (compiled apart,
    numbered as if appended), ending as an interpreter would. The code runs as `__main__`; in a case with a suffix
    (tests that call its functions) as the module `solution` (bootstrap.IMPORTED_AS; sys.modules["__main__"] too),
    so its `if __name__ == "__main__":` block does not run, as where graders import a solution. After each case the
    harness kills and reaps its processes and empties the scratch directory: globals, modules, working-directory
    files and processes do not carry over (files in /tmp and /dev/shm do: docs/rewards.md). Only a case's child
    reads its suffix. All cases together take at most limits.sample_wall_s.

    Results come through a pipe only the undumpable harness holds; what a case prints is never parsed. A case that
    kills or stops the harness counts as "killed" or "timeout", and later cases run in a fresh process (as after
    one that changes the harness's limits). Statuses are classified per case as in `run_python`, except: `wall_s`
    counts from the fork; `cpu_s` adds the case's reaped processes; memory_mb includes the harness's modules; a
    process's cases share the hash seed and uid; only the program's globals are finalized; a suffix cannot complete
    a statement the code leaves open. Without a dedicated uid, the trainer's descriptors of other cases' files are
    reachable through /proc, as its memory already is.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, got {type(code).__name__}.")
    limits = limits or SandboxLimits()
    if limits.isolation == "sandbox_fusion":
        return [fusion.run_case(_one_file(code, suffix), stdin, limits) for stdin, suffix in _case_specs(cases)]
    return _run_cases(code, _case_specs(cases), limits, _isolation(limits.isolation).plan)


def run_many_cases(
    jobs: Sequence[tuple[str, Sequence[CaseSpec]]], limits: SandboxLimits | None = None, max_workers: int = 4
) -> list[list[SandboxResult]]:
    """`run_python_cases` for each (code, cases) job (one sample_wall_s for all of its cases), `max_workers` jobs at a
    time; results in job order."""
    _check_workers(max_workers)
    limits = limits or SandboxLimits()
    specs = [(code, _case_specs(cases)) for code, cases in jobs]
    if not any(cases for _, cases in specs):
        return [[] for _ in specs]
    if limits.isolation == "sandbox_fusion":  # one request per case, max_workers at a time
        per_chunk, run = 1, lambda code, cases: [fusion.run_case(_one_file(code, cases[0][1]), cases[0][0], limits)]
    else:  # all of a job's cases in one _run_cases (CASES_PER_PROCESS per process, in turn): one sample_wall_s
        plan = _isolation(limits.isolation).plan  # probe once, before the threads race for it
        per_chunk = max(len(cases) for _, cases in specs)
        run = functools.partial(_run_cases, limits=limits, plan=plan)
    chunks = [
        (index, code, cases[start : start + per_chunk])
        for index, (code, cases) in enumerate(specs)
        for start in range(0, len(cases), per_chunk)
    ]
    results: list[list[SandboxResult]] = [[] for _ in specs]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(chunks)), thread_name_prefix="sandbox") as pool:
        for (index, _, _), chunk_results in zip(chunks, pool.map(lambda chunk: run(chunk[1], chunk[2]), chunks)):
            results[index].extend(chunk_results)
    return results


class _HarnessDidNotStart(RuntimeError):
    """The harness process ended before its first case: the sandbox did not start."""


_HARNESS_REFUSED = threading.Event()
"""Set when a harness could not protect its result pipe (prctl refused): cases then run one process each."""


def _run_cases(code: str, cases: list[tuple[str, str]], limits: SandboxLimits, plan: _Plan) -> list[SandboxResult]:
    """All `cases`, CASES_PER_PROCESS per process, within limits.sample_wall_s in all; a process that stops early
    leaves the rest to a fresh one, and the cases left when the budget is spent are timed out without running."""
    if limits.wall_s > limits.sample_wall_s:
        _warn_wall_capped(limits.wall_s, limits.sample_wall_s)
    results: list[SandboxResult] = []
    deadline, stretch = time.monotonic() + limits.sample_wall_s, (WAIT_CAP - 1) * limits.sample_wall_s
    while len(results) < len(cases):
        budget = deadline - time.monotonic()
        if budget <= 0:
            results.extend(_not_run(limits) for _ in cases[len(results) :])
            break
        if _HARNESS_REFUSED.is_set():
            stdin, suffix = cases[len(results)]
            results.append(
                _run(_one_file(code, suffix), stdin, replace(limits, wall_s=min(limits.wall_s, budget)), plan)
            )
            continue
        chunk = cases[len(results) : len(results) + CASES_PER_PROCESS]
        try:
            chunk_results, waited = _run_harness(code, chunk, limits, plan, budget)
        except _HarnessDidNotStart as first:  # once more (a passing shortage under load), then the run stops
            try:
                chunk_results, waited = _run_harness(code, chunk, limits, plan, budget)
            except _HarnessDidNotStart:
                raise SandboxUnavailable(
                    f"The code sandbox (isolation={limits.isolation}) stopped before running any program, twice "
                    f"({first}); the programs would have been scored as failing. Check the machine's free disk, "
                    "processes and user namespaces."
                ) from None
        results.extend(chunk_results)
        waited = min(waited, stretch)  # as the harness stretched its own budget
        deadline, stretch = deadline + waited, stretch - waited
    return results


@functools.cache
def _warn_wall_capped(wall_s: float, sample_wall_s: float) -> None:
    """Once per pair of limits: a case never gets wall_s when all of a program's cases get less."""
    logger.warning(
        "SandboxLimits.wall_s=%s exceeds sample_wall_s=%s: all cases of one program share sample_wall_s, so no case "
        "gets more than %s s; raise sample_wall_s to at least wall_s.",
        wall_s,
        sample_wall_s,
        sample_wall_s,
    )


def _not_run(limits: SandboxLimits) -> SandboxResult:
    reason = f"not run: the program's cases had used up their time budget (sample_wall_s={limits.sample_wall_s})"
    return SandboxResult("timeout", -9, b"", reason, 0.0)


@dataclass
class _Watch:
    """What the trainer learned from the harness's result pipe."""

    reports: list[tuple[int, bool, float, float, float, int]]
    """(returncode, timed out, wall seconds, CPU seconds, seconds waited for a CPU, the cgroup's OOM kills so far) of
    each finished case, in order."""
    running_since: float | None = None
    """When the case after the reported ones started (trainer's clock), if it did and did not finish."""
    stalled: bool = False
    """The harness missed a deadline (a case or its start-up took wall_s + HARNESS_GRACE_S) and was killed."""
    refused: str = ""
    """The harness could not protect its result pipe, and ran nothing."""


class _Output:
    """A case's stdout: a pipe the trainer reads while the case runs (the program cannot seek or read it back). The
    first `limit` bytes are kept, then the pipe is closed: writing on gets EPIPE ("output_limit")."""

    def __init__(self, read_end: int, limit: int) -> None:
        self.fd: int | None = read_end
        self.limit = limit
        self.data = bytearray()
        self.last = 0
        os.set_blocking(read_end, False)

    def read(self) -> bool:
        """Take what the pipe holds now (its size in `last`); False once it is closed (end of file or the limit)."""
        self.last = 0
        while self.fd is not None:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            self.last += len(chunk)
            self.data += chunk[: self.limit - len(self.data)]
            if not chunk or len(self.data) >= self.limit:
                self.close()
        return False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _watch(
    read_end: int,
    count: int,
    wall_s: float,
    outputs: Sequence[_Output] = (),
    harness: int | None = None,
    oom_kills: Callable[[], int] = lambda: 0,
) -> _Watch:
    """Read the harness's records until it closes the pipe or misses a deadline, and the cases' `outputs` meanwhile.

    Records, in this order only: "S i" (case i starts), "D i returncode timed_out wall cpu waited" (case i ended), or
    "U reason" alone. Each must come within wall_s + HARNESS_GRACE_S of the previous one (or of the start), plus the
    time the process `harness` or its descendants (the running case) lost waiting for a CPU since then, as the case's
    own limit stretches: a Stretch, up to WAIT_CAP times (a starved harness cannot write).
    """
    watch = _Watch(reports=[])
    budget = wall_s + HARNESS_GRACE_S

    def from_now() -> Stretch:  # the deadline after a record (or the start), moving on by the waits from then on
        return Stretch(budget, None if harness is None else CpuWait(lambda: [harness], from_now=True))

    deadline = from_now()
    poller = select.poll()
    poller.register(read_end, select.POLLIN)
    readers = {output.fd: output for output in outputs if output.fd is not None}
    for fd in readers:
        poller.register(fd, select.POLLIN)
    pending = b""
    resting: dict[int, float] = {}  # outputs that trickle, and when to poll them again
    while True:
        now = time.monotonic()
        for fd, until in list(resting.items()):
            if until <= now:
                poller.register(fd, select.POLLIN)
                del resting[fd]
        remaining = deadline.deadline - now
        if remaining <= 0:
            if not deadline.extend():
                watch.stalled = True
                return watch
            continue
        events = poller.poll(math.ceil(min([remaining, *(until - now for until in resting.values())]) * 1000))
        for fd, _ in events:
            if fd not in readers:
                continue
            if not readers[fd].read():
                poller.unregister(fd)
                del readers[fd]
            elif readers[fd].last < TRICKLE_BYTES:  # the kernel gathers the next bytes in the pipe meanwhile
                poller.unregister(fd)
                resting[fd] = time.monotonic() + TRICKLE_REST_S
        if not any(fd == read_end for fd, _ in events):
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
                elif fields[0] == "D" and len(fields) == 7 and int(fields[1]) == index:
                    if watch.running_since is None:
                        raise ValueError("an end without a start")
                    wall, cpu, waited = (float(field) for field in fields[4:])
                    watch.reports.append((int(fields[2]), fields[3] == "1", wall, cpu, waited, oom_kills()))
                    watch.running_since = None
                else:
                    raise ValueError("unexpected record")
            except (IndexError, ValueError) as error:
                logger.warning("Sandbox harness sent %r (%s); its process is stopped.", line[:200], error)
                return watch
            deadline = from_now()


def _run_harness(
    code: str, cases: list[tuple[str, str]], limits: SandboxLimits, plan: _Plan, budget: float
) -> tuple[list[SandboxResult], float]:
    """Run the harness on `cases` within `budget` wall seconds in all (not counting their waits for a CPU); results
    of a non-empty prefix of them (the rest is for a fresh process, or timed out when the budget is spent), and the
    seconds the reported cases waited."""
    with ExitStack() as stack:
        scratch, setup, cgroup = stack.enter_context(_workspace(limits, plan, harness=True))
        # Unlinked files of the trainer's (mode 0600), reachable only through the descriptors each case gets: its
        # stdin, stderr and code suffix (bootstrap.py's _read_suffix: a file apart from stdin, which the program could
        # read again from its start, and closed before the program runs, as the suffix may hold the case's secret).
        files = [[stack.enter_context(tempfile.TemporaryFile(dir=scratch)) for _ in range(3)] for _ in cases]
        log = stack.enter_context(tempfile.TemporaryFile(dir=scratch))  # the harness's own stdout and stderr
        for (stdin_file, _, suffix_file), (stdin, suffix) in zip(files, cases):
            encoded = suffix.encode("utf-8")
            suffix_file.write(b"%d\n%s" % (len(encoded), encoded))
            stdin_file.write(stdin.encode("utf-8"))
            for file in (stdin_file, suffix_file):
                file.flush()
        stdin_ends = [read_only_copy(stdin_file) for stdin_file, _, _ in files]
        suffix_ends = [read_only_copy(suffix_file) for _, _, suffix_file in files]
        for fd in (*stdin_ends, *suffix_ends):
            stack.callback(os.close, fd)
        read_end, write_end = os.pipe()
        stack.callback(os.close, read_end)
        outputs, stdout_ends = [], []
        for _ in cases:
            output_read, output_write = os.pipe()
            outputs.append(_Output(output_read, limits.output_kb * 1024))
            stack.callback(outputs[-1].close)
            stdout_ends.append(output_write)
        descriptors = [
            (stdin, stdout, stderr.fileno(), suffix)
            for stdin, (_, stderr, _), stdout, suffix in zip(stdin_ends, files, stdout_ends, suffix_ends)
        ]
        # the manifest: limits and descriptor numbers, on the harness's command line
        manifest = f"{float(limits.wall_s)!r} {budget!r} {write_end} " + " ".join(
            ",".join(map(str, fds)) for fds in descriptors
        )
        try:
            pass_fds = (write_end, *(fd for fds in descriptors for fd in fds))
            interpreter = _start_interpreter(
                scratch, code, setup, subprocess.DEVNULL, (log, log), (manifest,), pass_fds
            )
        finally:
            for fd in (write_end, *stdout_ends):  # the harness holds the only write ends: end of file means it is gone
                os.close(fd)
        watch = _Watch(reports=[], stalled=True)
        try:
            kills = cgroup.oom_kills if cgroup is not None else lambda: 0  # read as each case ends: its own kills
            watch = _watch(read_end, len(cases), limits.wall_s, outputs, interpreter.process.pid, kills)
            if not watch.stalled:
                wait_for_exit(interpreter.process.pid, HARNESS_GRACE_S)
        finally:
            returncode, _, ended = interpreter.end(setup, cgroup)
        for output in outputs:  # every writer is gone now: what is left in the pipes
            output.read()
        kills_before, kills_at_end = 0, cgroup.oom_kills() if cgroup is not None else 0
        harness_log, _ = _read_tail(log, STDERR_TAIL_BYTES)
        if harness_log.strip():
            logger.warning(
                "Sandbox harness %s (exit %d) wrote: %s", interpreter.sandbox_id, returncode, harness_log[-2000:]
            )
        if not watch.reports and watch.running_since is None and not watch.stalled and returncode != 0:
            # no program ran: the sandbox itself did not start (bwrap out of namespaces, a full disk), which is no
            # program's failure to score
            raise _HarnessDidNotStart(f"exit {returncode}: {harness_log.strip()[-1000:] or 'no output'}")
        if watch.refused:
            logger.warning(
                "Sandbox harness cannot protect its results here (%s): one process per case.", watch.refused
            )
            _HARNESS_REFUSED.set()
            return [], 0.0
        results = []
        for (_, stderr_file, _), output, report in zip(files, outputs, [*watch.reports, None]):
            stdout = bytes(output.data)
            stderr, stderr_size = _read_tail(stderr_file, STDERR_TAIL_BYTES)
            largest = max(len(stdout), stderr_size)
            if report is not None:
                case_returncode, timed_out, wall, cpu, _, kills = report
                oom, kills_before = kills > kills_before, kills  # (one case's kill made every later failure one)
                status_name = _classify(timed_out, case_returncode, cpu, limits, largest, stderr, oom)
            elif watch.running_since is not None or not watch.reports:
                # the harness ended during this case (or before the first): charged to the case, which never passes
                case_returncode, cpu = returncode, 0.0
                wall = ended - (interpreter.start if watch.running_since is None else watch.running_since)
                oom = kills_at_end > kills_before
                status_name = _classify(watch.stalled, returncode, cpu, limits, largest, stderr, oom)
                status_name = "error" if status_name == "ok" else status_name
            else:
                break
            results.append(
                SandboxResult(
                    status_name, case_returncode, stdout, stderr, wall, cpu, interpreter.sandbox_id, setup.uid
                )
            )
    return results, sum(report[4] for report in watch.reports)
