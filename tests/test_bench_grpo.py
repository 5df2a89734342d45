# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The pure helpers of benchmarks/bench_grpo.py: log parsing, throughput, TRL batching and the process-tree RSS
sampler on a dummy subprocess. No Ray, no TRL, no training run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_repo_file("benchmarks/bench_grpo.py", "bench_grpo")


def test_steady_state_skips_the_first_two_steps(bench: ModuleType) -> None:
    step_end = {1: 10.0, 2: 13.0, 3: 15.0, 4: 17.0}
    assert bench.steady_samples_per_s(step_end, samples_per_step=128) == pytest.approx(2 * 128 / 4.0)
    assert bench.steady_samples_per_s({1: 10.0, 2: 13.0}, 128) is None  # no step after the skipped ones
    assert bench.steady_samples_per_s({1: 10.0, 3: 13.0, 4: 15.0}, 128) is None  # end of step 2 unknown


def test_parse_ours_leaves_out_the_checkpoint_save(bench: ModuleType) -> None:
    rows, times = [], []
    for step in range(1, 6):
        row = {"step": step, "timing_s/step": 2.0, "timing_s/gen": 0.5, "timing_s/update_actor": 1.4}
        row.update({"timing_s/sync_weights": 0.1, "response_length/mean": 60.0, "critic/score/mean": 0.25})
        row["perf/mfu_actor"] = 0.01 * step
        rows.append(row)
        times.append(100.0 + 2.0 * step)
    rows[-1]["timing_s/save_checkpoint"] = 0.5  # the final save and validation, after the last step's timer and
    rows[-1]["timing_s/validation"] = 0.25  # before its row
    times[-1] += 0.75
    figures = bench.parse_ours([{"step": 0, "val/reward_score": 0.0}, *rows], [99.0, *times], launch=90.0, samples=64)
    assert figures["steps"] == 5
    assert figures["startup_s"] == pytest.approx(12.0)  # launch at 90, step 1 written at 102
    assert figures["samples_per_s"] == pytest.approx(3 * 64 / 6.0)  # steps 3..5 from 104 to 110 (save left out)
    assert figures["samples_per_s_step_timer"] == pytest.approx(3 * 64 / 6.0)
    assert figures["final_save_s"] == 0.5 and figures["reward_mean"] == 0.25
    assert figures["mfu_actor"] == pytest.approx(0.04)  # the median over the steady steps 3..5
    split = {"step": 2.0, "gen": 0.5, "update_actor": 1.4, "sync_weights": 0.1, bench.BETWEEN: 0.1}
    assert figures["phase_s"] == pytest.approx(split)  # sync_weights is timed inside gen, not beside it
    with pytest.raises(ValueError, match="no training step"):
        bench.parse_ours([{"step": 0, "val/reward_score": 0.0}], [1.0], launch=0.0, samples=64)


def test_parse_trl_reads_the_callback_timeline(bench: ModuleType) -> None:
    events = [{"event": "train_begin", "t": 5.0, "world_size": 2, "generation_batch_size": 128}]
    for step in range(1, 5):
        events.append({"event": "step_end", "step": step, "t": 6.0 + step, "generate_s": 0.25 * step})
        events.append({"event": "log", "step": step, "loss": 0.0, "completions/mean_length": 64.0, "reward": 0.5})
    events.append({"event": "config", "ignored": ["max_prompt_length"]})
    figures = bench.parse_trl(events, launch=1.0, samples=128)
    assert figures["startup_s"] == pytest.approx(6.0) and figures["train_begin_s"] == pytest.approx(4.0)
    assert figures["samples_per_s"] == pytest.approx(2 * 128 / 2.0)
    assert figures["world_size"] == 2 and figures["response_length_mean"] == 64.0 and figures["reward_mean"] == 0.5
    assert figures["config_keys_ignored"] == ["max_prompt_length"]
    # steps 3 and 4 are steady: 1 s each, of which 0.75 and 1.0 s generating
    assert figures["phase_s"] == pytest.approx({"step": 1.0, "generate_and_score": 0.875, "update_and_rest": 0.125})
    with pytest.raises(ValueError, match="not 256"):
        bench.parse_trl(events, launch=1.0, samples=256)


