# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Only the known-harmless third-party messages are silenced, each still exists in the installed library, and
VERL_VERBOSE=1 brings everything back."""

import ast
import importlib.util
import json
import logging
import os
import pathlib
import warnings

import datasets
import pytest
import torch

from verl.utils import quiet


KNOWN = quiet.DRIVER_MESSAGES + quiet.WORKER_MESSAGES


@pytest.fixture(autouse=True)
def _clean_loggers(monkeypatch):
    """Each test starts and ends without filters on the third-party loggers, and without VERL_VERBOSE."""
    monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)
    names = {message.logger for message in KNOWN}
    saved = {name: list(logging.getLogger(name).filters) for name in names}

    def strip() -> None:
        for name in names:
            target = logging.getLogger(name)
            for flt in [f for f in target.filters if isinstance(f, quiet.KnownMessageFilter)]:
                target.removeFilter(flt)

    strip()
    yield
    strip()
    for name, filters in saved.items():
        for flt in filters:
            logging.getLogger(name).addFilter(flt)


def _passes(logger_name: str, msg: str) -> bool:
    record = logging.LogRecord(logger_name, logging.WARNING, "x.py", 1, msg, (), None)
    return bool(logging.getLogger(logger_name).filter(record))


@pytest.mark.parametrize("message", KNOWN, ids=lambda m: f"{m.logger}:{m.prefix[:30]}")
def test_the_known_message_is_dropped_and_another_of_its_logger_passes(message):
    full = message.prefix + " and the rest of the third-party text"
    assert _passes(message.logger, full)  # nothing installed yet
    quiet.install_driver_filters()
    quiet.install_worker_filters()
    quiet.install_worker_filters()  # idempotent
    assert not _passes(message.logger, full)
    assert _passes(message.logger, "Engine core failed: out of memory")  # a real problem of the same logger
    assert _passes("some.other.logger", full)  # the same text elsewhere is not ours to hide


def test_the_token_warning_goes_but_the_disabled_warning_stays():
    quiet.install_driver_filters()
    name = "ray._private.authentication.authentication_token_setup"
    assert not _passes(name, "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled ...")
    assert _passes(name, "Token authentication is disabled for this Ray cluster. Anyone with network access ...")


def _module_strings(module: str) -> list[str]:
    """Every string literal of an installed module's source (implicit concatenations joined; the leading text of
    an f-string), read without importing it."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        pytest.skip(f"{top} is not installed")
    path = os.path.join(spec.submodule_search_locations[0], *rest) + ".py"
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    strings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            strings.append(node.values[0].value)
    return strings


@pytest.mark.parametrize("message", KNOWN, ids=lambda m: f"{m.logger}:{m.prefix[:30]}")
def test_the_known_message_still_exists_in_the_installed_library(message):
    """After a Ray or vLLM upgrade, a filter whose message is gone or reworded fails here, naming it."""
    assert any(text.startswith(message.prefix) for text in _module_strings(message.logger)), (
        f"{message.logger} no longer logs a message starting with {message.prefix!r}: update verl/utils/quiet.py."
    )


def test_the_reduce_op_warning_is_ignored_only_when_vllm_triggers_it():
    text = "`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install_worker_filters()
        warnings.warn_explicit(text, FutureWarning, "dispatcher.py", 138, module="vllm.triton_utils.dispatcher")
        assert caught == []
        warnings.warn_explicit(text, FutureWarning, "train.py", 1, module="my_project.train")
        assert len(caught) == 1


def test_vllms_all_gather_deprecation_is_ignored_in_a_worker():
    """vLLM's tensor-parallel all-gather calls torch's deprecated all_gather_into_tensor: ignored in workers (it
    fails here once vLLM or torch no longer do that, so the filter can go), other deprecations of torch still show."""
    source = "vllm.distributed.device_communicators.base_device_communicator"
    assert "all_gather_into_tensor" in pathlib.Path(importlib.util.find_spec(source).origin).read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install_worker_filters()
        with pytest.raises((RuntimeError, ValueError)):  # no process group: torch warns before it finds out
            torch.distributed.all_gather_into_tensor(torch.zeros(2), torch.zeros(1))
        assert [w for w in caught if "all_gather_into_tensor" in str(w.message)] == []
        warnings.warn_explicit(
            "`torch.distributed.reduce_scatter_tensor` is deprecated.",
            FutureWarning,
            "c10d_logger.py",
            83,
            module="torch.distributed.c10d_logger",
        )
        assert len(caught) == 1


def test_verbose_turns_every_filter_off(monkeypatch):
    monkeypatch.setenv(quiet.VERBOSE_ENV, "1")
    quiet.install_driver_filters()
    quiet.install_worker_filters()
    assert all(_passes(message.logger, message.prefix) for message in KNOWN)
    assert quiet.worker_env_vars() == {quiet.VERBOSE_ENV: "1"}  # the workers hear it too
    monkeypatch.setenv(quiet.VERBOSE_ENV, "0")
    assert not quiet.verbose()
    assert quiet.worker_env_vars() == {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def test_the_progress_bar_of_a_local_file_is_off_unless_verbose(tmp_path, monkeypatch, capsys):
    from verl.data.sources import load_source

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"prompt": name}) + "\n")
    load_source(str(tmp_path / "a.jsonl"))
    assert "Generating train split" not in capsys.readouterr().err
    assert not datasets.utils.are_progress_bars_disabled()  # switched off for the load only
    monkeypatch.setenv(quiet.VERBOSE_ENV, "1")
    load_source(str(tmp_path / "b.jsonl"))
    assert "Generating train split" in capsys.readouterr().err


def test_a_stop_inside_a_finalizer_prints_no_traceback_in_a_worker():
    """Ray's SIGTERM handler raises SystemExit; landing in vLLM's LLMEngine.__del__ while a stopped worker tears its
    engine down, Python printed it as "Exception ignored in ... Traceback" after a run that ended well (seen once in
    tests/trainer/test_preemption.py). Other exceptions in finalizers are still reported."""
    import subprocess
    import sys
    import textwrap

    probe = textwrap.dedent("""
        import os, signal
        from verl.utils import quiet
        quiet.install_worker_filters()
        quiet.install_worker_filters()  # once per process, however often called

        def stop(signum, frame):
            raise SystemExit(1)  # what Ray's sigterm_handler does

        signal.signal(signal.SIGTERM, stop)

        class Engine:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)

        class Broken:
            def __del__(self):
                raise ValueError("a finalizer's own error")

        engine, broken = Engine(), Broken()
        del engine, broken
        print("done")
    """)
    env = {key: value for key, value in os.environ.items() if key != "VERL_VERBOSE"}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert result.stdout.strip() == "done", result.stderr
    assert "SystemExit" not in result.stderr and "Engine.__del__" not in result.stderr, result.stderr
    assert "ValueError: a finalizer's own error" in result.stderr and "Broken.__del__" in result.stderr
