# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where a stuck worker waits: when a call into a worker (`@register` method) has run for trainer.stall_report_s
seconds, the worker prints a line naming it and every thread's Python stack to its stderr (Ray shows both on the
driver's console, prefixed with the worker), and again each time as long again passes. The call goes on: a report
only says where a run that seems stuck waits (a collective, the engine, a lock, a hung reward), as `py-spy dump`
would, without a tool on the node.
"""

import os
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from verl.utils.module_loading import user_frames


ENV = "VERL_STALL_REPORT_S"
"""Seconds after which a worker call is reported (unset or 0: never); the driver sets it for its worker groups."""


@dataclass
class _Call:
    name: str
    started: float
    every_s: float
    due: float  # its next report


_calls: dict[object, _Call] = {}
_changed = threading.Condition()
_inside = threading.local()  # a call that a watched call makes in its thread is part of it
_thread: threading.Thread | None = None


def env(seconds: float) -> dict[str, str]:
    """The environment variables that set the report time of a group's workers."""
    return {ENV: repr(float(seconds))}


@contextmanager
def watched(name: str) -> Iterator[None]:
    """Report the stacks of this process while the block runs longer than VERL_STALL_REPORT_S (every as long)."""
    after_s = float(os.environ.get(ENV) or 0)
    if after_s <= 0 or getattr(_inside, "call", False):
        yield
        return
    global _thread
    key, started = object(), time.monotonic()
    with _changed:
        if _thread is None:
            _thread = threading.Thread(target=_report_loop, name="verl-stall-report", daemon=True)
            _thread.start()
        _calls[key] = _Call(name, started, after_s, started + after_s)
        _changed.notify()
    _inside.call = True
    try:
        yield
    finally:
        _inside.call = False
        with _changed:
            del _calls[key]


def _report_loop() -> None:
    with _changed:
        while True:
            now = time.monotonic()
            due = [call for call in _calls.values() if call.due <= now]
            for call in due:
                call.due = now + call.every_s
                print(
                    f"[verl stall report] {call.name} has run for {now - call.started:.1f} s in process {os.getpid()} "
                    f"(it goes on; trainer.stall_report_s={call.every_s:g} sets this report). Where each thread is:",
                    file=sys.stderr,
                )
            if due:
                print(format_stacks(), file=sys.stderr, end="", flush=True)
            _changed.wait(min((call.due for call in _calls.values()), default=now + 3600) - now)


def format_stacks(idents: Iterable[int] | None = None, user_code_only: bool = False) -> str:
    """The Python stacks of this process's threads `idents` (default: all but the caller's), the main thread first,
    each headed by its name, as a traceback prints them; a thread that has ended meanwhile is left out. With
    `user_code_only`, each stack from its first frame of the user's code (`module_loading.user_frames`)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main, wanted = threading.main_thread().ident, None if idents is None else set(idents)
    text = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda item: item[0] != main):  # main first
        if (ident != threading.get_ident()) if wanted is None else (ident in wanted):
            text.append(f"Thread {names.get(ident, ident)} (most recent call last):\n")
            stack = traceback.extract_stack(frame)
            text.extend(traceback.format_list(user_frames(stack) if user_code_only else stack))
    return "".join(text)
