# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/bench_async.py's workload, mode parsing and the settings of each run (no run)."""

from types import ModuleType

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_repo_file("benchmarks/bench_async.py", "bench_async")


def test_the_workload_is_heavy_tailed_as_asked(bench: ModuleType) -> None:
    rows = bench.workload_rows(200, short=32, long=512, long_share=0.1, seed=0)
    caps = [row["max_response_tokens"] for row in rows]
    assert caps.count(512) == 20 and caps.count(32) == 180
    assert rows == bench.workload_rows(200, short=32, long=512, long_share=0.1, seed=0)  # fixed by the seed
    assert len({row["prompt"] for row in rows}) == 200


def test_modes_and_their_overrides(bench: ModuleType) -> None:
    assert bench.parse_mode("sync") == ("sync", 0, "auto")
    assert bench.parse_mode("colocated:4:bypass") == ("colocated", 4, "bypass")
    assert bench.parse_mode("disaggregated:2") == ("disaggregated", 2, "auto")
    with pytest.raises(SystemExit, match="'fast' is not one of"):
        bench.parse_mode("fast:2")
    with pytest.raises(SystemExit, match="sync takes no"):
        bench.parse_mode("sync:2")
    args = bench.parse_args(["--modes", "sync,colocated:3"])
    run = bench.grpo_args(args, "colocated", 3, "tis")
    assert "worker.rollout.mode=colocated" in run.ours_override
    assert "worker.rollout.max_staleness=3" in run.ours_override
    assert "algorithm.rollout_correction.mode=tis" in run.ours_override
    assert run.response_length == 512 and run.max_num_batched_tokens >= 64 + 512
    # a disaggregated run splits the 2 CPU processes into one trainer and one engine
    command = bench.bench_grpo.ours_command(
        bench.grpo_args(args, "disaggregated", 1, "auto"), {"ours": "train.jsonl", "reward": "reward.py"}, "m", "/r"
    )
    assert "worker.rollout.mode=disaggregated" in command
    assert "trainer.n_gpus_per_node=1" in command and "worker.rollout.n_gpus_per_node=1" in command


def test_a_gpu_run_passes_its_device_and_model_to_bench_grpo(bench: ModuleType) -> None:
    args = bench.parse_args(["--device", "cuda", "--model", "0.5b", "--modes", "sync"])
    run = bench.grpo_args(args, "sync", 0, "auto")
    assert (run.device, run.model, run.gpus, run.sides) == ("cuda", "0.5b", 1, ["ours"])
    command = bench.bench_grpo.ours_command(run, {"ours": "train.jsonl", "reward": "reward.py"}, "model", "/tmp/run")
    assert "trainer.device=cuda" in command and "worker.rollout.tensor_parallel_size=1" in command


def test_bench_episodes_arguments() -> None:
    episodes = load_repo_file("benchmarks/bench_episodes.py", "bench_episodes")
    args = episodes.parse_args(["--sides", "verifiers", "--prompts", "2"])
    assert args.sides == ["verifiers"] and args.prompts == 2
    with pytest.raises(SystemExit):
        episodes.parse_args(["--sides", "builtin,langchain"])
    assert set(episodes.SIDES) == {"builtin", "verifiers"}


def test_bench_episodes_measures_the_builtin_environment(tmp_path) -> None:
    """It stopped at once with "too many values to unpack" since the runner's `_prepare_inputs` also returns the
    checkpoint to resume from. A real run: the tiny Qwen2's engine in the benchmark's process, one round of the
    calculator's episodes after a warm-up round."""
    import json
    import subprocess
    import sys

    from repo_files import REPO

    command = [sys.executable, str(REPO / "benchmarks" / "bench_episodes.py"), "--prompts", "2", "--rounds", "1"]
    command += ["--sides", "builtin", "--workdir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["error"] is None and "verifiers" not in report
    assert report["builtin"]["episodes_per_round"] == 4 and report["builtin"]["s_per_episode"] > 0
    assert report["builtin"]["model_turns_per_episode"] >= 1


def test_trained_tokens_are_the_responses_tokens(bench: ModuleType) -> None:
    """The tables once counted each sample's prompt tokens as trained (perf/total_num_tokens)."""
    steps = [
        {"timing_s/step": 2.0, "response_length/mean": 50.0, "perf/total_num_tokens": 64 * 90.0},
        {"timing_s/step": 2.0, "timing_s/save_checkpoint": 1.0, "response_length/mean": 70.0},
    ]
    assert bench.trained_tokens_per_s(steps, samples=64) == 64 * (50 + 70) / 4.0


STAND_IN_DRIVER = """
import os, sys
sys.path.insert(0, {benchmarks!r})
import bench_async, bench_grpo
import verl.models.tiny_models

verl.models.tiny_models.get_or_build_tiny_model = lambda *args, **kwargs: "model"
stand_in = [sys.executable, "-c", "import time; time.sleep(600)  # the run"]
bench_grpo.run_ours = lambda args, paths, model, run_dir: bench_grpo.run_measured(
    "ours", stand_in, dict(os.environ), run_dir, 600.0
)
bench_async.main(["--steps", "4", "--modes", "sync", "--workdir", {workdir!r}])
"""


def test_a_sigterm_to_the_benchmark_ends_the_run_it_started(tmp_path) -> None:
    """`timeout` (or a scheduler) ending bench_async left its run going: the run has a session of its own, which no
    signal to the benchmark's group reaches, and only bench_grpo's main turned SIGTERM into an unwinding exit. The
    run here is a stand-in (a sleeping Python started by bench_grpo.run_measured, as the trainer is), not a training
    run."""
    from processes import sigterm_ends_its_run
    from repo_files import REPO

    script = tmp_path / "driver.py"
    script.write_text(STAND_IN_DRIVER.format(benchmarks=str(REPO / "benchmarks"), workdir=str(tmp_path / "work")))
    sigterm_ends_its_run(script, REPO, 60)


def test_a_sigterm_as_the_run_starts_ends_it_too(tmp_path) -> None:
    """bench_grpo.run_measured started its memory sampler before the block that ends the run: a SIGTERM meanwhile
    unwound past it and left the run going. The sampler's start is made to take 3 s here."""
    from processes import sigterm_ends_its_run
    from repo_files import REPO

    slow_sampler = (
        "import time\n"
        "class SlowSampler(bench_grpo.TreeRSSSampler):\n"
        "    def __init__(self, pid):\n"
        "        time.sleep(3)\n"
        "        super().__init__(pid)\n"
        "bench_grpo.TreeRSSSampler = SlowSampler\n"
    )
    driver = STAND_IN_DRIVER.format(benchmarks=str(REPO / "benchmarks"), workdir=str(tmp_path / "work"))
    script = tmp_path / "driver.py"
    script.write_text(driver.replace("bench_async.main(", slow_sampler + "bench_async.main("))
    sigterm_ends_its_run(script, REPO, 60)
