# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Stopping a run on SIGTERM / SIGINT / SIGHUP (Slurm preemption, Ctrl-C, a closed terminal) without losing the work
since the last checkpoint.

In the fit loop (`StopRequest`) the first signal sets a flag; between steps the loop saves a checkpoint if within
`trainer.signal_grace_s` and raises `TrainingInterrupted` (the CLI exits 128 + signal). A second signal stops at once.
Around the whole run (`RunSignals`) the first signal raises `TrainingInterrupted` at once so workers are shut down; a
signal while stopping exits at once, leaving leftovers to verl/trainer/reaper.py rather than unwinding Ray's
teardown inside a signal handler."""

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import NoReturn


logger = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextmanager
def _handling(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Route HANDLED_SIGNALS to `handler` while the block runs (main thread only; elsewhere it is a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for signum, earlier in previous.items():
            signal.signal(signum, earlier)


class TrainingInterrupted(BaseException):
    """The run stopped on a signal (or for `cause`, as on that signal) after step `step` (None: outside the fit loop),
    saving `checkpoint` (or None). A BaseException, like KeyboardInterrupt, so no `except Exception` anywhere may
    swallow it."""

    def __init__(
        self,
        signum: int,
        step: int | None,
        checkpoint: str | None,
        cause: str | None = None,
        unsaved: str = "grace period over",
    ) -> None:
        name = f"by {signal.Signals(signum).name}" if cause is None else f"because {cause}"
        if step is None:  # outside the fit loop: while starting, before any step
            message = f"Stopped {name} outside the training loop; the checkpoints on disk are as they were."
        else:
            saved = f"checkpoint saved to {checkpoint}" if checkpoint else f"no checkpoint saved ({unsaved})"
            message = f"Stopped {name} after step {step}; {saved}."
        super().__init__(f"{message} Run the same command again to resume.")
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.text = str(self)
        """What an exit at once prints (`StopRequest.stop` gives it the resume advice of the run's settings)."""
        self.stopped = message
        """The message without its advice, for a run whose command does not resume (`resume_hint` says what does)."""

    def report(self, save_root: str, find_last: bool, explicit: str | None) -> int:
        """Print the message for the command line (`advised`) and return the exit status, 128 + the signal's
        number."""
        print(self.advised(save_root, find_last, explicit), file=sys.stderr)
        return 128 + self.signum

    def advised(self, save_root: str, find_last: bool, explicit: str | None) -> str:
        """The message, with `resume_hint`'s advice where running the same command again does not simply resume
        (trainer.load_checkpoint_path set, or find_last_checkpoint off)."""
        from verl.trainer.checkpointing import resume_hint

        if (find_last, explicit) == (True, None):
            return str(self)
        return f"{self.stopped}\n{resume_hint(save_root, find_last, explicit)}"


class _StoppedOutsideTheFitLoop(TrainingInterrupted, KeyboardInterrupt):
    """What `RunSignals` raises: a KeyboardInterrupt too, so that the signal raised inside a blocking Ray call
    (ray.get / ray.wait while the workers or engines start) ends that call as Ctrl-C does. Ray lets no other
    exception through its signal check: the call failed with "SystemError: <cyfunction CoreWorker.wait ...> returned
    a result with an exception set", a traceback after the stop's message. Ray raises a KeyboardInterrupt of its own
    there, which `RunSignals.installed` turns back into this stop."""


@dataclass
class RunState:
    """What this process knows of its run's stop, for the paths that are not the signal handler (Ray's daemons
    watched from a thread, the teardown's timers). `forget_stops` starts a new one when a local Ray starts, a run
    starts, and a run's teardown ends: a timer armed for the one before does nothing then (a notebook that caught a
    stop goes on; a next run is not ended by the last's)."""

    signalled: int | None = None
    """The first signal the run received since the run or its local Ray started: kept after the fit loop ends, for
    an error the signal caused (Ray's daemons ended with it) unwinds past the loop, and Ray's teardown then hangs as
    a step would."""
    in_a_step: bool = False
    """Whether that signal came during the fit loop's steps (`StopRequest`), not while starting or finishing."""
    fit_loops: list["StopRequest"] = field(default_factory=list)
    """The StopRequest of the fit loop running now, for a stop that does not come as a signal
    (`stop_the_fit_loop`)."""
    stops: list[TrainingInterrupted] = field(default_factory=list)
    """The stops the fit loops made (their checkpoint saved or not), latest last."""

    def signal(self, signum: int, in_a_step: bool) -> None:
        """Record a received signal (the first one counts)."""
        if self.signalled is None:
            self.signalled, self.in_a_step = signum, in_a_step


_run = RunState()


class StopRequest:
    """Records the first signal (number and time); a context manager around the fit loop."""

    def __init__(self, grace_s: float, resume: tuple[bool, str | None] = (True, None)) -> None:
        self.grace_s = grace_s
        self.resume = resume
        """(trainer.find_last_checkpoint, trainer.load_checkpoint_path): what running the same command resumes from."""
        self.signum: int | None = None
        self.received_at: float | None = None
        self.cause: str | None = None
        """Why the run stops where it is not a signal (`stop_the_fit_loop`)."""
        self.stopped = False
        """`stop` has run (the loop is past its last step)."""
        self.exit_at_once = False
        """Exit the process once stopped instead of unwinding: Ray's control store is gone, so its teardown would
        hang (set for a cause, and when the store goes while a signal's stop is under way)."""

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def within_grace(self) -> bool:
        return self.received_at is not None and time.monotonic() - self.received_at <= self.grace_s

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # the second signal: stop now
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        self.signum, self.received_at = signum, time.monotonic()
        _run.signal(signum, in_a_step=True)
        saving = (
            f"saving a checkpoint (if within {self.grace_s:.0f} s)"
            if self.grace_s > 0
            else "saving no checkpoint (trainer.signal_grace_s=0)"
        )
        logger.warning(
            "Received %s: finishing the current step, then %s and stopping. Send it again to stop at once.",
            signal.Signals(signum).name,
            saving,
        )

    @contextmanager
    def installed(self) -> Iterator["StopRequest"]:
        _run.fit_loops.append(self)
        try:
            with _handling(self._handle):
                yield self
        finally:
            _run.fit_loops.remove(self)

    def stop(self, step: int, unsaved: bool, save: Callable[[], None], save_root: str) -> NoReturn:
        """Between steps, once `requested`: `save()` the steps since the last checkpoint (`unsaved`) if still within
        the grace period, then raise TrainingInterrupted naming the latest checkpoint (RL and SFT loops)."""
        from verl.trainer.checkpointing import step_dir

        if unsaved and self.within_grace():
            save()
            unsaved = False
        latest = None if unsaved or step == 0 else step_dir(save_root, step)
        why = "trainer.signal_grace_s=0" if self.grace_s <= 0 else "grace period over"
        why = "no step had run" if step == 0 else why
        interrupted = TrainingInterrupted(self.signum, step, latest, self.cause, why)
        interrupted.text = interrupted.advised(save_root, *self.resume)
        _run.stops.append(interrupted)
        self.stopped = True
        if self.exit_at_once:  # Ray's teardown needs what is lost: exit now, the reaper ends the workers
            print(interrupted.text, file=sys.stderr, flush=True)
            os._exit(128 + self.signum)
        if os.getpgrp() == os.getpid():  # a signal to this group reached a local Ray's daemons too
            _exit_if_teardown_hangs(interrupted)
        raise interrupted


TEARDOWN_S = 30.0
"""How long the run's teardown (loggers, workers, Ray) may take after a stop before the process exits anyway."""


def _exit_if_teardown_hangs(interrupted: TrainingInterrupted, after_s: float = TEARDOWN_S) -> None:
    """Exit with the stop's status if the process is still here `after_s` seconds from now. Armed where the driver
    leads its process group (`setsid`, a shell's job), which a local Ray's daemons share: a signal to the group
    reaches them too, and stopping the workers then waits on a control store that no longer answers, for minutes.
    The checkpoint is saved by then; the reaper ends the workers. (Elsewhere Ray's daemons have a group of their
    own, and the teardown, a logger's upload included, takes the time it needs.)"""

    run = _run

    def exit_now() -> None:
        if _run is not run:  # the teardown ended (a notebook, a sweep goes on)
            return
        print(
            f"{interrupted.text} (The teardown took over {after_s:.0f} s: exiting at once.)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + interrupted.signum)

    timer = threading.Timer(after_s, exit_now)
    timer.daemon = True
    timer.start()


def stop_the_fit_loop(cause: str) -> bool:
    """Ask the fit loop that runs now to stop after its step and save, as on a first SIGTERM, because of `cause`
    (an event that is not a signal: Ray's control store lost), then to exit the process at once (Ray's teardown would
    hang); False where none runs. A loop already stopping on a signal keeps that signal and stops as it would, but
    then exits at once too (a SIGTERM to the driver's whole process group ends Ray's daemons with it; where the step
    cannot finish, the raylet's end arms `daemons_ended_with_the_signal`)."""
    if not _run.fit_loops:
        return False
    request = _run.fit_loops[-1]
    request.exit_at_once = True
    if not request.requested:
        request.cause, request.received_at, request.signum = cause, time.monotonic(), signal.SIGTERM
    return True


def forget_stops() -> None:
    """A run, or a local Ray, starts (a sweep's next, a test's in one process), or a run's teardown ended: the signals
    and stops before are not its, and the timers armed for them do nothing."""
    global _run
    _run = RunState(fit_loops=_run.fit_loops)


def signal_received() -> int | None:
    """The signal the run received (not a `stop_the_fit_loop`): it may have reached a local Ray's daemons too (a
    signal to the driver's process group, or a scheduler's to every process of the job)."""
    return _run.signalled


def signal_reached_the_group() -> int | None:
    """The signal the run received (not a `stop_the_fit_loop`), where this process leads its process
    group (a shell's job, `setsid`), which a local Ray's daemons share: the signal may have reached them too."""
    return _run.signalled if os.getpgrp() == os.getpid() else None


def daemons_ended_with_the_signal() -> bool:
    """Ray's daemons (control store, raylet) ended: where a signal reached the process group the driver leads
    (`signal_reached_the_group`), it reached them too, and a step in flight that needs them never finishes, nor does
    the teardown of a run that its failure ends (Ray itself ends the process minutes later, exit status 1, with no word
    of the run). Exit with the signal's status, saying nothing was saved, if the fit loop has not stopped TEARDOWN_S
    from now (a loop that stops exits at once). True once armed."""
    signum = signal_reached_the_group()
    if signum is None:
        return False
    if _run.fit_loops:
        _run.fit_loops[-1].exit_at_once = True
    run, where = _run, "during a step" if _run.in_a_step else "outside the training loop, in work"

    def exit_now() -> None:
        if _run is not run or run.stops:  # the loop stopped: it exited, or its teardown's timer ends it
            return
        name = signal.Signals(signum).name
        print(
            f"Stopped by {name} {where} that could not finish: Ray's daemons ended with the signal (this driver "
            "leads its process group, which they share; start it from a launcher, or send the signal to the driver "
            "alone, and it saves the step). The checkpoints on disk are as they were. Run the same command again to "
            "resume.",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + signum)

    timer = threading.Timer(TEARDOWN_S, exit_now)
    timer.daemon = True
    timer.start()
    return True


def exit_if_stopped(why: str) -> None:
    """Where the fit loop has already stopped (its checkpoint saved) and Ray's control store is then lost (`why`),
    exit now with the stop's status, instead of waiting for a Ray teardown that cannot end."""
    if _run.stops:
        stop = _run.stops[-1]
        print(f"{stop.text} ({why}: exiting at once.)", file=sys.stderr, flush=True)
        os._exit(128 + stop.signum)


class RunSignals:
    """The signals around a whole run; `StopRequest` takes them over in the fit loop. Call `stopping()` once the
    run is shutting down."""

    def __init__(self) -> None:
        self.is_stopping = False
        self.interrupted: TrainingInterrupted | None = None
        """The stop the handler raised (Ray's blocking calls replace it with a KeyboardInterrupt of their own)."""

    def stopping(self) -> None:
        self.is_stopping = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.is_stopping or _run.signalled is not None:  # (the fit loop's stop took the first: the second)
            print(f"Received {name} while stopping: exiting at once.", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.is_stopping = True
        _run.signal(signum, in_a_step=False)  # (outside the fit loop: starting, validating first, finishing)
        self.interrupted = _StoppedOutsideTheFitLoop(signum, None, None)
        raise self.interrupted

    @contextmanager
    def installed(self) -> Iterator["RunSignals"]:
        forget_stops()  # a run of its own: no signal or stop of an earlier one in this process counts
        with _handling(self._handle):
            try:
                yield self
            except TrainingInterrupted:
                forget_stops()  # stopped, its teardown done: the timers armed for it go
                raise
            except KeyboardInterrupt:
                if self.interrupted is None:
                    raise
                forget_stops()
                raise self.interrupted from None  # the stop a blocking Ray call replaced with its own
        forget_stops()


def run_status(error: BaseException | None) -> str:
    """How a run that ended with `error` (None: on its own) ended, for the trackers' dashboards (`Tracker.finish`):
    finished, killed (a signal, Ctrl-C) or failed."""
    if error is None:
        return "finished"
    return "killed" if isinstance(error, (TrainingInterrupted, KeyboardInterrupt)) else "failed"
