# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of scripts/plot_metrics.py: logs without validation or without training numbers, steps out of order,
booleans, and the [0, 1] axis."""

import json

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def script():
    return load_repo_file("scripts/plot_metrics.py")


def write_log(folder, rows: list[dict]) -> None:
    (folder / "experiment_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_run_without_validation_plots_its_training_reward(script, tmp_path, capsys):
    write_log(tmp_path, [{"step": 1, "critic/score/mean": 0.25}, {"step": 2, "critic/score/mean": 0.5}])
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "a.png")]) == 0
    out, err = capsys.readouterr()
    assert (tmp_path / "a.png").exists() and "val accuracy" not in out and err == ""


def test_validation_numbers_alone_are_plotted(script, tmp_path, capsys):
    write_log(tmp_path, [{"step": 1, "critic/score/mean": None, "val/accuracy_reward": 0.5}])
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "a.png")]) == 0
    assert "val accuracy: first 0.500, last 0.500 (1 validations)" in capsys.readouterr().out


def test_a_boolean_is_no_number_to_plot(script, tmp_path, capsys):
    write_log(tmp_path, [{"step": 1, "critic/score/mean": True}, {"step": 2, "critic/score/mean": 0.5}])
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "a.png")]) == 0
    assert "1 value(s) are not numbers and are left out (the first: critic/score/mean at step 1 is true)" in (
        capsys.readouterr().err
    )


def test_rows_are_merged_in_step_order_the_later_value_winning(script, tmp_path, capsys):
    write_log(tmp_path, [{"step": 3, "a": 3.0}, {"step": 1, "a": 1.0}, {"step": 2, "a": 2.0}, {"step": 1, "a": 1.5}])
    with open(tmp_path / "experiment_log.jsonl", "a") as f:
        f.write('{"note": "no step"}\n{"step": "4", "a": 4.0}\n')
    rows = script.by_step(script.read_rows(str(tmp_path)))
    assert rows == [{"step": 1, "a": 1.5}, {"step": 2, "a": 2.0}, {"step": 3, "a": 3.0}]
    assert "2 line(s) are not rows and are left out (5, 6)" in capsys.readouterr().err


def test_values_from_zero_to_one_get_the_whole_unit_axis(script, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    limits = []
    real = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda self, *a, **k: limits.append(self.axes[0].get_ylim()) or real(self, *a, **k)
    )
    rows = [{"step": 1, "critic/score/mean": 0.0}, {"step": 2, "critic/score/mean": 0.5}]
    script.plot(rows, str(tmp_path / "a.png"), "val/accuracy_reward", "critic/score/mean", "t")
    rows[0]["critic/score/mean"] = -0.5  # a reward below 0: the axis follows the values
    script.plot(rows, str(tmp_path / "b.png"), "val/accuracy_reward", "critic/score/mean", "t")
    assert limits[0] == (-0.02, 1.02) and limits[1][0] < -0.5 and limits[1][1] < 1.0


def test_a_validation_only_runs_log_is_plotted(script, tmp_path, capsys):
    """trainer.val_only=true appends a row per validated checkpoint to val_only_log.jsonl, with no training metric:
    the default --reward_key is not asked of it (it was refused, naming critic/score/mean), one given still is."""
    rows = [
        {"step": 2, "val/reward_score": 0.25, "val_response_length/mean": 8.0},
        {"step": 4, "val/reward_score": 0.5, "rollout/weight_sync_max_gap": 0.0},
    ]
    (tmp_path / "val_only_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    log, output = str(tmp_path / "val_only_log.jsonl"), str(tmp_path / "a.png")
    assert script.main(["--log_dir", log, "--output", output]) == 0
    assert "val accuracy: first 0.250, last 0.500 (2 validations)" in capsys.readouterr().out
    assert script.main(["--log_dir", log, "--output", output, "--reward_key", "critic/score/mean"]) == 2
    assert "--reward_key critic/score/mean is not in the log" in capsys.readouterr().err
