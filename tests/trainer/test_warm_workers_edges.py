# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The warm server's bookkeeping (verl/trainer/warm_workers.py), without Ray: a new Ray session closes the last
session's server, and a server that died at its start leaves the workers to start plainly. A mutation audit changed
each line these pin and no other test failed."""

import pytest

from verl.trainer import warm_workers


@pytest.fixture
def servers(monkeypatch):
    """The servers with_warm_workers starts (stand-ins answering at `address`, None: died at once)."""
    started: list = []

    class Server:
        address: str | None = "/tmp/warm.sock"

        def __init__(self) -> None:
            self.closed = False
            started.append(self)

        def server(self, *args) -> str | None:
            return Server.address

        def close(self) -> None:
            self.closed = True

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("VERL_WARM_PYTHON", raising=False)
    monkeypatch.setattr(warm_workers, "_session", {"warm": None})
    monkeypatch.setattr(warm_workers, "WarmPython", Server)
    return started


def test_a_new_ray_session_closes_the_last_sessions_server(servers):
    first = warm_workers.with_warm_workers({"env_vars": {"A": "1"}}, "cpu")
    assert first["env_vars"] == {"A": "1"} and first["py_executable"].endswith(" /tmp/warm.sock")
    warm_workers.with_warm_workers({}, "cpu")
    assert [server.closed for server in servers] == [True, False]  # the first session's server is not left running


def test_a_server_that_died_at_its_start_leaves_the_workers_plain(servers):
    warm_workers.WarmPython.address = None  # (the stand-in's class, made for this test)
    runtime_env = {"env_vars": {"A": "1"}}
    assert warm_workers.with_warm_workers(runtime_env, "cpu") == runtime_env
    assert len(servers) == 1
