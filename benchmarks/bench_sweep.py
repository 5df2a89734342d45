# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
r"""Runs one after the other in one Python process (a sweep, a notebook, the test suite): `run_ppo` called `--runs`
times on bench_grpo's workload (the tiny Qwen2, arithmetic prompts, 2 CPU worker processes), `--steps` steps each,
in one Ray session. Prints each run's wall time (the call to `run_ppo`, start-up included) and, last, one JSON line.
On the CPU the workers of every run after the first are forks of a warm Python (verl/trainer/warm_workers.py);
`VERL_WARM_PYTHON=0` starts them plainly, for comparison.

    OMP_NUM_THREADS=1 python benchmarks/bench_sweep.py [--runs 4 --steps 1 --prompts 4 --n 2 --response-length 16]
"""

import argparse
import json
import os
import sys
import tempfile
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_grpo  # noqa: E402  (its workload and overrides)

from verl.utils.cli import positive  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    workload_help = bench_grpo.build_parser().format_help().split("options:", 1)[-1]
    epilog = "bench_grpo's options (the workload; --steps is this script's):" + workload_help
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=positive(int), default=4)
    parser.add_argument("--steps", type=positive(int), default=1, help="training steps per run")
    args, rest = parser.parse_known_args(argv)
    # bench_grpo's other options (--prompts, --n, --response-length, ...), here with a short run's defaults
    workload = bench_grpo.parse_args(
        ["--sides", "ours", "--prompts", "4", "--n", "2", "--response-length", "16"] + rest
    )
    workload.steps = args.steps
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import ray

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.trainer.config import load_config
    from verl.trainer.ray_setup import start_ray
    from verl.trainer.runner import run_ppo

    workdir = tempfile.mkdtemp(prefix="bench_sweep_")
    paths = bench_grpo.write_workload(workdir, bench_grpo.arithmetic_rows(workload.prompts * workload.steps, 0))
    model = get_or_build_tiny_model("qwen2", os.path.join(workdir, "models"))
    start_ray("cpu", 2, 300.0)  # one Ray session for every run, as a sweep's
    seconds = []
    try:
        for index in range(args.runs):
            command = bench_grpo.ours_command(workload, paths, model, os.path.join(workdir, f"run{index}"))
            config = load_config(command[3:])  # the overrides after `python -m verl.trainer.main`
            start = time.monotonic()
            run_ppo(config)
            seconds.append(round(time.monotonic() - start, 2))
            print(f"run {index}: {seconds[-1]:.1f} s", flush=True)
    finally:
        ray.shutdown()
    result = {
        "bench": "sweep",
        "runs": args.runs,
        "steps": workload.steps,
        "warm_workers": os.environ.get("VERL_WARM_PYTHON", "1") != "0",
        "run_s": seconds,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
