# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every logger backend writes a run for real; the test reads it back from the files it wrote."""

import glob
import importlib.util
import json
import logging
import os
import shutil
import struct
import sys
import time

import pytest

from verl.utils.logger import Tracker


CONFIG = {"data": {"seed": 1}, "trainer": {"project_name": "p"}}
STEPS = {1: {"critic/score/mean": 0.25, "actor/pg_loss": -0.5}, 2: {"critic/score/mean": 0.75, "actor/pg_loss": 0.1}}
GENERATIONS = [("1+1?", "2", "2", 1.0)]


def run_tracker(name: str, log_dir: str, status: str = "finished") -> None:
    tracker = Tracker([name], project="proj", experiment="exp", log_dir=log_dir, config=CONFIG)
    for step, metrics in STEPS.items():
        tracker.log(metrics, step)
    tracker.log_generations(GENERATIONS, step=2)
    tracker.finish(status)


def test_file_backend(tmp_path):
    run_tracker("file", str(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "experiment_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[1]["critic/score/mean"] == 0.75
    assert json.loads((tmp_path / "experiment_config.json").read_text()) == CONFIG
    generation = json.loads((tmp_path / "generations.jsonl").read_text().splitlines()[0])
    assert generation["response"] == "2" and generation["score"] == 1.0


def test_file_backend_names_generations_jsonl_only_once_it_writes_it(tmp_path, caplog):
    from verl.utils.logger.backends import FileBackend

    with caplog.at_level(logging.INFO, logger="verl.utils.logger.backends"):
        backend = FileBackend(str(tmp_path), CONFIG)
        backend.log({"train/loss": 1.0}, step=1)
    assert "experiment_log.jsonl" in caplog.text and "generations.jsonl" not in caplog.text  # an SFT run writes none
    with caplog.at_level(logging.INFO, logger="verl.utils.logger.backends"):
        backend.log_generations(GENERATIONS, step=2)
        backend.log_generations(GENERATIONS, step=3)
    assert caplog.text.count("generations.jsonl") == 1 and (tmp_path / "generations.jsonl").exists()


def test_a_failing_logger_is_warned_about_and_the_others_still_log(tmp_path, caplog):
    """The file log's folder removed (or its disk full) mid-run: the run used to end with an OSError traceback."""
    tracker = Tracker(["file", "console"], "p", "e", str(tmp_path / "logs"), CONFIG)
    tracker.log({"critic/score/mean": 0.5}, step=1)
    shutil.rmtree(tmp_path / "logs")
    (tmp_path / "logs").write_text("")  # the folder is now a file: every write fails
    with caplog.at_level(logging.INFO):
        for step in range(2, 102):
            tracker.log({"critic/score/mean": 0.25}, step=step)
        tracker.log_generations(GENERATIONS, step=101)
        tracker.finish()
    warnings = [r.getMessage() for r in caplog.records if r.name == "verl.utils.logger.tracker"]
    assert len(warnings) == 2, warnings  # the first failure and the 100th
    assert (
        warnings[0].startswith("The file logger failed (NotADirectoryError: ") and "Training goes on." in warnings[0]
    )
    assert "(100 failure(s) so far)" in warnings[1]
    assert "step 101 - critic/score/mean: 0.25" in caplog.text  # the console logger still logs


def test_console_backend(caplog):
    import logging

    with caplog.at_level(logging.INFO):
        run_tracker("console", "unused")
    assert "step 2" in caplog.text and "critic/score/mean: 0.75" in caplog.text
    caplog.clear()
    tracker = Tracker(["console"], project="p", experiment="e", log_dir="unused", config=CONFIG)
    with caplog.at_level(logging.INFO):
        tracker.log({"critic/score/mean": 0.5, "timing_per_token_ms/gen": 3.0, "val/reward_score": 0.9}, step=4)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["step 4 - critic/score/mean: 0.5", "step 4 validation - val/reward_score: 0.9"]


def test_console_shows_each_validation_sample_on_one_short_line(caplog):
    import logging

    prompt = "system\nYou are a helpful assistant.\nuser\n" + "Count the squares. " * 10 + "\nassistant\n"
    samples = [(prompt, "There are\n3 squares.", "3", 1.0), ("user\n1+1?\nassistant\n", "x" * 500, "2", 0.0)]
    tracker = Tracker(["console"], project="p", experiment="e", log_dir="unused", config=CONFIG)
    with caplog.at_level(logging.INFO):
        tracker.log_generations(samples, step=5)
    first, second = [record.getMessage() for record in caplog.records]
    shown_prompt = first.split(" | ")[1]
    assert first.startswith("step 5 sample 1/2: score 1 | prompt ...")  # the template's system part is cut ...
    assert shown_prompt.endswith("Count the squares. assistant") and len(shown_prompt) == len("prompt ") + 70
    assert first.endswith(" | response There are 3 squares. | answer 3")  # ... the question and answer stay
    assert second.startswith("step 5 sample 2/2: score 0 | prompt user 1+1? assistant | response xxx")
    assert "\n" not in second and len(second) < 200  # the whole response is in generations.jsonl


def test_tensorboard_backend(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_tracker("tensorboard", str(tmp_path))
    (run_dir,) = glob.glob(str(tmp_path / "tensorboard" / "proj" / "exp"))
    events = EventAccumulator(run_dir)
    events.Reload()
    scores = [(e.step, e.value) for e in events.Scalars("critic/score/mean")]
    assert scores == [(1, 0.25), (2, 0.75)]


def read_wandb_history(run_file: str, key: str) -> list[tuple[int, float]]:
    """Parse wandb's transaction log (LevelDB log format: 32 KiB blocks of CRC/length/type-framed protobufs)."""
    from wandb.proto import wandb_internal_pb2

    with open(run_file, "rb") as f:
        data = f.read()
    records, partial, offset, block = [], b"", 7, 32768  # the file starts with a 7-byte W&B header
    while offset + 7 <= len(data):
        left = block - offset % block
        if left < 7:
            offset += left
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        if length == 0 and kind == 0:
            offset += left
            continue
        if offset + 7 + length > len(data):  # a record wandb is still writing
            break
        chunk, offset = data[offset + 7 : offset + 7 + length], offset + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            records.append(partial + chunk)
    history = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            if key in items:
                history.append((int(items["_step"]), json.loads(items[key])))
    return history


def test_wandb_backend_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    tracker = Tracker(["wandb"], project="proj", experiment="exp", log_dir=str(tmp_path), config=CONFIG)
    for step, metrics in STEPS.items():
        tracker.log(metrics, step)
    tracker.log_generations(GENERATIONS, step=2)
    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "*.wandb"))
    # wandb-core appends records asynchronously while the run is open (wandb 0.31 empties the file at finish,
    # after handing the records to its sync queue), so read the log while the run is live.
    history: list[tuple[int, float]] = []
    deadline = time.time() + 60
    while time.time() < deadline and len(history) < 2:
        time.sleep(0.5)
        history = read_wandb_history(run_file, "critic/score/mean")
    tracker.finish()
    assert history == [(1, 0.25), (2, 0.75)]


@pytest.mark.parametrize("status", ["finished", "failed", "killed"])
def test_mlflow_backend_file_store(tmp_path, monkeypatch, status):
    """Also how the run ended: a run an error stopped showed as FINISHED on the dashboard."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_tracker("mlflow", str(tmp_path), status)
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    experiment = client.get_experiment_by_name("proj")
    (run,) = client.search_runs([experiment.experiment_id])
    history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "critic/score/mean")]
    assert sorted(history) == [(1, 0.25), (2, 0.75)]
    assert run.data.params["data.seed"] == "1"
    assert run.info.status == status.upper()
    assert mlflow is not None


def test_swanlab_backend_local(tmp_path, monkeypatch):
    monkeypatch.setenv("SWANLAB_MODE", "local")
    run_tracker("swanlab", str(tmp_path))
    written = [p for p in glob.glob(str(tmp_path / "swanlog" / "**" / "*"), recursive=True) if os.path.isfile(p)]
    assert written, "swanlab wrote nothing"
    blob = "".join(open(p, errors="ignore").read() for p in written if os.path.getsize(p) < 5_000_000)
    assert "critic/score/mean" in blob and "0.75" in blob


def test_swanlab_without_a_key_logs_on_this_machine_without_an_error(tmp_path, monkeypatch, capfd):
    """No key, no login, no mode: local mode needs swanlab's dashboard package (swanboard); without it swanlab
    printed "ImportError: Please install swanboard to use 'local' mode" at every run's start. Offline mode keeps the
    metrics in the run's record file for `swanlab sync`."""
    for name in ("SWANLAB_MODE", "SWANLAB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    run_tracker("swanlab", str(tmp_path))
    printed = "".join(capfd.readouterr())
    assert "ImportError" not in printed and "swanboard" not in printed, printed
    records = glob.glob(str(tmp_path / "swanlog" / "*" / "*.swanlab"))
    assert records and b"critic/score/mean" in open(records[0], "rb").read()


def test_unknown_logger_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="neptune"):
        Tracker(["neptune"], "p", "e", str(tmp_path), {})


def test_wandb_and_swanlab_follow_their_own_configuration(tmp_path, monkeypatch):
    from verl.utils.logger.backends import swanlab_mode, wandb_mode

    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "SWANLAB_MODE", "SWANLAB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no `wandb login` / `swanlab login` here
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    assert wandb_mode() == "offline"
    assert swanlab_mode() == ("local" if importlib.util.find_spec("swanboard") else "offline")
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert wandb_mode() == "online"  # what `wandb login` writes
    # a server of one's own on a port: `wandb login` writes the entry under host and port; NETRC names the file
    monkeypatch.setenv("WANDB_BASE_URL", "http://localhost:8080")
    assert wandb_mode() == "offline"
    (tmp_path / "elsewhere").write_text("machine localhost:8080\n  login user\n  password 0123456789abcdef\n")
    (tmp_path / "elsewhere").chmod(0o600)
    monkeypatch.setenv("NETRC", str(tmp_path / "elsewhere"))
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"  # the user's explicit choice wins
    monkeypatch.setenv("SWANLAB_API_KEY", "key")
    assert swanlab_mode() == "cloud"
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    assert swanlab_mode() == "offline"


def _closed_port_url() -> str:
    import socket

    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_an_unreachable_wandb_or_swanlab_logs_offline_said_before_ray(tmp_path, monkeypatch, caplog):
    """Offline with credentials: wandb died 114 s into the run (after the workers started) with a DNS error and
    swanlab blamed the key. The check runs in the runner before Ray starts."""
    import socket

    from verl.utils.logger.backends import check_logger_services, swanlab_mode, wandb_mode

    for name in ("WANDB_MODE", "SWANLAB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef")
    monkeypatch.setenv("SWANLAB_API_KEY", "key")
    monkeypatch.setenv("WANDB_BASE_URL", _closed_port_url())
    monkeypatch.setenv("SWANLAB_API_HOST", _closed_port_url())
    assert wandb_mode() == "online" and swanlab_mode() == "cloud"
    with caplog.at_level(logging.WARNING):
        check_logger_services(["console", "wandb", "swanlab"])
    assert wandb_mode() == "offline" and swanlab_mode() == "offline"
    assert "wandb: 127.0.0.1:" in caplog.text and "logging offline for this run (WANDB_MODE=offline)" in caplog.text
    assert "upload later with `swanlab sync`" in caplog.text

    with socket.socket() as server:  # a service that answers keeps its mode
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.delenv("WANDB_MODE")
        check_logger_services(["wandb"])
        assert wandb_mode() == "online"


def test_online_logging_asked_for_explicitly_but_unreachable_is_an_error(monkeypatch):
    from verl.utils.logger.backends import check_logger_services

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", _closed_port_url())
    with pytest.raises(ValueError, match=r"trainer.logger has wandb with WANDB_MODE=online, but 127.0.0.1:\d+ cannot"):
        check_logger_services(["wandb"])
    check_logger_services(["console"])  # not among the loggers: not checked


def _steps(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_the_file_log_holds_this_run_only(tmp_path, caplog):
    """Runs sharing a folder were merged: a run started over kept the earlier run's later steps (plot_metrics showed
    them as this run's), a resumed run the steps it redid, a validation-only run replaced a step's validation."""
    run_tracker("file", str(tmp_path))  # steps 1 and 2, generations at 2
    with caplog.at_level(logging.WARNING):
        Tracker(["file"], "proj", "exp", str(tmp_path), CONFIG).log({"critic/score/mean": 0.0}, step=1)  # over
    assert _steps(tmp_path / "experiment_log.jsonl") == [1]
    (earlier,) = glob.glob(str(tmp_path / "previous_runs" / "*"))
    assert "moved to" in caplog.text and earlier in caplog.text
    assert _steps(tmp_path / "previous_runs" / os.path.basename(earlier) / "experiment_log.jsonl") == [1, 2]
    assert sorted(os.listdir(earlier)) == ["experiment_config.json", "experiment_log.jsonl", "generations.jsonl"]

    tmp_path = tmp_path / "resumed"
    run_tracker("file", str(tmp_path))
    with open(tmp_path / "experiment_log.jsonl", "a") as f:
        f.write('{"step": 3, "critic/sco')  # the run was killed while it wrote step 3
    resumed = Tracker(["file"], "proj", "exp", str(tmp_path), CONFIG, start_step=1)  # from global_step_1
    resumed.log({"critic/score/mean": 0.5}, step=2)
    rows = [json.loads(line) for line in (tmp_path / "experiment_log.jsonl").read_text().splitlines()]
    assert [(row["step"], row["critic/score/mean"]) for row in rows] == [(1, 0.25), (2, 0.5)]
    assert (tmp_path / "generations.jsonl").read_text() == ""  # its only sample was of step 2
    (later,) = glob.glob(str(tmp_path / "previous_runs" / "*" / "experiment_log.jsonl"))
    assert len(open(later).read().splitlines()) == 2  # step 2 and the cut line, kept

    val_only = Tracker(["file"], "proj", "exp", str(tmp_path), {"val": 1}, start_step=1, val_only=True)
    val_only.log({"val/reward_score": 0.9}, step=1)
    assert _steps(tmp_path / "experiment_log.jsonl") == [1, 2]  # the training run's log as it was
    assert _steps(tmp_path / "val_only_log.jsonl") == [1]
    assert json.loads((tmp_path / "val_only_config.json").read_text()) == {"val": 1}
    assert json.loads((tmp_path / "experiment_config.json").read_text()) == CONFIG


def test_a_line_cut_by_a_killed_run_is_not_glued_to_the_next(tmp_path):
    """An append after a cut last line (a killed run, a full disk) joined the two: that row lost, the file unreadable."""
    (tmp_path / "val_only_log.jsonl").write_text('{"step": 1, "val/a": 1.0}\n{"step": 2, "val/a"')
    Tracker(["file"], "p", "e", str(tmp_path), CONFIG, val_only=True).log({"val/a": 3.0}, step=3)
    lines = (tmp_path / "val_only_log.jsonl").read_text().splitlines()
    assert lines[1] == '{"step": 2, "val/a"' and json.loads(lines[2]) == {"step": 3, "val/a": 3.0}


def test_a_value_that_is_not_a_number_loses_only_itself(tmp_path, caplog):
    tracker = Tracker(["file"], "p", "e", str(tmp_path), CONFIG)
    with caplog.at_level(logging.WARNING):
        tracker.log({"a": 1.0, "b": None, "c": [1, 2]}, step=1)
    assert json.loads((tmp_path / "experiment_log.jsonl").read_text()) == {"step": 1, "a": 1.0}
    assert "Metric 'b' is None, not a number" in caplog.text


def test_tensorboard_keeps_one_point_per_step_across_a_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_tracker("tensorboard", str(tmp_path))
    resumed = Tracker(["tensorboard"], "proj", "exp", str(tmp_path), CONFIG, start_step=1)
    resumed.log({"critic/score/mean": 0.5}, step=2)
    resumed.finish()
    events = EventAccumulator(str(tmp_path / "tensorboard" / "proj" / "exp"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.25), (2, 0.5)]


def test_mlflow_logs_every_metric_whatever_its_name_and_continues_a_run(tmp_path, monkeypatch, caplog):
    """A reward key MLflow refuses ("acc(strict)") lost every metric of every step; continuing a run (MLFLOW_RUN_ID)
    with a changed config value failed at the start."""
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracker = Tracker(["mlflow"], "proj", "exp", str(tmp_path), CONFIG)
    with caplog.at_level(logging.WARNING):
        tracker.log({"critic/score/mean": 0.5, "reward/acc(strict)": 1.0, "reward//x": 2.0, "val/best@4": 3.0}, 1)
    tracker.log_generations(GENERATIONS, step=1)
    tracker.finish()
    client = MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.data.metrics == {
        "critic/score/mean": 0.5,
        "reward/acc_strict_": 1.0,
        "reward/x": 2.0,
        "val/best_at_4": 3.0,
    }
    assert "'reward/acc(strict)' is logged as 'reward/acc_strict_'" in caplog.text
    assert glob.glob(str(tmp_path / "mlruns" / "*" / "artifacts" / "generations" / "step_1.json"))
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    with caplog.at_level(logging.WARNING):
        again = Tracker(["mlflow"], "proj", "exp", str(tmp_path), {"data": {"seed": 2}, "extra": 5})
    again.log({"critic/score/mean": 0.75}, 2)
    again.finish()
    params = client.get_run(run.info.run_id).data.params
    assert (params["data.seed"], params["extra"]) == ("1", "5")
    assert "keeps its parameters data.seed" in caplog.text


def test_a_continued_mlflow_run_keeps_one_point_per_step_across_a_resume(tmp_path, monkeypatch, caplog):
    """A run resumed from its step-1 checkpoint with MLFLOW_RUN_ID redoes step 2: MLflow keeps every value it is sent,
    so the run's history had two points at step 2 (its chart zigzagged), where the file and TensorBoard logs keep one
    per step. As wandb with WANDB_RUN_ID, the continued run logs only the steps it does not have yet."""
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_tracker("mlflow", str(tmp_path))
    client = MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    resumed = Tracker(["mlflow"], "proj", "exp", str(tmp_path), CONFIG, start_step=1)
    with caplog.at_level(logging.INFO):
        for step, score in ((2, 0.5), (3, 1.0)):
            resumed.log({"critic/score/mean": score, "val/reward_score": score}, step)
    resumed.finish()
    history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "critic/score/mean"))
    assert history == [(1, 0.25), (2, 0.75), (3, 1.0)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/reward_score")] == [2, 3]  # new: logged
    assert "already has step 2 of critic/score/mean" in caplog.text


def test_a_logger_package_or_folder_missing_is_found_before_ray(tmp_path, monkeypatch):
    from verl.utils.logger.backends import check_logger_services

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if it were not installed
    with pytest.raises(ValueError, match=r"trainer.logger has wandb, but the wandb package is not installed"):
        check_logger_services(["console", "wandb"])
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "file" / "tb"))
    with pytest.raises(ValueError, match=r"TENSORBOARD_DIR=.* cannot be written"):
        check_logger_services(["tensorboard"])
    check_logger_services(["console", "file"])


