# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""scripts/plot_metrics.py: the plot names the run and labels each curve once; the summary line reads the log."""

import importlib.util
import json
import os


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script():
    spec = importlib.util.spec_from_file_location("plot_metrics", os.path.join(REPO, "scripts", "plot_metrics.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_has_the_run_title_and_plain_labels(tmp_path, capsys):
    script = load_script()
    rows = [{"step": 0, "val/accuracy_reward": 0.25}, {"step": 1, "critic/score/mean": 0.3}]
    rows += [{"step": 2, "critic/score/mean": 0.6, "val/accuracy_reward": 0.75}]
    (tmp_path / "experiment_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "experiment_config.json").write_text(
        json.dumps({"trainer": {"project_name": "p", "experiment_name": "e"}})
    )
    assert script.run_title(str(tmp_path)) == "p / e"
    labels = script.plot(rows, str(tmp_path / "a.png"), "val/accuracy_reward", "critic/score/mean", "p / e")
    assert labels == ["training reward (critic/score/mean)", "validation (val/accuracy_reward)"]
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "b.png")]) == 0
    assert "val accuracy: first 0.250, last 0.750 (2 validations)" in capsys.readouterr().out
    assert (tmp_path / "b.png").stat().st_size > 1000
    (tmp_path / "a_file").write_text("")
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "a_file" / "c.png")]) == 1
    assert f"plot_metrics: cannot write {tmp_path / 'a_file' / 'c.png'}: Not a directory" in capsys.readouterr().err


def test_a_key_not_in_the_log_and_a_torn_last_line(tmp_path, capsys):
    """A misspelt key was a blank plot and exit 0; the half-written last line of a killed run was a traceback (it is
    left out; a bad line before it is an error naming it); rewards outside [0, 1] stay on the plot."""
    script = load_script()
    rows = [{"step": 1, "critic/score/mean": -2.0}, {"step": 2, "critic/score/mean": 3.0, "val/accuracy_reward": 0.5}]
    log = tmp_path / "experiment_log.jsonl"
    log.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"step": 3, "critic/sco')
    argv = ["--log_dir", str(tmp_path), "--output", str(tmp_path / "a.png")]
    assert script.main(argv) == 0 and "last 0.500 (1 validations)" in capsys.readouterr().out
    assert script.main([*argv, "--accuracy_key", "val/acc"]) == 2
    assert "--accuracy_key val/acc is not in the log; its metrics: critic/score/mean, step," in capsys.readouterr().err
    assert script.main([*argv, "--output", str(tmp_path / "a.xyz")]) == 2
    assert f"plot_metrics: --output {tmp_path / 'a.xyz'}: Format 'xyz' is not supported" in capsys.readouterr().err
    log.write_text('{"step": 1\n' + json.dumps(rows[1]) + "\n[3]\n")  # damaged lines anywhere: left out, counted
    assert script.main(argv) == 0
    assert f"'{log}': 2 line(s) are not rows and are left out (1, 3)" in capsys.readouterr().err
    log.write_text("")
    assert script.main(argv) == 2 and f"'{log}' holds no rows yet" in capsys.readouterr().err
    log.write_text(json.dumps(rows[1]) + "\n")  # the log file itself as --log_dir
    assert script.main(["--log_dir", str(log), "--output", str(tmp_path / "a.png")]) == 0


def test_a_resumed_runs_redone_steps_replace_the_logged_ones(tmp_path):
    """The file log of a run killed after step 3 that resumed from its step-2 checkpoint: steps 3 and 4 are the
    resumed run's, once each (the killed run's step 3 is set aside); a step's validation row joins its training
    row."""
    from verl.utils.logger.backends import FileBackend

    backend = FileBackend(str(tmp_path), {})
    for step in (1, 2, 3):
        backend.log({"critic/score/mean": 0.1 * step}, step)
    backend.log({"val/accuracy_reward": 0.25}, 2)
    backend = FileBackend(str(tmp_path), {}, start_step=2)  # the resumed run
    for step in (3, 4):
        backend.log({"critic/score/mean": 0.5 + step}, step)
    script = load_script()
    assert [row["step"] for row in script.read_rows(str(tmp_path))] == [1, 2, 2, 3, 4]
    rows = script.by_step(script.read_rows(str(tmp_path)))
    assert [(row["step"], row["critic/score/mean"]) for row in rows] == [(1, 0.1), (2, 0.2), (3, 3.5), (4, 4.5)]
    assert rows[1]["val/accuracy_reward"] == 0.25


def test_a_reward_without_an_accuracy_key_plots_the_validation_score(tmp_path, capsys):
    """A TRL-style reward logs no val/accuracy_reward: the default plots val/reward_score instead of exiting 2."""
    script = load_script()
    rows = [{"step": 0, "val/reward_score": 0.2}, {"step": 1, "critic/score/mean": 0.3, "val/reward_score": 0.4}]
    (tmp_path / "experiment_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "a.png")]) == 0
    assert "val accuracy: first 0.200, last 0.400 (2 validations)" in capsys.readouterr().out


def test_values_that_are_not_numbers_and_a_folder_as_output(tmp_path, capsys):
    """A null or text metric value was a ConversionError traceback from matplotlib; --output naming a folder wrote
    <folder>.png beside it and said it wrote the folder."""
    script = load_script()
    rows = [{"step": 1, "critic/score/mean": "abc", "val/accuracy_reward": None}]
    rows += [{"step": 2, "critic/score/mean": 0.5, "val/accuracy_reward": 0.25}]
    (tmp_path / "experiment_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "a.png")]) == 0
    out, err = capsys.readouterr()
    assert '2 value(s) are not numbers and are left out (the first: critic/score/mean at step 1 is "abc")' in err
    assert "val accuracy: first 0.250, last 0.250 (1 validations)" in out
    (tmp_path / "plots").mkdir()
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "plots")]) == 2
    assert f"--output {tmp_path / 'plots'} is a folder; give the image's file name" in capsys.readouterr().err
    assert not (tmp_path / "plots.png").exists()
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "noext")]) == 0  # it wrote noext.png
    assert f"plot: {tmp_path / 'noext.png'}" in capsys.readouterr().out and (tmp_path / "noext.png").exists()
    rows[1]["critic/score/mean"] = rows[1]["val/accuracy_reward"] = "n/a"  # nothing to plot: an empty plot, exit 0
    (tmp_path / "experiment_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert script.main(["--log_dir", str(tmp_path), "--output", str(tmp_path / "b.png")]) == 2
    assert "no numbers of critic/score/mean or val/accuracy_reward to plot" in capsys.readouterr().err
