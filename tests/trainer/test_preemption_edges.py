# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What a stop says and how the process ends (verl/trainer/preemption.py): a second signal ends the process at once,
a stop within the grace period names the checkpoint it saved, a stop that is not a signal exits with SIGTERM's status,
and the exit timers and paths of a lost control store act only where the loop has not stopped. A mutation audit
changed each line these pin and no other test failed."""

import signal
import subprocess
import sys
import threading
import time

import pytest

from verl.trainer import preemption
from verl.trainer.preemption import RunState, StopRequest, TrainingInterrupted


@pytest.fixture(autouse=True)
def _own_stop_state(monkeypatch):
    """This test's signals and stops stay its own, and no teardown timer is armed (as if not leading a group)."""
    monkeypatch.setattr(preemption, "_run", RunState())
    monkeypatch.setattr(preemption.os, "getpgrp", lambda: -1)


@pytest.fixture
def exits(monkeypatch):
    """The statuses `os._exit` was called with (in the main thread it raises SystemExit instead of ending the test
    run; a timer's thread just ends)."""
    codes: list[int] = []

    def record_exit(code: int) -> None:
        codes.append(code)
        if threading.current_thread() is threading.main_thread():
            raise SystemExit(code)

    monkeypatch.setattr(preemption.os, "_exit", record_exit)
    return codes


def _stopped(stop: StopRequest, step: int, unsaved: bool, save, save_root: str = "/ckpt") -> TrainingInterrupted:
    with pytest.raises(TrainingInterrupted) as stopped:
        stop.stop(step, unsaved, save, save_root)
    return stopped.value


def test_a_second_signal_ends_the_process_at_once():
    """The first SIGTERM lets the step finish; the second must not wait for it (in a child: it ends the process)."""
    code = (
        "import os, signal, time\n"
        "from verl.trainer.preemption import StopRequest\n"
        "with StopRequest(grace_s=60).installed():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.2)\n"
        "    print('first handled', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(20)\n"
        "    print('still here', flush=True)\n"
    )
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == -signal.SIGTERM, result.stderr[-2000:]
    assert result.stdout.split("\n")[0] == "first handled" and "still here" not in result.stdout
    assert time.monotonic() - start < 15


def test_a_stop_within_the_grace_period_saves_and_names_the_checkpoint():
    saved: list[bool] = []
    stop = StopRequest(grace_s=60)
    with stop.installed():
        stop._handle(signal.SIGTERM, None)
        stopped = _stopped(stop, 3, True, lambda: saved.append(True))
    assert saved == [True] and stopped.checkpoint == "/ckpt/global_step_3"
    assert str(stopped) == (
        "Stopped by SIGTERM after step 3; checkpoint saved to /ckpt/global_step_3. Run the same command again to resume."
    )


def test_a_stop_before_the_first_step_names_no_checkpoint():
    """A new run stopped before its first step has saved nothing: no global_step_0 is named."""
    stop = StopRequest(grace_s=60)
    with stop.installed():
        stop._handle(signal.SIGINT, None)
        stopped = _stopped(stop, 0, False, lambda: pytest.fail("saved"))
    assert stopped.checkpoint is None and "checkpoint saved to" not in str(stopped)
    assert "no checkpoint saved (no step had run)" in str(stopped)  # it said "(grace period over)", within it


def test_a_lost_control_store_stops_after_the_step_and_exits_with_sigterms_status(exits, capsys):
    stop = StopRequest(grace_s=60)
    saved: list[bool] = []
    with stop.installed():
        assert preemption.stop_the_fit_loop("Ray's control store (gcs_server) ended")
        with pytest.raises(SystemExit):
            stop.stop(2, True, lambda: saved.append(True), "/ckpt")
    assert saved == [True] and exits == [128 + signal.SIGTERM]
    assert capsys.readouterr().err == (
        "Stopped because Ray's control store (gcs_server) ended after step 2; checkpoint saved to /ckpt/global_step_2. "
        "Run the same command again to resume.\n"
    )


def test_a_control_store_lost_after_the_loop_stopped_exits_with_the_stops_status(exits, capsys):
    preemption.exit_if_stopped("Ray's control store ended")  # no stop yet: the caller goes on
    assert exits == []
    stop = StopRequest(grace_s=60)
    with stop.installed():
        stop._handle(signal.SIGINT, None)
        stopped = _stopped(stop, 4, False, lambda: pytest.fail("saved"))
    capsys.readouterr()
    with pytest.raises(SystemExit):
        preemption.exit_if_stopped("Ray's control store ended")
    assert exits == [128 + signal.SIGINT]
    assert capsys.readouterr().err == f"{stopped.text} (Ray's control store ended: exiting at once.)\n"


