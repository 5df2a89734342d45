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
