# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Run a sequential reward function over several CPUs with a pool of worker processes (threads would share the GIL).

Workers are spawned (forking a multithreaded process can deadlock) and load the function from its file, so only
samples and scores cross processes; a script calling `run_ppo` needs an `if __name__ == "__main__":` guard. Closing
kills a worker stuck in the function after a short grace.
"""

import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from verl.rewards.function import RewardFunction, RewardFunctionError, load_reward_function, score_sequential
from verl.utils.child_signals import reset_child_signals, signals_held


_worker_function: RewardFunction | None = None
_stack_file: Any = None  # where a worker writes its Python stack on STACK_SIGNAL

STACK_SIGNAL = signal.SIGUSR1
"""Makes a worker write where it is (faulthandler) to its file in the pool's stacks folder (`SequentialPool.where`)."""

CLOSE_GRACE_S = 5.0
"""How long `SequentialPool.close` lets its workers finish what they are doing before it kills them."""


def exit_with_parent() -> None:
    """A worker process's thread: exit when the parent process dies, so a killed parent (a reward actor's ray.kill, a
    SIGKILL) leaves no orphaned workers behind."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)


def _init_worker(spec: str, kwargs: dict[str, Any], pids: Any, stacks_dir: str) -> None:
    global _worker_function, _stack_file
    try:
        _stack_file = open(os.path.join(stacks_dir, str(os.getpid())), "a")  # appends: `where` empties it first
    except FileNotFoundError:  # started as the pool closed (workers start on demand) and its folder went
        os._exit(0)
    pids.put(os.getpid())  # so that the pool can kill a worker stuck in the function, or ask where it is
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=False)
    # a signal to the driver's process group (Ctrl-C, `timeout`, a closed terminal) is the trainer's to handle
    # (checkpoint, then close the pool): the worker leaves the group and ignores the terminal's signals
    reset_child_signals()
    threading.Thread(target=exit_with_parent, name="exit-with-parent", daemon=True).start()
    _worker_function = load_reward_function(spec, kwargs)


def _score_chunk(start: int, samples: list[Mapping[str, Any]]) -> list[Any]:
    """Score samples[start:start+len] in a worker. An error carries the user's exception as `original` (when it
    pickles), since __cause__ does not cross processes; SequentialPool.score chains it again."""
    assert _worker_function is not None, "the pool initializer did not run"
    try:
        return score_sequential(_worker_function, samples, start=start)
    except RewardFunctionError as error:
        original = error.__cause__
        try:
            pickle.loads(pickle.dumps(original))
        except Exception:  # an exception class that cannot be rebuilt; its text is still in the message
            original = None
        error.original = original
        raise


def _split(num_items: int, num_chunks: int) -> list[tuple[int, int]]:
    """Contiguous (start, end) ranges of nearly equal size."""
    bounds = [num_items * i // num_chunks for i in range(num_chunks + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(num_chunks) if bounds[i] < bounds[i + 1]]


class SequentialPool:
    """A persistent process pool that scores samples with a sequential reward function, in input order."""

    def __init__(self, function: RewardFunction, num_workers: int) -> None:
        if num_workers < 2:
            raise ValueError(f"SequentialPool needs at least 2 workers, got {num_workers}; score inline instead.")
        self.function = function
        self.num_workers = num_workers
        self._executor: ProcessPoolExecutor | None = None
        self._pids: Any = None  # the workers report their pids here as they start
        self._known_pids: set[int] = set()
        self._stacks_dir: str | None = None
        self._lock = threading.RLock()
        """Held to start, use or close the executor: streamed rewards score groups from several threads at once, and
        two starting it together each made one, dropping the first one's queue while its workers unpickled it."""

    def _get_executor(self) -> ProcessPoolExecutor:
        if self._executor is None:  # started on first use, so an actor that never scores spawns nothing
            context = multiprocessing.get_context("spawn")
            self._pids, self._known_pids = context.SimpleQueue(), set()
            self._stacks_dir = tempfile.mkdtemp(prefix="verl_reward_pool_")
            self._executor = ProcessPoolExecutor(
                max_workers=self.num_workers,
                mp_context=context,
                initializer=_init_worker,
                initargs=(self.function.spec, self.function.kwargs, self._pids, self._stacks_dir),
            )
        return self._executor

    def _worker_pids(self) -> set[int]:
        with self._lock:
            while not self._pids.empty():
                self._known_pids.add(self._pids.get())
            return self._known_pids

    def where(self, wait_s: float = 2.0) -> str:
        """Where each worker process is now: its Python stack, as faulthandler writes it (most recent call first),
        within `wait_s`; "" before the pool started."""
        if self._executor is None:
            return ""
        asked = []
        for pid in sorted(self._worker_pids()):
            path = os.path.join(self._stacks_dir, str(pid))
            try:
                open(path, "w").close()  # the worker appends after what it wrote last time
                os.kill(pid, STACK_SIGNAL)
                asked.append((pid, path))
            except OSError:  # a worker that has exited
                continue
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not all(os.path.getsize(path) for _, path in asked):
            time.sleep(0.05)
        time.sleep(0.05)  # let a dump under way finish
        return "".join(f"Reward pool process {pid}: " + open(path).read() for pid, path in asked)

    def score(self, samples: Sequence[Mapping[str, Any]]) -> list[Any]:
        """The function's raw outputs for `samples`, in order; errors name the sample as inline scoring does."""
        if not samples:
            return []
        # A few chunks per worker balance uneven per-sample cost without paying one round trip per sample.
        chunks = _split(len(samples), self.num_workers * 4)
        executor, futures = self._submit(chunks, samples)
        scores: list[Any] = []
        try:
            for future in futures:
                scores.extend(future.result())
        except RewardFunctionError as error:
            for future in futures:
                future.cancel()
            original = getattr(error, "original", None)
            if original is None:
                raise
            original.__cause__ = error.__cause__  # the worker's formatted traceback, attached by concurrent.futures
            raise RewardFunctionError(str(error), sample_index=error.sample_index) from original
        except BrokenProcessPool as error:
            self.close(broken=executor)
            raise RewardFunctionError(
                f"A worker process of the reward pool for {self.function.label} died while scoring {len(samples)} "
                "samples (a crash, os._exit or the out-of-memory killer inside the function); the pool is restarted "
                "on the next call."
            ) from error
        return scores

    def _submit(
        self, chunks: list[tuple[int, int]], samples: Sequence[Mapping[str, Any]]
    ) -> tuple[ProcessPoolExecutor, list[Future]]:
        """(the executor, the chunks' futures). A pool whose worker died while idle (it held no sample) is replaced
        by a fresh one, which scores them."""

        # workers start on submit: until they leave the driver's group, they hold its signals
        def submit() -> tuple[ProcessPoolExecutor, list[Future]]:
            executor = self._get_executor()
            return executor, [executor.submit(_score_chunk, start, list(samples[start:end])) for start, end in chunks]

        with self._lock, signals_held():
            try:
                return submit()
            except BrokenProcessPool:
                self._close(CLOSE_GRACE_S)
                return submit()

    def close(self, grace_s: float = CLOSE_GRACE_S, broken: ProcessPoolExecutor | None = None) -> None:
        """Stop the worker processes (they are restarted if the pool is used again). Queued chunks are cancelled; a
        worker still inside the function after `grace_s` seconds is killed, so a hung function cannot hang this.
        `broken`: only if the pool still runs that executor (another thread scoring at the same time may have
        replaced it already)."""
        with self._lock:
            if broken is None or broken is self._executor:
                self._close(grace_s)

    def _close(self, grace_s: float) -> None:
        if self._executor is None:
            return
        executor, self._executor = self._executor, None
        # this first shutdown drops the executor's handle on its manager thread, which holds the queues: joined below,
        # so that their semaphores are released here, while multiprocessing's resource tracker lives (a reward actor's
        # ray.kill kills it first; a queue released after it printed an ignored BrokenPipeError)
        manager = getattr(executor, "_executor_manager_thread", None)
        executor.shutdown(wait=False, cancel_futures=True)
        pids = self._worker_pids()
        workers = [child for child in multiprocessing.active_children() if child.pid in pids]
        deadline = time.monotonic() + grace_s
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
        if manager is not None:  # ends at once now that every worker has exited (bounded all the same)
            manager.join(max(grace_s, 1.0))
        executor.shutdown(wait=True)
        self._pids.close()
        shutil.rmtree(self._stacks_dir, ignore_errors=True)
