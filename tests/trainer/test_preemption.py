# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""SIGTERM / SIGINT: finish the step, checkpoint within the grace period, exit 128 + signal; the next run resumes."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from processes import descendant_named, finished_stderr, start_run_in_a_group, stderr_tail, wait_gone

from tests.model_folders import config_only_model
from verl.models.tiny_models import get_or_build_tiny_model
from verl.trainer import preemption
from verl.trainer.checkpointing import CheckpointTracker, is_complete
from verl.trainer.preemption import StopRequest, TrainingInterrupted, stop_the_fit_loop


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _own_stop_state(monkeypatch):
    """The signals and stops a test's handlers record stay its own (a later test's Ray would see a stale signal)."""
    monkeypatch.setattr(preemption, "_run", preemption.RunState())


def test_first_signal_is_recorded_and_handlers_are_restored(monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    stop = StopRequest(grace_s=60)
    with stop.installed():
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)  # handled: the process goes on
        time.sleep(0.05)
        assert stop.requested and stop.signum == signal.SIGTERM and stop.within_grace()
    assert signal.getsignal(signal.SIGTERM) is before
    assert not StopRequest(grace_s=0).within_grace()  # no signal yet
    message = str(TrainingInterrupted(signal.SIGTERM, 7, "/ckpt/global_step_7"))
    assert "Stopped by SIGTERM after step 7; checkpoint saved to /ckpt/global_step_7" in message
    # trainer.signal_grace_s=0 saves nothing on purpose: not a grace period that ran out
    from verl.trainer import preemption

    monkeypatch.setattr(preemption.os, "getpgrp", lambda: -1)  # as if not leading a group: no teardown timer
    never = StopRequest(grace_s=0)
    with never.installed():
        never._handle(signal.SIGTERM, None)
        with pytest.raises(
            TrainingInterrupted, match=r"after step 2; no checkpoint saved \(trainer.signal_grace_s=0\)"
        ):
            never.stop(2, True, lambda: pytest.fail("saved"), "/ckpt")


def test_a_signal_outside_the_fit_loop_counts_for_rays_daemons_too(monkeypatch):
    """A group SIGTERM while the run starts (or validates first, or finishes) reached Ray's daemons too, but nothing
    watched for it: the unwinding waited on the lost control store until Ray ended the driver, exit 1."""
    monkeypatch.setattr(preemption.os, "getpgrp", os.getpid)  # as a driver that leads its group
    with pytest.raises(TrainingInterrupted, match="outside the training loop"):
        preemption.RunSignals()._handle(signal.SIGTERM, None)
    assert preemption.signal_reached_the_group() == signal.SIGTERM and not preemption._run.in_a_step
    preemption.forget_stops()  # the next Ray's daemons: not reached by it
    assert preemption.signal_reached_the_group() is None


def test_a_stop_that_exits_at_once_gives_the_resume_advice_of_the_run_s_settings(tmp_path, monkeypatch):
    """The paths that exit at once (Ray's control store lost) printed "Run the same command again to resume" also
    where that command starts from trainer.load_checkpoint_path again, or over (find_last_checkpoint=false)."""
    monkeypatch.setattr(preemption.os, "getpgrp", lambda: -1)  # as if not leading a group: no teardown timer
    stop = StopRequest(grace_s=60, resume=(False, None))
    with stop.installed(), pytest.raises(TrainingInterrupted) as stopped:
        stop._handle(signal.SIGTERM, None)
        stop.stop(2, False, lambda: pytest.fail("saved"), str(tmp_path))
    assert stopped.value.text.startswith("Stopped by SIGTERM after step 2")
    assert "find_last_checkpoint=false running the same command again starts over" in stopped.value.text
    assert "Run the same command again to resume" not in stopped.value.text


