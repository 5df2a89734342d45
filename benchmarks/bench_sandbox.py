# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the code reward's sandbox costs: `run_many_cases` (one sandboxed process per sample, running all its test
cases) under each isolation mode (bubblewrap, the default, and the weaker built-in namespaces), and `run_many` (one
process per case) under the default, on the same programs and cases.

    python benchmarks/bench_sandbox.py [--samples 64 --cases 3 --workers 4 --repeats 2 --modes bwrap,namespaces]

The last line printed is one JSON object with the figures (the best of the repeats for each way; programs/s is
samples per second of `run_many_cases`).
"""

import argparse
import json
import os
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.rewards import sandbox  # noqa: E402


PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def _statuses(results: list[sandbox.SandboxResult]) -> dict[str, int]:
    """How many results have each status (a busy machine starves the sandbox's low-weight cgroup into timeouts)."""
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", default="bwrap,namespaces", help="isolation modes of run_many_cases, in turn")
    args = parser.parse_args()
    modes = [mode for mode in args.modes.split(",") if mode]
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
            f"{rate:5.1f} programs/s"
        )
    figures = {
        "samples": args.samples,
        "cases": args.cases,
        "workers": args.workers,
        **{f"{name}_s": round(value, 3) for name, value in best.items()},
        **{f"{name}_programs_per_s": round(args.samples / value, 2) for name, value in best.items()},
        "load": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
