# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The GPU checks in one command: `pytest tests/gpu`, then `bench_actor.py` on the workloads of docs/gpu.md.

Cases (`--cases`, comma-separated MODE:LENGTHS): packed:variable (target >= 1.3x the bare loop), packed:full and
padded:full (target >= 0.95x), packed:capped (variable prompts, every response at the limit). Each case runs in its
own process with the model of `--model` (0.5b; `--quick` runs the tiny CPU sizes instead, on any device). Logs go to
`--output`; the summary prints the pytest result line, one line per case (update and log-prob ratios against the
bare loop, MFU on CUDA) and, last, one JSON object with the figures.

    python benchmarks/gpu_check.py [--model 0.5b] [--cases packed:variable,packed:full] [--skip-tests]
"""

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CASES = "packed:variable,packed:full,padded:full,packed:capped"
TARGETS = {"variable": 1.3, "full": 0.95}
"""Update and log-prob ratio targets by workload (issue 13); the padded mode has none on variable lengths."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="0.5b", choices=("tiny", "0.5b", "1.5b"), help="bench_actor's --model (default: 0.5b)"
    )
    parser.add_argument("--quick", action="store_true", help="bench_actor --quick (the tiny CPU sizes)")
    parser.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated MODE:LENGTHS")
    parser.add_argument("--skip-tests", action="store_true", help="only the benchmarks")
    parser.add_argument("--bench-arg", action="append", default=[], help="one more bench_actor argument")
    parser.add_argument("--output", default=os.path.join(REPO, "outputs", "gpu_check"), help="logs")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per step before it is stopped")
    args = parser.parse_args(argv)
    args.cases = [tuple(case.split(":")) for case in args.cases.split(",") if case]
    for case in args.cases:
        if len(case) != 2 or case[0] not in ("packed", "padded") or case[1] not in ("full", "variable", "capped"):
            parser.error(f"--cases takes MODE:LENGTHS with MODE packed|padded, LENGTHS full|variable|capped: {case}")
    if not args.quick and args.model != "tiny":
        import torch

        if not torch.cuda.is_available():  # else bench_actor runs the GPU workloads on the CPU, for hours
            parser.error(
                f"torch sees no CUDA device in this process, and --model {args.model} is a GPU workload; "
                "run it on a GPU machine, or pass --quick for the tiny CPU sizes on any device."
            )
    return args


def run_logged(command: list[str], log_path: str, timeout: float) -> tuple[int, str, float]:
    """Run `command` in the repository with its output in `log_path`; (return code, output, seconds). It runs in a
    process group of its own, which is ended whole when it returns or times out (or this script stops): a test's Ray
    workers or engine processes would otherwise hold the GPU through the cases after it."""
    start = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            code = 124
        finally:  # what the step left running in its group, or the whole step on a timeout
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with open(log_path, errors="replace") as log:
        output = log.read()
    return code, output, time.monotonic() - start


def pytest_summary(output: str) -> str:
    """pytest's final line ("3 passed, 2 skipped in 4.1s"), or the output's last line."""
    lines = [line.strip("= ") for line in output.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"\b(passed|failed|skipped|error|errors|no tests ran)\b", line) and " in " in line:
            return line
    return lines[-1] if lines else "(no output)"


def last_json(output: str) -> dict[str, Any] | None:
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def case_line(mode: str, lengths: str, figures: dict[str, Any] | None, code: int) -> str:
    if figures is None:
        return f"{mode:>6} {lengths:<8} failed (exit {code}), see the log"
    target = TARGETS.get(lengths) if (mode == "packed" or lengths == "full") else None
    parts = [f"{mode:>6} {lengths:<8}"]
    for phase in ("update", "log_probs"):
        ratio = figures[f"{phase}_ratio"]
        verdict = "" if target is None else (" ok" if ratio >= target else f" < {target}")
        mfu = figures.get(f"{phase}_project_mfu")
        parts.append(f"{phase} {ratio:.3f}x{verdict}" + (f" (MFU {mfu:.1%})" if mfu is not None else ""))
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    report: dict[str, Any] = {"check": "gpu", "tests": None, "cases": {}}
    if not args.skip_tests:
        command = [sys.executable, "-m", "pytest", os.path.join("tests", "gpu"), "-rs", "-q", "-p", "no:cacheprovider"]
        code, output, seconds = run_logged(command, os.path.join(args.output, "pytest.log"), args.timeout)
        report["tests"] = {"exit": code, "summary": pytest_summary(output), "seconds": round(seconds, 1)}
        print(f"tests/gpu: {report['tests']['summary']} (exit {code})", flush=True)
    for mode, lengths in args.cases:
        command = [sys.executable, os.path.join("benchmarks", "bench_actor.py"), "--mode", mode, "--lengths", lengths]
        command += ["--quick"] if args.quick else ["--model", args.model]
        command += args.bench_arg
        log_path = os.path.join(args.output, f"bench_{mode}_{lengths}.log")
        code, output, seconds = run_logged(command, log_path, args.timeout)
        figures = last_json(output) if code == 0 else None
        report["cases"][f"{mode}:{lengths}"] = {"exit": code, "seconds": round(seconds, 1), "figures": figures}
        print(case_line(mode, lengths, figures, code), flush=True)
    print(json.dumps(report))
    return report


def exit_status(report: dict[str, Any]) -> int:
    """1 where tests/gpu failed or a case did not finish (its exit code in the report), else 0: a script running the
    check sees the failure, not only its JSON line."""
    tests = report.get("tests")
    failed = tests is not None and tests["exit"] != 0
    return 1 if failed or any(case["exit"] != 0 for case in report["cases"].values()) else 0


if __name__ == "__main__":
    sys.exit(exit_status(main()))
