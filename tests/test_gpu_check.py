# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/gpu_check.py: its parsing of pytest's and bench_actor's output, and one real run of a tiny case."""

import json
from types import ModuleType

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def check() -> ModuleType:
    return load_repo_file("benchmarks/gpu_check.py", "gpu_check")


def test_output_parsing(check: ModuleType) -> None:
    output = "ssss\nSKIPPED [4] tests/gpu/x.py: needs CUDA\n======= 2 passed, 4 skipped in 3.21s =======\n"
    assert check.pytest_summary(output) == "2 passed, 4 skipped in 3.21s"
    assert check.pytest_summary("ImportError: boom\n") == "ImportError: boom"
    assert check.last_json('table\n{"update_ratio": 1.5}\n') == {"update_ratio": 1.5}
    assert check.last_json("no json here") is None
    figures = {"update_ratio": 0.75, "log_probs_ratio": 1.12, "update_project_mfu": 0.31}
    line = check.case_line("packed", "full", figures, 0)
    assert "update 0.750x < 0.95" in line and "log_probs 1.120x ok" in line and "MFU 31.0%" in line
    assert "ok" not in check.case_line("padded", "variable", {"update_ratio": 1.0, "log_probs_ratio": 1.0}, 0)
    assert "failed (exit 3)" in check.case_line("packed", "capped", None, 3)
    with pytest.raises(SystemExit):
        check.parse_args(["--cases", "packed:sideways"])


def test_a_tiny_case_runs_and_reports(check: ModuleType, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    sizes = ["--batch-size", "4", "--prompt-length", "16", "--response-length", "16", "--iters", "1"]
    argv = ["--quick", "--skip-tests", "--cases", "packed:capped", "--output", str(tmp_path)]
    report = check.main(argv + [f"--bench-arg={arg}" for arg in sizes])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report
    case = report["cases"]["packed:capped"]
    assert case["exit"] == 0 and case["figures"]["lengths"] == "capped" and case["figures"]["B"] == 4
    assert (tmp_path / "bench_packed_capped.log").is_file() and report["tests"] is None
    assert check.exit_status(report) == 0  # the script's exit code; a failed case or test run makes it 1
    assert check.exit_status({**report, "tests": {"exit": 1, "summary": "1 failed", "seconds": 1.0}}) == 1
    assert check.exit_status({"tests": None, "cases": {"packed:full": {"exit": 124}}}) == 1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal of a machine without a GPU")
def test_without_cuda_the_gpu_workloads_are_refused_in_one_line(
    check: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a GPU the check ran tests/gpu (all skipped), then bench_actor's 0.5b workloads on the CPU, case after
    case (each up to --timeout, 900 s), and reported their ratios as if a GPU had been checked."""
    for argv in ([], ["--skip-tests", "--model", "1.5b"]):
        with pytest.raises(SystemExit) as refused:
            check.parse_args(argv)
        assert refused.value.code == 2
        last = capsys.readouterr().err.splitlines()[-1]
        assert "torch sees no CUDA device" in last and "--quick" in last
    assert check.parse_args(["--quick"]).quick and check.parse_args(["--model", "tiny"]).model == "tiny"


def test_a_step_that_times_out_is_ended_with_the_processes_it_started(check: ModuleType, tmp_path) -> None:
    """A timed-out step (pytest tests/gpu, a bench_actor case) was killed alone: the processes it had started (a
    test's Ray workers, an engine) stayed, holding the GPU through the cases after it. The step here is a stand-in, a
    Python that starts a sleeping child and sleeps."""
    import os
    import signal
    import sys
    import time

    from processes import alive

    pid_file = tmp_path / "child.pid"
    child = "import time; time.sleep(300)"
    step = (
        f"import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', {child!r}]); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); print('started', flush=True); time.sleep(300)"
    )
    began = time.monotonic()
    code, output, seconds = check.run_logged([sys.executable, "-c", step], str(tmp_path / "step.log"), timeout=5.0)
    child_pid = int(pid_file.read_text())
    try:
        assert code == 124 and "started" in output and seconds < 60 and time.monotonic() - began < 60
        assert (tmp_path / "step.log").read_text() == output
        deadline = time.monotonic() + 10
        while alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child_pid), "the step's child outlived its timeout"
    finally:
        if alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)
