# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the logger backends: what the console shows, where each file and event goes, what a failure says, and
how the wandb and swanlab runs end (the real libraries, offline, with the calls our backends make recorded on their
way through)."""

import json
import logging
import os
import socket

import pytest

from verl.utils.logger import Tracker
from verl.utils.logger import backends as backends_module
from verl.utils.logger.backends import ConsoleBackend, FileBackend, check_logger_services


CONFIG = {"trainer": {"project_name": "p"}}


def console_lines(caplog, metrics: dict, step: int = 3) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verl.utils.logger.backends"):
        ConsoleBackend().log(metrics, step)
    return [record.getMessage() for record in caplog.records]


def test_the_console_shows_sft_metrics_and_every_validation_metric_sorted(caplog):
    """An SFT step logs train/loss and train/lr; a validation also logs val_response_length/mean (not under val/)."""
    lines = console_lines(caplog, {"train/lr": 1e-5, "train/loss": 0.5, "other": 1.0})
    assert lines == ["step 3 - train/loss: 0.5 - train/lr: 1e-05"]
    lines = console_lines(caplog, {"val/z": 1.0, "val_response_length/mean": 12.0, "val/a": 0.5})
    assert lines == ["step 3 validation - val/a: 0.5 - val/z: 1 - val_response_length/mean: 12"]


def test_the_console_cuts_a_sample_to_its_width_exactly(caplog):
    def shown(response: str) -> str:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="verl.utils.logger.backends"):
            ConsoleBackend().log_generations([("q", response, "a", 1.0)], step=1)
        return caplog.records[0].getMessage().split(" | ")[2].removeprefix("response ")

    assert shown("y" * 80) == "y" * 80  # just fits: whole
    assert shown("y" * 81) == "y" * 77 + "..."  # one over: cut to 80 characters with the ellipsis


def test_a_value_that_is_not_a_number_is_warned_about_once_and_loses_only_itself(tmp_path, caplog):
    backend = FileBackend(str(tmp_path), CONFIG)
    with caplog.at_level(logging.WARNING, logger="verl.utils.logger.backends"):
        backend.log({"a": 1.0, "edges/text_value": "n/a"}, step=1)
        backend.log({"a": 2.0, "edges/text_value": "n/a"}, step=2)
    rows = [json.loads(line) for line in (tmp_path / "experiment_log.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0}]  # a string that is no number: the step is kept
    assert caplog.text.count("'edges/text_value'") == 1


def test_generations_keep_each_field_under_its_own_name(tmp_path):
    backend = FileBackend(str(tmp_path), CONFIG)
    backend.log_generations([("1+1?", "it is 2", "2", 0.5)], step=4)
    row = json.loads((tmp_path / "generations.jsonl").read_text())
    assert row == {"step": 4, "prompt": "1+1?", "response": "it is 2", "ground_truth": "2", "score": 0.5}


def test_the_generations_file_is_named_once_at_its_first_write(tmp_path, caplog):
    backend = FileBackend(str(tmp_path), CONFIG)
    with caplog.at_level(logging.INFO, logger="verl.utils.logger.backends"):
        backend.log_generations([("q", "r", "a", 1.0)], step=1)
        assert "generations.jsonl" in caplog.text
        backend.log_generations([("q", "r", "a", 1.0)], step=2)
        backend.log_generations([("q", "r", "a", 1.0)], step=3)
    assert caplog.text.count("generations.jsonl") == 1


def test_no_samples_write_no_generations_file(tmp_path):
    tracker = Tracker(["file"], "p", "e", str(tmp_path), CONFIG)
    tracker.log_generations([], step=1)
    assert not (tmp_path / "generations.jsonl").exists()


def test_a_validation_only_run_keeps_its_samples_apart_from_the_training_runs(tmp_path):
    FileBackend(str(tmp_path), CONFIG).log_generations([("q", "train", "a", 1.0)], step=1)
    FileBackend(str(tmp_path), CONFIG, start_step=1, val_only=True).log_generations([("q", "val", "a", 0.0)], step=1)
    assert [json.loads(line)["response"] for line in (tmp_path / "generations.jsonl").read_text().splitlines()] == [
        "train"
    ]
    assert json.loads((tmp_path / "val_only_generations.jsonl").read_text())["response"] == "val"


def test_empty_logs_of_a_run_that_logged_nothing_are_not_set_aside(tmp_path, caplog):
    (tmp_path / "experiment_log.jsonl").write_text("")
    with caplog.at_level(logging.WARNING, logger="verl.utils.logger.backends"):
        FileBackend(str(tmp_path), CONFIG)
    assert not (tmp_path / "previous_runs").exists() and "moved" not in caplog.text


def test_a_resumed_run_sets_nothing_aside_for_blank_lines(tmp_path):
    (tmp_path / "experiment_log.jsonl").write_text('{"step": 1, "a": 1.0}\n\n')
    FileBackend(str(tmp_path), CONFIG, start_step=1)
    assert not (tmp_path / "previous_runs").exists()
    assert (tmp_path / "experiment_log.jsonl").read_text() == '{"step": 1, "a": 1.0}\n\n'


def test_an_empty_log_gets_no_blank_first_line(tmp_path):
    (tmp_path / "val_only_log.jsonl").write_text("")
    FileBackend(str(tmp_path), CONFIG, val_only=True).log({"val/a": 1.0}, step=1)
    assert (tmp_path / "val_only_log.jsonl").read_text() == '{"step": 1, "val/a": 1.0}\n'


def test_a_write_cut_by_a_full_disk_is_not_glued_to_the_next_row(tmp_path, monkeypatch):
    backend = FileBackend(str(tmp_path), CONFIG)
    backend.log({"a": 1.0}, step=1)
    real_open = open

    class HalfWrite:
        def __init__(self, path):
            self.file = real_open(path, "a", encoding="utf-8")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, text):
            self.file.write(text[: len(text) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(backends_module, "open", lambda path, *a, **k: HalfWrite(path), raising=False)
    with pytest.raises(OSError):
        backend.log({"a": 2.0}, step=2)
    monkeypatch.delattr(backends_module, "open")
    backend.log({"a": 3.0}, step=3)
    lines = (tmp_path / "experiment_log.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"step": 1, "a": 1.0} and json.loads(lines[-1]) == {"step": 3, "a": 3.0}
    assert len(lines) == 3  # the cut half of step 2 on a line of its own


def test_a_failing_logger_says_which_kind_of_log_is_lost(tmp_path, caplog):
    tracker = Tracker(["file"], "p", "e", str(tmp_path / "a"), CONFIG)
    tracker.backends["file"].metrics_path = str(tmp_path / "missing" / "log.jsonl")
    tracker.backends["file"].generations_path = str(tmp_path / "missing" / "gen.jsonl")
    with caplog.at_level(logging.WARNING, logger="verl.utils.logger.tracker"):
        tracker.log({"a": 1.0}, step=1)
    assert "its metrics are lost" in caplog.text
    tracker.failures.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.utils.logger.tracker"):
        tracker.log_generations([("q", "r", "a", 1.0)], step=1)
    assert "its validation samples are lost" in caplog.text


def test_a_backend_that_fails_to_start_ends_the_started_ones_as_failed(tmp_path, monkeypatch):
    from verl.utils.logger import tracker as tracker_module
    from verl.utils.logger.tracker import LoggerStartError

    ended = []

    class Recording(ConsoleBackend):
        def finish(self, status="finished"):
            ended.append(status)

    def down(*args):
        raise RuntimeError("tracking server down")

    monkeypatch.setattr(tracker_module, "ConsoleBackend", Recording)
    monkeypatch.setattr(tracker_module, "MlflowBackend", down)
    with pytest.raises(LoggerStartError):
        Tracker(["console", "mlflow"], "p", "e", str(tmp_path), {})
    assert ended == ["failed"]


def scalar_points(run_dir: str, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir)
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else []


def test_tensorboard_validation_only_runs_go_beside_the_training_run_and_keep_each_others_points(tmp_path):
    train = Tracker(["tensorboard"], "proj", "exp", str(tmp_path), CONFIG)
    train.log({"val/score": 0.25}, step=2)
    train.finish()
    for step, value in ((2, 0.5), (4, 0.75)):
        val_only = Tracker(["tensorboard"], "proj", "exp", str(tmp_path), CONFIG, start_step=step, val_only=True)
        val_only.log({"val/score": value}, step=step)
        val_only.finish()
    run_dir = tmp_path / "tensorboard" / "proj" / "exp"
    assert scalar_points(str(run_dir / "val_only"), "val/score") == [(2, 0.5), (4, 0.75)]
    assert scalar_points(str(run_dir), "val/score") == [(2, 0.25)]


def test_tensorboard_writes_under_tensorboard_dir_and_names_the_samples_val_generations(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracker = Tracker(["tensorboard"], "proj", "exp", str(tmp_path / "logs"), CONFIG)
    tracker.log({"a": 1.0}, step=1)
    tracker.log_generations([("q", "r", "g", 1.0)], step=1)
    tracker.finish()
    events = EventAccumulator(str(tmp_path / "tb" / "proj" / "exp"))
    events.Reload()
    assert "a" in events.Tags()["scalars"]
    assert any(tag.startswith("val/generations") for tag in events.Tags()["tensors"])
    assert not (tmp_path / "logs" / "tensorboard").exists()


@pytest.fixture
def wandb_calls(monkeypatch, tmp_path):
    """A real offline wandb run, with what our backend hands it recorded on the way (the calls go through)."""
    import wandb
    from wandb.sdk.wandb_run import Run

    calls = {"logged": [], "exit_code": None}
    finish, log, table = Run.finish, Run.log, wandb.Table

    def finished(run, exit_code=None, **kwargs):
        calls["exit_code"] = exit_code
        return finish(run, exit_code=exit_code, **kwargs)

    def logged(run, data, step=None, commit=None, **kwargs):
        calls["logged"].append((data, step))
        return log(run, data, step=step, commit=commit, **kwargs)

    def tabled(columns, data):
        calls.setdefault("tables", []).append((list(columns), [list(row) for row in data]))
        return table(columns=columns, data=data)

    monkeypatch.setattr(Run, "finish", finished)
    monkeypatch.setattr(Run, "log", logged)
    monkeypatch.setattr(wandb, "Table", tabled)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    return calls


@pytest.mark.parametrize(("status", "exit_code"), [("finished", 0), ("failed", 1), ("killed", 1)])
def test_a_wandb_run_stopped_by_an_error_or_a_signal_ends_as_failed(tmp_path, wandb_calls, status, exit_code):
    tracker = Tracker(["wandb"], "p", "e", str(tmp_path), CONFIG)
    tracker.finish(status)
    assert wandb_calls["exit_code"] == exit_code


def test_the_wandb_samples_table_holds_every_validation_so_far(tmp_path, wandb_calls):
    tracker = Tracker(["wandb"], "p", "e", str(tmp_path), CONFIG)
    tracker.log_generations([("q1", "r1", "g1", 1.0)], step=1)
    tracker.log_generations([("q2", "r2", "g2", 0.0)], step=2)
    tracker.finish()
    columns, rows = wandb_calls["tables"][-1]
    assert columns == ["step", "prompt", "response", "ground_truth", "score"]
    assert rows == [[1, "q1", "r1", "g1", 1.0], [2, "q2", "r2", "g2", 0.0]]
    data, step = wandb_calls["logged"][-1]
    assert list(data) == ["val/generations"] and step == 2


@pytest.fixture
def swanlab_calls(monkeypatch):
    """Real swanlab in offline mode, with the arguments our backend gives init and finish recorded (calls go through)."""
    import swanlab

    calls = {}
    init, finish = swanlab.init, swanlab.finish

    def started(**kwargs):
        calls["init"] = kwargs
        return init(**kwargs)

    def finished(state=None, **kwargs):
        calls["state"] = state
        return finish(state=state, **kwargs)

    monkeypatch.setattr(swanlab, "init", started)
    monkeypatch.setattr(swanlab, "finish", finished)
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    return calls


@pytest.mark.parametrize(("status", "state"), [("finished", "success"), ("failed", "crashed"), ("killed", "aborted")])
def test_a_swanlab_run_ends_in_the_state_of_how_the_run_ended(tmp_path, swanlab_calls, status, state):
    Tracker(["swanlab"], "p", "e", str(tmp_path), CONFIG).finish(status)
    assert swanlab_calls["state"] == state


def test_swanlab_logs_under_swanlab_dir(tmp_path, swanlab_calls, monkeypatch):
    monkeypatch.setenv("SWANLAB_DIR", str(tmp_path / "elsewhere"))
    Tracker(["swanlab"], "p", "e", str(tmp_path), CONFIG).finish()
    assert swanlab_calls["init"]["logdir"] == str(tmp_path / "elsewhere")
    assert os.listdir(tmp_path / "elsewhere")  # swanlab wrote its run there


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_services_check_takes_disabled_wandb_and_checks_swanlab_dir_and_explicit_online(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")  # a run that turns wandb off: not refused
    check_logger_services(["wandb"])
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SWANLAB_DIR", str(tmp_path / "file" / "swanlog"))
    with pytest.raises(ValueError, match=r"SWANLAB_DIR=.* cannot be written"):
        check_logger_services(["swanlab"])
    monkeypatch.delenv("SWANLAB_DIR")
    monkeypatch.setenv("SWANLAB_MODE", "online")
    monkeypatch.setenv("SWANLAB_API_HOST", _closed_port_url())
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"swanlab with SWANLAB_MODE=online, but 127\.0\.0\.1:\d+ cannot"):
        check_logger_services(["swanlab"])
    assert os.environ["SWANLAB_MODE"] == "online"


@pytest.mark.parametrize("key", ["/leading/slash", "..up/x", "./here", "a//b/", "acc(strict)", "pass@4"])
def test_every_metric_name_is_one_mlflow_takes(key):
    from mlflow.utils.validation import _validate_metric_name

    from verl.utils.logger.backends import mlflow_metric_name

    _validate_metric_name(mlflow_metric_name(key))  # MLflow's own check: raises for a name it refuses


def test_mlflow_names_the_metrics_it_renames_but_not_pass_at_k(tmp_path, monkeypatch, caplog):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    tracker = Tracker(["mlflow"], "p", "e", str(tmp_path), CONFIG)
    with caplog.at_level(logging.WARNING, logger="verl.utils.logger.backends"):
        tracker.log({"val/pass@4": 1.0, "reward/acc(strict)": 0.5}, step=2)
    tracker.finish()
    client = MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    (run,) = client.search_runs([client.get_experiment_by_name("p").experiment_id])
    assert run.data.metrics == {"reward/acc_strict_": 0.5, "val/pass_at_4": 1.0}
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/pass_at_4")] == [2]
    assert "acc(strict)" in caplog.text and "pass@4" not in caplog.text