def test_trl_batching_is_one_optimizer_step_per_training_step(bench: ModuleType) -> None:
    assert bench.trl_batching(16, 8) == (8, 8)  # 2 x 8 rows x 8 accumulation = 128 samples
    assert bench.trl_batching(3, 2) == (3, 1)
    with pytest.raises(ValueError, match="do not split"):
        bench.trl_batching(3, 1)


def test_ours_overrides_replace_or_add_config_keys(bench: ModuleType, tmp_path: Path) -> None:
    paths = {"ours": "train.jsonl", "reward": "reward.py"}
    argv = ["--ours-override", "worker.actor.padding_free=false", "--ours-override", "trainer.max_steps=5"]
    command = bench.ours_command(bench.parse_args(argv), paths, "model", str(tmp_path))
    assert command[1:3] == ["-m", "verl.trainer.main"]
    assert "worker.actor.padding_free=false" in command and "trainer.max_steps=5" in command
    assert not any(item.startswith("trainer.max_steps=") and item != "trainer.max_steps=5" for item in command)
    with pytest.raises(ValueError, match="KEY=VALUE"):
        bench.ours_command(bench.parse_args(["--ours-override", "padding_free"]), paths, "model", str(tmp_path))


def test_summary_takes_medians_and_ratios(bench: ModuleType) -> None:
    def run(side: str, rate: float, startup: float, rss: float) -> dict:
        figures = {"side": side, "samples_per_s": rate, "startup_s": startup, "peak_rss_gb": rss}
        figures.update(response_length_mean=64.0, reward_mean=0.0, phase_s={"step": 128 / rate})
        return figures

    runs = [run("ours", 40.0, 10.0, 3.0), run("trl", 20.0, 5.0, 2.0), run("ours", 60.0, 12.0, 5.0)]
    runs.append({"side": "trl", "error": "exited with 1", "peak_rss_gb": 0.1})
    summary = bench.summarize(runs)
    assert summary["ours"]["runs"] == 2 and summary["trl"]["runs"] == 1
    assert summary["ratio_samples_per_s"] == pytest.approx(50.0 / 20.0)
    assert summary["ratio_startup_s"] == pytest.approx(11.0 / 5.0)
    assert summary["ratio_peak_rss_gb"] == pytest.approx(4.0 / 2.0)
    # the script exits 1 when a run failed (its JSON line's error), 0 otherwise
    assert bench.exit_status({"error": "trl: exited with 1"}) == 1 and bench.exit_status({"error": None}) == 0


def test_the_report_numbers_each_sides_runs_on_their_own(bench: ModuleType, capsys: pytest.CaptureFixture) -> None:
    """`--sides ours --repeats 2` printed both rows as ours#1 (runs were numbered as if both sides ran)."""

    def run(side: str, rate: float) -> dict:
        figures = {"side": side, "samples_per_s": rate, "startup_s": 10.0, "peak_rss_gb": 3.0, "peak_pss_gb": 2.0}
        phases = {"step": 1.0, "generate_and_score": 0.5, "update_and_rest": 0.5} if side == "trl" else {"step": 1.0}
        figures.update(peak_processes=9, response_length_mean=16.0, reward_mean=0.0, phase_s=phases)
        return {**figures, "peak_rss_gb_by_process": {}, "peak_pss_gb_by_process": {}}

    for runs, names in (
        ([run("ours", 40.0), run("ours", 50.0)], ["ours#1", "ours#2"]),
        (
            [run("ours", 40.0), run("trl", 20.0), run("ours", 50.0), run("trl", 30.0)],
            ["ours#1", "trl#1", "ours#2", "trl#2"],
        ),
    ):
        bench.print_report(runs, bench.summarize(runs))
        lines = capsys.readouterr().out.splitlines()
        table = lines[lines.index(next(line for line in lines if line.startswith("run "))) + 1 :][: len(runs)]
        assert [line.split()[0] for line in table] == names