def test_a_stop_that_is_not_a_signal_reaches_only_a_running_fit_loop():
    assert not stop_the_fit_loop("the sky fell")  # no fit loop runs
    stop = StopRequest(grace_s=60)
    with stop.installed():
        assert stop_the_fit_loop("the sky fell") and stop.requested and stop.within_grace()
        assert stop_the_fit_loop("it fell again")  # already stopping: the first cause stands
    assert stop.cause == "the sky fell" and not stop_the_fit_loop("after the loop")
    on_signal = StopRequest(grace_s=60)
    with on_signal.installed():
        on_signal._handle(signal.SIGTERM, None)
        assert not on_signal.exit_at_once
        assert stop_the_fit_loop("Ray's control store ended")  # with the signal's stop under way: exit once stopped
    assert on_signal.exit_at_once and on_signal.cause is None and on_signal.signum == signal.SIGTERM
    message = str(TrainingInterrupted(signal.SIGTERM, 3, "/ckpt/global_step_3", stop.cause))
    assert message.startswith("Stopped because the sky fell after step 3; checkpoint saved to /ckpt/global_step_3.")


def _trainer_command(tmp_path) -> tuple[list[str], dict[str, str], object]:
    """A 40-step CPU run of the tiny text model (command, environment, checkpoint directory)."""
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    (tmp_path / "reward.py").write_text(
        "def compute_score(sample):\n    return {'overall': float(len(sample['response']) % 3)}\n"
    )
    with open(tmp_path / "train.jsonl", "w") as f:
        for i in range(32):
            f.write(json.dumps({"prompt": f"What is {i} + 2?", "answer": str(i + 2)}) + "\n")
    save = tmp_path / "ckpt"
    args = [
        f"data.train_files={tmp_path / 'train.jsonl'}",
        "data.max_prompt_length=64",
        "data.max_response_length=8",
        "data.rollout_batch_size=4",
        "worker.actor.global_batch_size=4",
        f"worker.actor.model.model_path={model}",
        "worker.rollout.n=2",
        "worker.rollout.max_num_batched_tokens=256",
        "worker.rollout.kv_cache_memory_mb=32",
        f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "trainer.logger=[file]",
        f"trainer.save_checkpoint_path={save}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return [sys.executable, "-m", "verl.trainer.main", *args], env, save


def _start_and_wait_for_a_step(
    command: list[str], env: dict[str, str], save, max_steps: int = 40
) -> tuple[subprocess.Popen, subprocess.Popen]:
    """The run (`max_steps` at most) in a launcher's process group, once it has logged a training step."""
    return start_run_in_a_group(
        [*command, f"trainer.max_steps={max_steps}"], env, REPO, save / "experiment_log.jsonl", "actor/pg_loss"
    )


@pytest.mark.slow
def test_sigterm_to_the_group_a_driver_leads_saves_and_exits_at_once(tmp_path):
    """A driver started as its group's leader (`setsid`, a shell job) keeps Ray's daemons in its group: a SIGTERM to
    the group ends them with it. The step was saved, then the driver waited on Ray's lost control store for the
    grace period + 60 s and exited 1, without a word of the checkpoint. Where the signal lands while the step in
    flight needs the control store, the step cannot finish (it waited until Ray ended the process, exit 1, two
    minutes later): the driver exits with the signal's status and says no step was saved."""
    command, env, save = _trainer_command(tmp_path)
    run = subprocess.Popen(
        [*command, "trainer.max_steps=40"], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, process_group=0
    )
    log, deadline = save / "experiment_log.jsonl", time.monotonic() + 300
    while not (log.exists() and "actor/pg_loss" in log.read_text()):
        assert run.poll() is None, stderr_tail(run)
        assert time.monotonic() < deadline, "no training step within 300 s"
        time.sleep(0.5)
    os.killpg(run.pid, signal.SIGTERM)
    start = time.monotonic()
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert time.monotonic() - start < preemption.TEARDOWN_S + 60, stderr[-3000:]  # not Ray's minutes
    stopped = [line for line in stderr.splitlines() if line.startswith("Stopped by SIGTERM")]
    assert stopped, stderr[-3000:]
    if "checkpoint saved to" in stopped[0]:
        saved = re.search(r"checkpoint saved to (\S+?)\.? ", stopped[0]).group(1)
        assert is_complete(saved), stopped[0]
    else:  # the step in flight could not finish: nothing was saved, and the message says so
        assert "during a step that could not finish" in stopped[0], stderr[-3000:]
        assert not any(name.startswith("global_step_") for name in os.listdir(save)), os.listdir(save)


HANGS_IN_THE_STEP = (
    "with stop.installed():\n"
    "    stop._handle(signal.SIGTERM, None)\n"
    "    assert preemption.stop_the_fit_loop('the store ended')\n"  # exits once stopped, but arms nothing
    "    assert preemption.daemons_ended_with_the_signal()\n"  # the raylet ended: the watch arms the timer
    "    time.sleep(30)\n"  # the step that never finishes
)
HANGS_IN_THE_TEARDOWN = (
    "try:\n"
    "    with stop.installed():\n"
    "        stop._handle(signal.SIGTERM, None)\n"
    "        raise RuntimeError('a worker died with the raylet')\n"
    "except RuntimeError:\n"
    "    assert preemption.daemons_ended_with_the_signal()\n"  # the raylet ended: the watch arms the timer
    "    time.sleep(30)\n"  # Ray's teardown (or its excepthook), which never finishes
)


@pytest.mark.parametrize("hang", [HANGS_IN_THE_STEP, HANGS_IN_THE_TEARDOWN], ids=["step", "teardown"])
def test_a_step_that_hangs_once_the_signal_ended_rays_control_store_exits_with_the_signals_status(hang):
    """The timer `daemons_ended_with_the_signal` arms where a signal reached the group a driver leads: in the step in
    flight, or after it failed with the daemons (its error unwinding into Ray's teardown, which waited on the lost
    control store until Ray ended the process, exit 1 two minutes later, without a word of the signal: a CI run)."""
    script = (
        "import os, signal, time\n"
        "from verl.trainer import preemption\n"
        "os.setpgid(0, 0)\n"  # lead a group of its own, as a driver started from a shell
        "preemption.TEARDOWN_S = 0.5\n"
        "preemption.forget_stops()\n"
        "stop = preemption.StopRequest(grace_s=60)\n" + hang
    )
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr
    assert time.monotonic() - start < 20
    assert "\nStopped by SIGTERM during a step that could not finish" in run.stderr, run.stderr


def test_a_group_signal_arms_the_exit_while_the_control_store_lingers_and_the_raylet_is_slow_to_end():
    """A SIGTERM to the group a driver leads reaches a local Ray's daemons: the control store closes its port at once
    but its process lingers, and under load the raylet took minutes to exit. The watch waited for either process to
    end, so a step in flight that needed them hung until Ray ended the driver, exit 1, two minutes later (a CI run).
    Now the closed port makes the loop exit once its step is saved, and the raylet's end, which takes the workers,
    gives the step TEARDOWN_S before the driver exits with the signal's status."""
    script = (
        "import os, signal, time, ray\n"
        "from tests.processes import descendant_named\n"
        "from verl.trainer import preemption, ray_setup\n"
        "os.setpgid(0, 0)\n"  # lead a group of its own, as a driver started from a shell
        "ray.init(address='local', num_cpus=1, include_dashboard=False)\n"
        "preemption.TEARDOWN_S = 0.5\n"
        "stop = preemption.StopRequest(grace_s=60)\n"
        "with stop.installed():\n"  # after ray.init, as the trainer's (it replaces Ray's own SIGTERM handler)
        "    ray_setup.watch_control_store(poll_s=0.2)\n"
        "    daemons = {name: descendant_named(os.getpid(), name) for name in ('gcs_server', 'raylet')}\n"
        "    print(*(process.pid for process in daemons.values()), flush=True)\n"
        "    daemons['raylet'].suspend()\n"  # a raylet slow to exit: it cannot end until resumed
        "    os.killpg(0, signal.SIGTERM)\n"
        "    deadline = time.monotonic() + 60\n"
        "    while not stop.exit_at_once and time.monotonic() < deadline:\n"
        "        time.sleep(0.1)\n"
        "    print('armed' if stop.exit_at_once else 'unarmed', flush=True)\n"
        "    daemons['raylet'].kill()\n"  # it ends, and its workers with it: the step in flight cannot finish
        "    time.sleep(30)\n"
        "    print('still here', flush=True)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = (text.decode() for text in run.communicate(timeout=180))
    finally:
        run.kill()
    lines = stdout.split("\n")
    for pid in [int(pid) for pid in lines[0].split()]:  # the lingering store, orphaned by the exit
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert lines[1] == "armed", stdout + stderr[-3000:]
    assert run.returncode == 128 + signal.SIGTERM and "still here" not in stdout, stdout + stderr[-3000:]
    assert "\nStopped by SIGTERM during a step that could not finish" in stderr, stderr[-3000:]


@pytest.mark.slow
def test_a_killed_raylet_ends_the_run_with_one_error_naming_the_checkpoint(tmp_path):
    """Ray's daemon dying under the run (`ray stop`, the OOM killer) ended it in Ray's traceback of an
    ActorUnavailableError, and the hint said no checkpoint was saved when the saves were weights-only."""
    import psutil

    command, env, save = _trainer_command(tmp_path)
    # steps enough to outlast Ray's noticing the raylet's end (an idle machine ran 40 steps before it did)
    launcher, proc = _start_and_wait_for_a_step([*command, "trainer.save_freq=1"], env, save, max_steps=2000)
    launcher.kill()
    try:
        deadline = time.monotonic() + 60
        while CheckpointTracker.load(str(save)) is None:  # the first save is done
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        run = psutil.Process(proc.pid).children(recursive=True)
        descendant_named(proc.pid, "raylet").kill()
        stderr = finished_stderr(proc, 120)
    finally:  # not a 2,000-step run left training
        proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    # Ray reports the actors it lost as dead or as unreachable, depending on which it notices first
    assert len(errors) == 1 and re.match(r"Error: Worker \S+ rank \d (died|cannot be reached)", errors[0]), errors
    step = CheckpointTracker.load(str(save)).last_global_step
    hint = f"The latest checkpoint is {save / f'global_step_{step}'}: running the same command again resumes from it."
    assert hint in stderr, stderr[-3000:]
    _, alive = psutil.wait_procs(run, timeout=30)
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]


@pytest.mark.slow
def test_a_lost_control_store_stops_the_run_after_its_step_with_a_checkpoint(tmp_path):
    """Ray's gcs_server dying alone (killed, out of memory) left the workers training, until Ray ended the driver 60 s
    later from C++, saving nothing; the run now stops after its step with a checkpoint and exits, leaving nothing."""
    import psutil

    command, env, save = _trainer_command(tmp_path)
    launcher, proc = _start_and_wait_for_a_step(command, env, save)
    launcher.kill()
    run = psutil.Process(proc.pid).children(recursive=True)
    descendant_named(proc.pid, "gcs_server").kill()
    stderr = finished_stderr(proc, 120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("Stopped because")]
    step = CheckpointTracker.load(str(save)).last_global_step
    checkpoint = save / f"global_step_{step}"
    assert stopped == [
        f"Stopped because Ray's control store (gcs_server) ended after step {step}; checkpoint saved to "
        f"{checkpoint}. Run the same command again to resume."
    ], stderr[-3000:]
    assert 1 <= step < 40 and is_complete(str(checkpoint))
    _, alive = psutil.wait_procs(run, timeout=30)
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_the_next_run_resumes(tmp_path):
    """The signal goes to the launcher's whole process group, as `timeout` or `kill -- -PGID` send it: Ray's daemons
    and workers and the data loader's workers (two here) used to get it too and die, and the driver hung 60 s in
    Ray's client and saved nothing; they now live in groups of their own, so the driver alone gets it."""
    command, env, save = _trainer_command(tmp_path)
    log = save / "experiment_log.jsonl"
    timeline = tmp_path / "trace" / "timeline.json"
    interrupted = [*command, "data.dataloader_num_workers=2", f"trainer.ray_timeline={timeline}"]
    launcher, proc = _start_and_wait_for_a_step(interrupted, env, save)
    os.killpg(launcher.pid, signal.SIGTERM)
    assert launcher.wait(timeout=10) == -signal.SIGTERM
    stderr = finished_stderr(proc, 300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("Stopped by SIGTERM")]
    assert len(stopped) == 1 and "checkpoint saved to" in stopped[0], stderr[-3000:]
    step = CheckpointTracker.load(str(save)).last_global_step
    assert 1 <= step < 40 and is_complete(str(save / f"global_step_{step}"))
    # the Ray timeline is written after an interrupted run too, with the workers' calls up to the last step
    calls = Counter(event["name"] for event in json.loads(timeline.read_text()))
    assert calls["actor_rollout_ref_update_actor"] == 2 * step and calls["actor_rollout_ref_save_checkpoint"] >= 2

    resumed = subprocess.run(
        [*command, f"trainer.max_steps={step + 1}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Traceback" not in resumed.stderr, resumed.stderr[-3000:]  # e.g. loader workers killed at exit
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines() if "actor/pg_loss" in line]
    assert steps == list(range(1, step + 2)), steps  # no step repeated, none lost


def test_sighup_is_handled_like_sigterm_in_the_fit_loop():
    """A closed terminal sends SIGHUP: it used to kill the driver with no message and no save. In a child process:
    unhandled, SIGHUP would end the test runner."""
    code = (
        "import os, signal, time\n"
        "from verl.trainer.preemption import StopRequest\n"
        "stop = StopRequest(grace_s=60)\n"
        "with stop.installed():\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    time.sleep(0.1)\n"
        "    print(stop.requested, stop.signum == signal.SIGHUP)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
    assert "Received SIGHUP: finishing the current step" in result.stderr


# The run's start, faked after the config is loaded: Ray starts as the trainer starts it, then the signal comes
# (as it would while the engines start), then a long wait that the signal must cut short: a sleep, or (a stand-in
# for the workers' and engines' start, which the driver waits for in ray.wait) a real ray.wait on a task of a minute.
START_THEN_SIGNAL = """
import os, signal, sys, threading, time
import psutil
import ray
from verl.trainer import runner
from verl.trainer.ray_setup import start_ray

def a_minute():
    time.sleep(60)

def once_ray_starts(signum):
    # ray.init's own SIGTERM handler in place and its control store started: Ray is starting
    original = signal.getsignal(signal.SIGTERM)
    while True:
        daemons = [p for p in psutil.Process().children(recursive=True) if "gcs_server" in p.name()]
        if daemons and signal.getsignal(signal.SIGTERM) is not original:
            break
        time.sleep(0.005)
    print("raylet:", daemons[0].pid, flush=True)  # (its control store: the raylet may not have started yet)
    print("signalled at:", time.monotonic(), flush=True)
    os.kill(os.getpid(), signum)

def starting(config, *args):
    if sys.argv[2] == "ray.init":
        threading.Thread(target=once_ray_starts, args=(getattr(signal, sys.argv[1]),), daemon=True).start()
    start_ray("cpu", 1, 300.0)
    raylet = [p for p in psutil.Process().children(recursive=True) if "raylet" in p.name()][0]
    ignored = int(open(f"/proc/{raylet.pid}/status").read().split("SigIgn:")[1].split()[0], 16)
    print("raylet ignores SIGHUP:", bool(ignored & (1 << (signal.SIGHUP - 1))), flush=True)
    print("raylet:", raylet.pid, flush=True)
    signum = getattr(signal, sys.argv[1])
    if sys.argv[2] == "ray.wait":
        slow = ray.remote(a_minute).remote()
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signum)).start()  # while the driver waits in Ray
        print("signalled at:", time.monotonic() + 1.0, flush=True)
        ray.wait([slow])
        return
    print("signalled at:", time.monotonic(), flush=True)  # (the clock is the machine's, the same in the test)
    os.kill(os.getpid(), signum)
    time.sleep(600)

runner._train = starting
from verl.trainer.main import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize(
    ("name", "waiting_in"),
    [("SIGTERM", "sleep"), ("SIGHUP", "sleep"), ("SIGTERM", "ray.wait"), ("SIGTERM", "ray.init")],
)
def test_a_signal_while_the_run_starts_ends_it_with_the_trainers_message(tmp_path, name, waiting_in):
    """SIGTERM while the engines started ended with exit -6 and Ray's C++ stack dump (ray.init's own SIGTERM handler
    killed its daemons under the driver); SIGHUP killed the driver silently. A signal while the driver waited in
    ray.wait (the workers' start) printed the message, then a traceback of "SystemError: <cyfunction
    CoreWorker.wait ...> returned a result with an exception set" (Ray lets only a KeyboardInterrupt through). A
    SIGTERM while ray.init started Ray ended the run with exit 15 and no message (ray.init's own handler)."""
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    config_only_model(tmp_path / "model")
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    args = [
        f"data.train_files={tmp_path / 'train.jsonl'}",
        f"worker.actor.model.model_path={tmp_path / 'model'}",
        f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
        f"trainer.save_checkpoint_path={tmp_path / 'ckpt'}",
        "data.rollout_batch_size=8",
        "worker.actor.global_batch_size=4",
        "worker.rollout.n=2",
        "trainer.n_gpus_per_node=2",
    ]
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    result = subprocess.run(
        [sys.executable, "-c", START_THEN_SIGNAL, name, waiting_in, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    signum = getattr(signal, name)
    assert result.returncode == 128 + signum, result.stderr[-3000:]
    assert f"Stopped by {name} outside the training loop" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert not wait_gone([int(result.stdout.split("raylet:")[1].split()[0])], timeout=30)  # the run's Ray ended
    assert waiting_in == "ray.init" or "raylet ignores SIGHUP: True" in result.stdout
    assert "SIGABRT" not in result.stderr and "*** " not in result.stderr  # no C++ stack dump
    signalled = float(result.stdout.split("signalled at:")[1].split()[0])
    assert time.monotonic() - signalled < 60  # the sleep after the signal was cut short


def test_a_signal_while_the_run_stops_exits_at_once():
    """A second Ctrl-C during the shutdown once ended in a segfault (a KeyboardInterrupt inside Ray's teardown)."""
    code = (
        "import os, signal, time\n"
        "from verl.trainer.preemption import RunSignals\n"
        "with RunSignals().installed() as signals:\n"
        "    signals.stopping()\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
    )
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 128 + signal.SIGINT
    assert "Received SIGINT while stopping: exiting at once." in result.stderr
    assert time.monotonic() - start < 20


def test_a_stop_s_timers_go_once_its_run_ended_and_a_second_signal_exits_at_once(monkeypatch):
    """A notebook (its kernel leads its process group) that caught a stop was ended 30 s later by the teardown's
    timer; a second Ctrl-C while the run unwound after the fit loop's stop raised again, saying that nothing was
    saved, where it should exit at once."""
    exits: list[int] = []

    def record_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(preemption.os, "_exit", record_exit)
    run = preemption.RunSignals()
    with pytest.raises(TrainingInterrupted), run.installed():
        preemption._exit_if_teardown_hangs(TrainingInterrupted(signal.SIGINT, 2, "/ckpt/global_step_2"), after_s=0.3)
        raise TrainingInterrupted(signal.SIGINT, 2, "/ckpt/global_step_2")  # the stop, its teardown done
    time.sleep(0.6)
    assert exits == []  # the caller goes on
    with run.installed():
        stop = StopRequest(grace_s=60)
        with stop.installed():
            stop._handle(signal.SIGINT, None)  # the first: the fit loop finishes its step
        with pytest.raises(SystemExit):
            run._handle(signal.SIGINT, None)  # the second, while the run unwinds
    assert exits == [128 + signal.SIGINT]