def test_a_logger_mode_that_is_not_one_is_refused_before_anything_starts(monkeypatch):
    """WANDB_MODE=bogus passed the check and failed with pydantic's traceback once the workers were up."""
    from verl.utils.logger.backends import check_logger_services

    monkeypatch.setenv("WANDB_MODE", "bogus")
    with pytest.raises(ValueError, match=r"WANDB_MODE=bogus is not one of its modes \(online, offline"):
        check_logger_services(["wandb"])
    monkeypatch.setenv("SWANLAB_MODE", "cloudy")
    with pytest.raises(ValueError, match=r"SWANLAB_MODE=cloudy is not one of its modes"):
        check_logger_services(["swanlab"])
    check_logger_services(["console"])  # not among the loggers: not checked


def test_a_project_name_wandb_or_swanlab_refuses_is_found_before_anything_starts(monkeypatch):
    """trainer.project_name=team/exp (or with # ? % :, or too long) passed every check and failed wandb.init (swanlab
    takes still fewer characters: no space) only once the workers had loaded the models, with "fix its settings"."""
    from verl.utils.logger.backends import check_logger_services

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    for logger, project, why in (
        ("wandb", "team/math", "cannot contain characters"),
        ("wandb", "p" * 129, "exceeded 128 characters"),
        ("swanlab", "math run", "should match pattern"),
    ):
        with pytest.raises(ValueError, match=rf"has {logger}, which refuses trainer.project_name=.*{why}"):
            check_logger_services(["console", logger], project)
    check_logger_services(["console", "file", "tensorboard", "mlflow"], "team/math run")  # theirs take it
    check_logger_services(["wandb", "swanlab"], "verl_compact-2.0")