def test_the_daemons_timer_leaves_a_loop_that_stopped_to_its_own_exit(exits, monkeypatch):
    """Where the signal ended Ray's daemons, the timer ends a run whose step cannot finish; a loop that stopped (its
    checkpoint saved) exits its own way, with its own message, and is not ended as one that could not finish."""
    monkeypatch.setattr(preemption, "TEARDOWN_S", 0.2)
    stop = StopRequest(grace_s=60)
    with stop.installed():
        stop._handle(signal.SIGTERM, None)
        _stopped(stop, 2, False, lambda: pytest.fail("saved"))
    monkeypatch.setattr(preemption.os, "getpgrp", preemption.os.getpid)  # the signal reached the driver's group
    assert preemption.daemons_ended_with_the_signal()
    time.sleep(0.6)
    assert exits == []
    monkeypatch.setattr(preemption, "_run", RunState())  # a run whose step never finished: ended by the timer
    preemption._run.signal(signal.SIGTERM, in_a_step=True)
    assert preemption.daemons_ended_with_the_signal()
    deadline = time.monotonic() + 10
    while not exits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exits == [128 + signal.SIGTERM]


def test_ctrl_c_and_a_signal_are_killed_runs_for_the_dashboards():
    assert preemption.run_status(None) == "finished"
    assert preemption.run_status(KeyboardInterrupt()) == "killed"
    assert preemption.run_status(TrainingInterrupted(signal.SIGTERM, 2, None)) == "killed"
    assert preemption.run_status(RuntimeError("boom")) == "failed"


def test_a_run_started_from_an_explicit_checkpoint_is_told_the_command_starts_there_again(tmp_path):
    """With trainer.load_checkpoint_path set (find_last_checkpoint on), the same command starts from that checkpoint
    again, not from the steps this stop saved: "Run the same command again to resume" would be wrong."""
    explicit = tmp_path / "earlier" / "global_step_5"
    explicit.mkdir(parents=True)
    (tmp_path / "run").mkdir()
    stop = StopRequest(grace_s=60, resume=(True, str(explicit)))
    with stop.installed():
        stop._handle(signal.SIGTERM, None)
        stopped = _stopped(stop, 2, False, lambda: pytest.fail("saved"), str(tmp_path / "run"))
    assert f"Running the same command again starts from trainer.load_checkpoint_path={explicit} again" in stopped.text
    assert "Run the same command again to resume" not in stopped.text


def test_a_signal_to_a_driver_that_does_not_lead_its_group_did_not_reach_rays_daemons():
    """Started by a launcher (getpgrp is not the driver): Ray's daemons have a group of their own, no timer is armed."""
    preemption._run.signal(signal.SIGTERM, in_a_step=True)
    assert preemption.signal_received() == signal.SIGTERM
    assert preemption.signal_reached_the_group() is None and not preemption.daemons_ended_with_the_signal()


def test_a_loop_whose_daemons_ended_with_the_signal_exits_once_stopped(monkeypatch):
    """Its Ray teardown would wait on the lost control store: the loop exits at once after its save."""
    monkeypatch.setattr(preemption.os, "getpgrp", preemption.os.getpid)
    monkeypatch.setattr(preemption, "TEARDOWN_S", 60.0)  # not reached in this test
    stop = StopRequest(grace_s=60)
    with stop.installed():
        stop._handle(signal.SIGTERM, None)
        assert not stop.exit_at_once
        assert preemption.daemons_ended_with_the_signal()
        assert stop.exit_at_once
    monkeypatch.setattr(preemption, "_run", RunState())  # the timer armed above does nothing now


def test_a_run_does_not_inherit_the_signal_an_earlier_run_in_the_process_received():
    """A notebook or a sweep runs again after a stop: its first signal stops it as a first one, not at once."""
    preemption._run.signal(signal.SIGINT, in_a_step=True)  # the earlier run's
    with pytest.raises(TrainingInterrupted, match="Stopped by SIGTERM outside the training loop"):
        with preemption.RunSignals().installed() as signals:
            assert preemption.signal_received() is None
            signals._handle(signal.SIGTERM, None)


def test_a_fit_loop_in_another_thread_runs_without_signal_handlers():
    """Signal handlers can be set in the main thread only: a loop run from a thread (a notebook's) still runs."""
    before = signal.getsignal(signal.SIGTERM)
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            with StopRequest(grace_s=60).installed() as stop:
                assert not stop.requested
        except BaseException as err:  # reported by the test
            errors.append(err)

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join(timeout=30)
    assert errors == [] and signal.getsignal(signal.SIGTERM) is before
