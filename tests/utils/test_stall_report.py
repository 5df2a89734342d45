# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Stall reports (trainer.stall_report_s): a worker call that runs long prints its name and every thread's stack,
again each period, and nothing once it has returned; fast calls, nested calls and an unset time print nothing more."""

import time

import pytest

from verl.single_controller.base import Dispatch, register
from verl.utils import stall_report


HEADER = "[verl stall report]"


def _sleeping_in_a_stuck_call(seconds: float) -> None:
    time.sleep(seconds)


class SlowWorker:  # a worker class; Worker itself would need a group's environment
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def wait(self, seconds: float) -> str:
        with stall_report.watched("inner"):  # a watched call inside a watched call is part of it
            _sleeping_in_a_stuck_call(seconds)
        return "done"


def test_a_long_call_is_reported_with_the_stacks_until_it_returns(monkeypatch, capfd):
    monkeypatch.setenv(stall_report.ENV, "0.3")
    assert SlowWorker().wait(0.05) == "done"  # a fast call: nothing
    assert HEADER not in capfd.readouterr().err
    assert SlowWorker().wait(1.5) == "done"
    time.sleep(0.7)  # after it returned: no more reports
    err = capfd.readouterr().err
    reports = err.count(HEADER)
    assert reports >= 2, err  # at 0.3 s and again every 0.3 s while it ran (fewer only on a starved machine)
    assert reports == err.count("SlowWorker.wait has run for") and "inner has run for" not in err
    assert "Thread MainThread (most recent call last):" in err
    assert "in _sleeping_in_a_stuck_call" in err and "time.sleep(seconds)" in err
    assert "trainer.stall_report_s=0.3" in err


@pytest.mark.parametrize("value", [None, "0"])
def test_no_report_without_a_time(monkeypatch, capfd, value):
    if value is None:
        monkeypatch.delenv(stall_report.ENV, raising=False)
    else:
        monkeypatch.setenv(stall_report.ENV, value)
    assert SlowWorker().wait(0.5) == "done"
    assert HEADER not in capfd.readouterr().err


def test_the_driver_sets_the_time_of_its_workers():
    assert stall_report.env(1800) == {stall_report.ENV: "1800.0"}