def test_a_backend_that_fails_to_start_is_one_error_naming_it(tmp_path, monkeypatch):
    """An MLflow run id that does not exist, a tracking server that is down: the backend's own exception and stack
    came out of the trainer once its workers were up (and SFT left its workers running)."""
    from verl.utils.logger import tracker
    from verl.utils.logger.tracker import LoggerStartError

    def down(*args):
        raise RuntimeError(
            "API request to http://127.0.0.1:9/api/2.0/mlflow/experiments/get-by-name failed\n  retries"
        )

    monkeypatch.setattr(tracker, "MlflowBackend", down)
    with pytest.raises(LoggerStartError, match=r"trainer.logger's mlflow could not start \(RuntimeError: API request"):
        Tracker(["file", "mlflow"], "p", "e", str(tmp_path), {})
    assert (tmp_path / "experiment_config.json").is_file()  # the file logger started first, and was finished


def test_behind_a_proxy_online_logging_is_not_switched_off_by_a_direct_connection(monkeypatch):
    """The direct connection ignored HTTPS_PROXY: on a network reachable only through the proxy, wandb was switched
    offline (or an explicit WANDB_MODE=online refused), though wandb itself connects through the proxy."""
    from verl.utils.logger.backends import check_logger_services

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", _closed_port_url())
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    check_logger_services(["wandb"])  # not refused
    assert os.environ["WANDB_MODE"] == "online"


