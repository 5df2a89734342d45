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


def test_trained_tokens_are_the_responses_tokens(bench: ModuleType) -> None:
    """The tables once counted each sample's prompt tokens as trained (perf/total_num_tokens)."""
    steps = [
        {"timing_s/step": 2.0, "response_length/mean": 50.0, "perf/total_num_tokens": 64 * 90.0},
        {"timing_s/step": 2.0, "timing_s/save_checkpoint": 1.0, "response_length/mean": 70.0},
    ]
    assert bench.trained_tokens_per_s(steps, samples=64) == 64 * (50 + 70) / 4.0
