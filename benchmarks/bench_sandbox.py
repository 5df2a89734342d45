# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the code reward's sandbox costs: `run_many_cases` (one sandboxed process per sample, running all its test
cases) under each isolation mode (bubblewrap, the default, and the weaker built-in namespaces), and `run_many` (one
process per case) under the default, on the same programs and cases.

    python benchmarks/bench_sandbox.py [--samples 64 --cases 3 --workers 4 --repeats 2 --modes bwrap,namespaces]
    python benchmarks/bench_sandbox.py --busy 2    # beside 2 busy processes (a trainer): the CPU weight's trade

The last line printed is one JSON object with the figures (the best of the repeats for each way; samples/s is
samples per second, each running every case). With `--busy N`: N busy nice-0 processes stand for a trainer that keeps the
cores busy; it reports a trivial and a one-CPU-second program's status and wall time beside them, and the CPU they
keep while four programs spin for their whole `cpu_s` (against their CPU alone).
"""

import argparse
import json
import multiprocessing
import os
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.rewards import sandbox  # noqa: E402
from verl.utils.cli import positive  # noqa: E402


PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def _statuses(results: list[sandbox.SandboxResult]) -> dict[str, int]:
    """How many results have each status (a busy machine starves the sandbox's low-weight cgroup into timeouts)."""
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    return counts


def _busy(stop: "multiprocessing.synchronize.Event", out: "multiprocessing.Queue") -> None:
    """Spin until `stop`; then put this process's (wall, CPU) time marks, one per 100,000 turns."""
    turns, marks = 0, []
    while not stop.is_set():
        turns += 1
        if turns % 100_000 == 0:
            marks.append((time.monotonic(), time.process_time()))
    out.put(marks)


def _cores(marks: list[tuple[float, float]], start: float, end: float) -> float:
    inside = [mark for mark in marks if start <= mark[0] <= end]
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if len(inside) > 1 else float("nan")


def contention(busy: int) -> dict:
    """The programs beside `busy` busy processes, and those processes' CPU beside four spinning programs."""
    sandbox.run_python("pass")  # the cgroup layout (and its CPU weight) is made before the busy processes start
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    spinners = [multiprocessing.Process(target=_busy, args=(stop, out)) for _ in range(busy)]
    for process in spinners:
        process.start()
    time.sleep(0.5)
    alone_start = time.monotonic()
    time.sleep(4.0)
    alone_end = time.monotonic()
    trivial = sandbox.run_python("print(sum(range(10**5)))")
    one_second = "x = 0\nfor i in range(12 * 10**6):\n    x += i\nprint(x)"
    second = sandbox.run_python(one_second)
    second_short = sandbox.run_python(one_second, limits=sandbox.SandboxLimits(wall_s=2))  # the wait does not count
    spin_start = time.monotonic()
    spun = sandbox.run_many([("while True: pass", "")] * 4, sandbox.SandboxLimits(wall_s=6, cpu_s=3), max_workers=4)
    spin_end = time.monotonic()
    stop.set()
    marks = [out.get() for _ in spinners]
    for process in spinners:
        process.join()
    figures = {
        "busy_processes": busy,
        "trivial_program": f"{trivial.status} in {trivial.wall_s:.2f} s",
        "one_cpu_second_program": f"{second.status} in {second.wall_s:.2f} s ({second.cpu_s:.2f} CPU s)",
        "the_same_at_wall_s_2": f"{second_short.status} in {second_short.wall_s:.2f} s ({second_short.cpu_s:.2f} CPU s)",
        "busy_cores_alone": round(sum(_cores(m, alone_start, alone_end) for m in marks), 2),
        "busy_cores_beside_4_spinning": round(sum(_cores(m, spin_start + 0.5, spin_end - 0.5) for m in marks), 2),
        "spinning_statuses": _statuses(spun),
    }
    for name, value in figures.items():
        print(f"{name:30s} {value}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=positive(int), default=64)
    parser.add_argument("--cases", type=positive(int), default=3)
    parser.add_argument("--workers", type=positive(int), default=4)
    parser.add_argument("--repeats", type=positive(int), default=2)
    parser.add_argument("--modes", default="bwrap,namespaces", help="isolation modes of run_many_cases, in turn")
    parser.add_argument("--busy", type=int, default=0, help="measure beside this many busy processes instead")
    args = parser.parse_args()
    if args.busy > 0:
        print(json.dumps(contention(args.busy)))
        return
    modes = [mode for mode in args.modes.split(",") if mode]
    unknown = sorted(set(modes) - set(sandbox.ISOLATION_MODES))
    if unknown or not modes:
        parser.error(f"--modes takes isolation modes among {sorted(sandbox.ISOLATION_MODES)}, got {args.modes!r}.")
    cases = [f"{i} {2 * i}\n" for i in range(args.cases)]
    expected = [f"{3 * i}\n" for i in range(args.cases)] * args.samples
    seconds: dict[str, list[float]] = {"run_many": [], **{f"run_many_cases[{mode}]": [] for mode in modes}}
    for mode in modes:
        print(f"isolation {mode}: {sandbox.isolation(mode)}")
    for _ in range(args.repeats):  # alternating, so a busy machine slows every way alike
        started = time.monotonic()
        separate = sandbox.run_many(
            [(PROGRAM, case) for _ in range(args.samples) for case in cases], max_workers=args.workers
        )
        seconds["run_many"].append(time.monotonic() - started)
        if [r.stdout for r in separate] != expected:
            raise SystemExit(f"the sandboxed programs did not print the expected sums: {_statuses(separate)}")
        for mode in modes:
            limits = sandbox.SandboxLimits(isolation=mode)
            started = time.monotonic()
            together = sandbox.run_many_cases([(PROGRAM, cases)] * args.samples, limits, max_workers=args.workers)
            seconds[f"run_many_cases[{mode}]"].append(time.monotonic() - started)
            flat = [r for job in together for r in job]
            if [r.stdout for r in flat] != expected:
                raise SystemExit(f"the sandboxed programs did not print the expected sums ({mode}): {_statuses(flat)}")
    best = {name: min(values) for name, values in seconds.items()}
    for name, value in best.items():
        rate = args.samples / value
        print(
            f"{name:28s} {value:6.2f} s for {args.samples} samples x {args.cases} cases ({args.workers} workers), "
            f"{rate:5.1f} samples/s"
        )
    figures = {
        "samples": args.samples,
        "cases": args.cases,
        "workers": args.workers,
        **{f"{name}_s": round(value, 3) for name, value in best.items()},
        **{f"{name}_samples_per_s": round(args.samples / value, 2) for name, value in best.items()},
        "load": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