def test_mlflow_metrics_do_not_hold_the_step_while_the_store_is_slow(tmp_path, monkeypatch):
    """`log` waited for the tracking store: a server that stopped answering held every step for the client's
    retries (minutes). Metrics go through MLflow's own queue now, in order, and `finish` flushes them."""
    import threading

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    release, callers = threading.Event(), []
    real_log_batch = SqlAlchemyStore.log_batch

    def slow_log_batch(self, run_id, metrics, params, tags):
        if metrics:  # (the run's params at the start: as they were)
            callers.append(threading.current_thread())
            release.wait(60)  # a store that answers only once the step has gone on
        return real_log_batch(self, run_id, metrics, params, tags)

    monkeypatch.setattr(SqlAlchemyStore, "log_batch", slow_log_batch)  # before the store exists: its queue binds it
    tracker = Tracker(["mlflow"], "proj", "exp", str(tmp_path), CONFIG)
    tracker.log({"critic/score/mean": 0.25}, 1)
    tracker.log({"critic/score/mean": 0.75}, 2)
    assert not release.is_set()  # the steps went on while the store waited
    release.set()
    tracker.finish()
    assert callers and all(caller is not threading.main_thread() for caller in callers)
    client = MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    history = client.get_metric_history(run.info.run_id, "critic/score/mean")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.75)]


def test_how_a_run_ended_is_its_error_s_kind():
    import signal

    from verl.trainer.preemption import TrainingInterrupted, run_status

    assert run_status(None) == "finished"
    assert run_status(TrainingInterrupted(signal.SIGTERM, 3, None)) == run_status(KeyboardInterrupt()) == "killed"
    assert run_status(RuntimeError("a reward function raised")) == "failed"
    with pytest.raises(ValueError, match="'crashed' is not one of"):
        Tracker(["console"], "p", "e", "/nonexistent", {}).finish("crashed")
