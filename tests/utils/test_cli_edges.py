# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.cli: -h, --help-config with words, --dry-run, the errors' kinds and exit codes, the logging
level of a run, comma-separated counts, and Ray's loopback setting."""

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from verl.utils import cli
from verl.utils.cli import RAY_LOOPBACK_ENV, load_config_or_exit, positive_ints
from verl.utils.config import ConfigError


@dataclass
class Lora:
    rank: int = 0
    """LoRA rank."""


@dataclass
class Rollout:
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling."""
    lora: Lora = field(default_factory=Lora)


@dataclass
class Schema:
    UNSUPPORTED_KEYS: ClassVar[tuple[str, ...]] = ("rollout.lora.",)
    rollout: Rollout = field(default_factory=Rollout)


def run(argv: list[str], load=None):
    seen = []

    def default_load(args):
        seen.append(args)
        return Schema(rollout=Rollout(temperature=0.5))

    return load_config_or_exit(argv, "usage: prog", "The doc.", Schema, load or default_load), seen


def test_short_help_prints_the_usage_and_the_doc(capsys):
    assert run(["-h"])[0] == 0
    assert capsys.readouterr().out == "usage: prog\nThe doc.\n"


def test_help_config_lists_the_keys_holding_every_word_and_none_refused(capsys):
    assert run(["--help-config"])[0] == 0
    out = capsys.readouterr().out
    assert "rollout.temperature (float): Sampling temperature." in out and "lora" not in out
    assert run(["--help-config", "rollout", "TEMP", "config=x.yaml"])[0] == 0  # a config=... is no word
    assert capsys.readouterr().out == "rollout.temperature (float): Sampling temperature.\n"
    assert run(["--help-config", "no_such_key"])[0] == 2
    assert "no config key contains 'no_such_key'" in capsys.readouterr().err


def test_dry_run_prints_the_config_loaded_without_the_flag(capsys):
    code, seen = run(["config=x.yaml", "--dry-run", "a=1"])
    assert code == 0 and seen == [["config=x.yaml", "a=1"]]
    assert capsys.readouterr().out.startswith("rollout:\n  temperature: 0.5\n  top_p: 1.0\n")


def test_an_error_says_its_kind_and_the_hint_only_without_a_config_file(capsys):
    def not_implemented(args):
        raise NotImplementedError("pipeline parallelism")

    def bad(args):
        raise ConfigError("data.train_files is required")

    assert run(["config=x.yaml"], not_implemented)[0] == 2
    assert capsys.readouterr().err == "Not implemented: pipeline parallelism\n"
    assert run(["config=x.yaml"], bad)[0] == 2
    assert capsys.readouterr().err == "Config error: data.train_files is required\n"


def test_a_run_logs_at_info():
    code = (
        "import logging\n"
        "from verl.utils.cli import load_config_or_exit\n"
        "load_config_or_exit([], 'u', 'd', object, lambda args: {})\n"
        "print(logging.getLogger().level == logging.INFO)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


def test_counts_may_end_with_a_comma():
    assert positive_ints("20,100,") == [20, 100]
    with pytest.raises(argparse.ArgumentTypeError, match="needs at least one count"):
        positive_ints(" , ")


def test_ray_listens_on_loopback_only_for_one_machine_and_a_users_setting_wins(monkeypatch):
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(RAY_LOOPBACK_ENV, raising=False)
    cli.keep_local_ray_on_loopback(nodes=2)
    assert RAY_LOOPBACK_ENV not in os.environ
    monkeypatch.setenv(RAY_LOOPBACK_ENV, "1")
    cli.keep_local_ray_on_loopback(nodes=1)
    assert os.environ[RAY_LOOPBACK_ENV] == "1"


def test_writable_dirs_know_whether_the_run_starts_ray_and_an_error_exits_2(monkeypatch, capsys):
    from verl.utils import writable_dirs

    calls = []
    monkeypatch.setattr(writable_dirs, "use_writable_dirs", lambda starts_ray: calls.append(starts_ray))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cli.use_writable_dirs_or_exit() is None
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert cli.use_writable_dirs_or_exit() is None
    assert calls == [False, True]

    def refuse(starts_ray):
        raise writable_dirs.UnwritableDirectoryError("vLLM needs to write to /x")

    monkeypatch.setattr(writable_dirs, "use_writable_dirs", refuse)
    assert cli.use_writable_dirs_or_exit() == 2
    assert capsys.readouterr().err == "Error: vLLM needs to write to /x\n"
