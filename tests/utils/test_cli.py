# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The entry points' prologue: a Ray that a one-machine run starts listens on loopback only."""

import json
import os
import subprocess
import sys
import textwrap

import pytest


LISTENING_PORTS = textwrap.dedent("""
    import json, sys, time
    from verl.utils.cli import keep_local_ray_on_loopback
    if sys.argv[1] == "loopback":
        keep_local_ray_on_loopback(1)
    import psutil, ray
    ray.init(address="local", num_cpus=1, include_dashboard=False)  # as the trainer does: not a `ray start` cluster
    time.sleep(3)  # the metrics servers start after ray.init returns
    addresses = set()
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            addresses |= {c.laddr.ip for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    ray.shutdown()
    print(json.dumps(sorted(addresses)))
""")


def listening_addresses(mode: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LISTENING_PORTS, mode], capture_output=True, text=True, timeout=180, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_local_ray_listens_on_loopback_only(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
    addresses = listening_addresses("loopback")
    assert addresses and set(addresses) <= loopback, addresses
    # Without the setting Ray's services (its metrics endpoints among them) listen on other interfaces: the
    # setting is what keeps them in.
    assert set(listening_addresses("default")) - loopback


@pytest.mark.parametrize("entry", ["verl.trainer.main", "verl.sft.main"])
def test_the_entry_points_import_neither_ray_nor_huggingface_hub_before_main_sets_them_up(entry):
    """keep_local_ray_on_loopback sets Ray's listening address only before Ray is imported, and the offline switch
    (verl.utils.hub.offline_unless_reachable) works only before huggingface_hub is imported: an entry module that
    imports either at its top (verl.sft.main did) turns both into no-ops."""
    probe = f"import sys, {entry}; print(sorted(m for m in ('ray', 'huggingface_hub') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_positive_counts_are_argparse_errors_naming_the_option(capsys):
    """The scripts' and benchmarks' counts (--repeats, --rounds, --concurrent 20,100, ...): 0, a negative or a word
    is argparse's one-line error (a --repeats 0 used to end in min() of an empty list after the warm-up)."""
    import argparse

    from verl.utils.cli import positive, positive_ints

    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--repeats", type=positive(int), default=2)
    parser.add_argument("--lr", type=positive(float), default=1.0)
    parser.add_argument("--concurrent", type=positive_ints, default=[20])
    parser.add_argument("--decay", type=positive(float, zero=True), default=0.0)
    args = parser.parse_args(["--repeats", "3", "--lr", "1e-5", "--concurrent", "20,100", "--decay", "0"])
    assert (args.repeats, args.lr, args.concurrent, args.decay) == (3, 1e-5, [20, 100], 0.0)
    for argv, message in (
        (["--lr", "nan"], "argument --lr: must be positive, got nan"),  # accepted: nan <= 0 is false
        (["--lr", "inf"], "argument --lr: must be positive, got inf"),
        (["--decay", "-1"], "argument --decay: must be zero or positive, got -1"),  # after the model loaded
        (["--repeats", "0"], "argument --repeats: must be positive, got 0"),
        (["--lr", "-1"], "argument --lr: must be positive, got -1"),
        (["--concurrent", "20,x"], "argument --concurrent: must be a positive int, got 'x'"),
        (["--concurrent", ","], "argument --concurrent: needs at least one count"),
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert message in capsys.readouterr().err


def test_a_client_or_job_api_address_is_refused_and_local_starts_a_ray_of_its_own(monkeypatch):
    """RAY_ADDRESS=ray://... (Ray Client) ran the driver's file work (checkpoints, data, the run lock) on the client
    while the workers wrote on the cluster; "local" took the joined-cluster branch, without the local start's setup."""
    from verl.utils.cli import cluster_address

    for address, joined in (("local", None), ("", None), ("10.0.0.1:6379", "10.0.0.1:6379"), ("auto", "auto")):
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert cluster_address() == joined
    start = "from verl.trainer.ray_setup import start_ray; start_ray('cpu', 1, 5.0)"
    for address in ("ray://10.0.0.1:10001", "http://10.0.0.1:8265"):
        env = {**os.environ, "RAY_ADDRESS": address}
        result = subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, timeout=180, env=env)
        assert result.returncode == 1 and "ray.init" not in result.stderr
        assert f"SetupError: RAY_ADDRESS={address} is a Ray Client or job-submission address" in result.stderr


def test_a_cluster_address_that_does_not_answer_is_named_at_once():
    """Ray retried an address nobody listens on for minutes, printing its own warnings, and outlived a first
    SIGTERM; the run now says so before ray.init."""
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = "from verl.trainer.ray_setup import start_ray; start_ray('cpu', 1, 5.0)"
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    result = subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 1
    assert f"SetupError: RAY_ADDRESS=127.0.0.1:{port} does not answer (Connection refused)" in result.stderr


def test_a_config_error_without_a_config_file_says_so_with_the_usage(capsys):
    """`python -m verl.trainer.main` alone failed on the built-in defaults (grpo needs rollout.n > 1) with no word
    that no config=FILE was given."""
    from verl.trainer.config import PPOConfig
    from verl.utils.cli import load_config_or_exit
    from verl.utils.config import ConfigError

    def refuse(argv):
        raise ConfigError("worker.rollout.n must be > 1")

    assert load_config_or_exit([], "usage: train config=FILE", None, PPOConfig, refuse) == 2
    err = capsys.readouterr().err
    assert "Config error: worker.rollout.n must be > 1" in err and "No config=FILE was given" in err
    assert err.rstrip().endswith("usage: train config=FILE")
    assert load_config_or_exit(["config=x.yaml"], "usage: train config=FILE", None, PPOConfig, refuse) == 2
    assert "No config=FILE" not in capsys.readouterr().err