def test_workload_files(bench: ModuleType, tmp_path: Path) -> None:
    rows = bench.arithmetic_rows(50, seed=3)
    assert len({row["prompt"] for row in rows}) == 50 and rows == bench.arithmetic_rows(50, seed=3)
    first = rows[0]["prompt"].removeprefix("What is ").removesuffix("? Answer with a number.")
    assert sum(int(term) for term in first.split(" + ")) == int(rows[0]["answer"])
    paths = bench.write_workload(str(tmp_path), rows)
    ours = [json.loads(line) for line in Path(paths["ours"]).read_text().splitlines()]
    trl = [json.loads(line) for line in Path(paths["trl"]).read_text().splitlines()]
    assert ours == rows
    assert trl[0] == {"prompt": [{"role": "user", "content": rows[0]["prompt"]}], "answer": rows[0]["answer"]}
    reward: dict = {}
    exec(Path(paths["reward"]).read_text(), reward)  # noqa: S102 - the reward file the benchmark writes
    sample = {"response": "It is 42, I think", "ground_truth": "42"}
    assert reward["compute_score"](sample)["overall"] == 1.0
    assert reward["compute_score"]({**sample, "ground_truth": "41"})["overall"] == 0.0


def test_row_watcher_times_each_new_line(bench: ModuleType, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    watcher = bench.RowWatcher(str(log))
    watcher.poll()  # not there yet
    log.write_text('{"step": 1}\n')
    watcher.poll()
    with open(log, "a") as f:
        f.write('{"step": 2}\n{"step": 3}\n')
    watcher.poll()
    assert len(watcher.times) == 3 and watcher.times[0] <= watcher.times[1] == watcher.times[2]


def test_tree_rss_sampler_sums_descendants_and_ends_leftovers(bench: ModuleType) -> None:
    child = "import time; block = b'x' * 60_000_000; time.sleep(30)"  # written bytes: resident, not lazily zeroed
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(30)"
    process = subprocess.Popen([sys.executable, "-c", parent])
    try:
        sampler = bench.TreeRSSSampler(process.pid)
        # until the child has written its whole block: the RSS sum passes 60 MB earlier, as it counts the
        # interpreter's shared pages twice
        deadline = time.time() + 20.0
        while time.time() < deadline and not (sampler.peak_processes == 2 and sampler.peak_pss_bytes > 60e6):
            sampler.sample()
            time.sleep(0.05)
        assert sampler.peak_processes == 2 and sampler.peak_bytes > 60e6
        assert sum(sampler.peak_by_name.values()) == sampler.peak_bytes and any(
            "python" in n for n in sampler.peak_by_name
        )
        # both are one python: the interpreter's shared pages count once in the PSS sum, in each process's RSS
        assert 60e6 < sampler.peak_pss_bytes < sampler.peak_bytes
    finally:
        process.kill()
        process.wait()
    assert sampler.end_leftovers(grace=2.0) == 1  # the orphaned child, ended
    assert not any(proc.is_running() for proc in sampler.seen.values())


DRIVER_STAND_IN = """
import signal, subprocess, sys, time

daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # in the driver's group, as Ray's


def stop(signum, frame):  # the step needs the daemon to finish, then the driver stops it and exits as the CLI does
    time.sleep(0.5)
    finished = daemon.poll() is None
    daemon.terminate()
    daemon.wait()
    sys.exit(143 if finished else 1)


signal.signal(signal.SIGTERM, stop)
print(daemon.pid, flush=True)
time.sleep(300)
"""


def test_ending_a_run_signals_its_driver_before_its_daemons(bench: ModuleType, tmp_path: Path) -> None:
    """A timed-out or interrupted run got SIGTERM in its whole session, which its local Ray's daemons share: they died
    at once, and the driver could neither finish its step nor stop before the SIGKILL 30 s later. The run here is a
    stand-in: a driver whose stop needs the daemon it started (a sleeping Python) alive."""
    from processes import wait_gone

    process = subprocess.Popen(
        [sys.executable, "-c", DRIVER_STAND_IN], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    daemon = int(process.stdout.readline())
    began = time.monotonic()
    try:
        bench.end_session(process)
        assert process.returncode == 143, "the daemon was gone before the driver could finish its step"
        assert time.monotonic() - began < 20 and wait_gone([daemon]) == []
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_failed_run_reports_its_stderr_tail(bench: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text("loading\nValueError: something broke\n")
    result = bench.RunResult(
        side="trl",
        returncode=1,
        launch_time=0.0,
        wall_s=3.0,
        peak_rss_bytes=10**9,
        peak_pss_bytes=6 * 10**8,
        peak_processes=3,
        peak_by_name={"python": 10**9},
        peak_pss_by_name={"python": 6 * 10**8},
        stdout_path=str(tmp_path / "stdout.log"),
        stderr_path=str(tmp_path / "stderr.log"),
    )
    figures = bench.run_figures("trl", result, samples=128)
    assert figures["error"].startswith("trl run exited with 1.") and "something broke" in figures["error"]
    assert figures["peak_rss_gb"] == 1.0 and "samples_per_s" not in figures
    assert figures["peak_pss_gb_by_process"] == {"python": 0.6}


def test_a_timed_out_run_of_ours_still_reports_the_steps_it_finished(bench: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    rows = [
        {
            "step": 1,
            "timing_s/step": 66.8,
            "timing_s/gen": 4.8,
            "timing_s/update_actor": 62.0,
            "perf/mfu_actor": 0.002,
        },
        {"step": 2, "timing_s/step": 9.4, "timing_s/gen": 3.9, "timing_s/update_actor": 5.6, "perf/mfu_actor": 0.026},
    ]
    (tmp_path / "ckpt" / "experiment_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "stderr.log").write_text("Received SIGTERM\n")
    result = bench.RunResult(
        side="ours",
        returncode=-15,
        launch_time=0.0,
        wall_s=180.0,
        peak_rss_bytes=10**9,
        peak_pss_bytes=10**9,
        peak_processes=3,
        peak_by_name={},
        peak_pss_by_name={},
        stdout_path=str(tmp_path / "stdout.log"),
        stderr_path=str(tmp_path / "stderr.log"),
        timed_out=True,
    )
    figures = bench.run_figures("ours", result, samples=128)
    assert figures["error"].startswith("ours run timed out.")
    steps = figures["steps_before_it_stopped"]
    assert [row["step"] for row in steps] == [1, 2]
    assert steps[1]["phase_s"]["update_actor"] == 5.6 and steps[1]["mfu_actor"] == 0.026
    assert steps[0]["phase_s"]["gen"] == 4.8 and steps[0]["phase_s"]["step"] == 66.8


def test_cuda_command_fits_one_gpu(bench: ModuleType, tmp_path: Path) -> None:
    """--device cuda: one engine per GPU and vLLM sized by its memory share, not by the CPU's KV budget."""
    paths = {"ours": "train.jsonl", "reward": "reward.py"}
    args = bench.parse_args(["--sides", "ours", "--device", "cuda", "--model", "0.5b", "--gpus", "1"])
    command = bench.ours_command(args, paths, "model", str(tmp_path))
    assert "trainer.device=cuda" in command and "trainer.n_gpus_per_node=1" in command
    assert "worker.rollout.tensor_parallel_size=1" in command  # the config's default (2) needs two devices
    assert not any(item.startswith("worker.rollout.kv_cache_memory_mb=") for item in command)
    assert "worker.rollout.gpu_memory_utilization=0.4" in command
    cpu = bench.ours_command(bench.parse_args([]), paths, "model", str(tmp_path))
    assert "trainer.device=cpu" in cpu and "worker.rollout.kv_cache_memory_mb=64" in cpu
    with pytest.raises(SystemExit):  # TRL's side has no GPU mode here
        bench.parse_args(["--device", "cuda"])


def test_bench_sweep_help_lists_the_workload_options_it_passes_on() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sweep.py"
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for option in ("--runs", "--prompts", "--response-length", "--ours-override"):
        assert option in result.stdout
