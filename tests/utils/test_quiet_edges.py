# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.quiet: VERL_VERBOSE's words, filters added to a logger's own, records whose message is no
string, what the workers are given, and the progress bars and warnings put back as they were."""

import logging
import types
import warnings

import pytest

from verl.utils import quiet
from verl.utils.quiet import KnownMessage, KnownMessageFilter


@pytest.fixture
def not_verbose(monkeypatch):
    monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    return monkeypatch


@pytest.mark.parametrize(("value", "expected"), [("no", False), (" NO ", False), ("false", False), ("1", True)])
def test_verbose_takes_its_words(monkeypatch, value, expected):
    monkeypatch.setenv(quiet.VERBOSE_ENV, value)
    assert quiet.verbose() is expected


def test_a_record_whose_message_is_no_string_passes():
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, ValueError("Triton"), None, None)
    assert KnownMessageFilter(["Triton"]).filter(record) is True


def test_silencing_more_messages_of_a_logger_keeps_the_earlier_ones(not_verbose):
    name = "verl.tests.quiet_edges"
    quiet.silence([KnownMessage(name, "first known")])
    quiet.silence([KnownMessage(name, "second known")])
    target = logging.getLogger(name)
    try:
        made = [
            logging.LogRecord(name, logging.WARNING, __file__, 1, text, None, None)
            for text in ("first known", "second known", "other")
        ]
        assert [target.filter(record) for record in made] == [False, False, True]
    finally:
        for installed in list(target.filters):
            target.removeFilter(installed)


def test_verbose_workers_install_nothing(monkeypatch):
    monkeypatch.setenv(quiet.VERBOSE_ENV, "1")
    called = []
    monkeypatch.setattr(quiet, "silence", lambda messages: called.append("silence"))
    monkeypatch.setattr(quiet, "quiet_exit_in_finalizers", lambda: called.append("hook"))
    quiet.install_worker_filters()
    assert called == []


def test_only_a_stop_in_a_finalizer_is_dropped():
    reported = []
    for error in (SystemExit(0), ValueError("a real error")):
        quiet._exit_in_finalizer(types.SimpleNamespace(exc_value=error), reported.append)
    assert [type(unraisable.exc_value) for unraisable in reported] == [ValueError]


def test_the_workers_environment(not_verbose):
    assert quiet.worker_env_vars() == {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    not_verbose.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    assert quiet.worker_env_vars() == {"HF_HUB_DISABLE_PROGRESS_BARS": "0"}
    not_verbose.setenv(quiet.VERBOSE_ENV, "yes")
    assert quiet.worker_env_vars() == {quiet.VERBOSE_ENV: "yes"}


def test_progress_bars_turned_off_before_stay_off(not_verbose):
    import datasets

    not_verbose.setattr(datasets.config, "HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    was = datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()
    try:
        with quiet.datasets_progress_bars_off():
            assert datasets.utils.are_progress_bars_disabled()
        assert datasets.utils.are_progress_bars_disabled()
    finally:
        if not was:
            datasets.utils.enable_progress_bars()


def test_the_single_process_checkpoint_warning_is_dropped_unless_verbose(not_verbose):
    text = "torch.distributed is disabled, unavailable or uninitialized, assuming the intent is to load in a single"
    for verbose, expected in (("", 0), ("1", 1)):
        not_verbose.setenv(quiet.VERBOSE_ENV, verbose)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with quiet.one_process_checkpoint_io():
                warnings.warn(text, UserWarning, stacklevel=1)
        assert len(caught) == expected, verbose
