# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""RolloutWorker: one process of the rollout pool in worker.rollout.mode=disaggregated (docs/async.md).

It holds a vLLM engine, stepped without pause by an engine thread (the only one that touches it), while the
driver's calls arrive: `admit`, `poll` (a step's complete groups, or each as it completes, for scoring),
`receive_weights` (broadcast received during generation, loaded between two steps) and `generate_sequences`
(validation, between two steps). A tensor-parallel engine spans consecutive processes: the first runs the loop
for the group; the others hand it their admissions, take their batch share and follow it (engine_mirror.py).
"""

import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from verl.data.tokenizer import get_processor, get_tokenizer
from verl.protocol import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.utils import device as device_utils
from verl.workers.config import WorkerConfig
from verl.workers.rollout.engine_mirror import STOP, PeerStopped
from verl.workers.rollout.engine_thread import EngineThread
from verl.workers.rollout.request_loop import RolloutRequest
from verl.workers.weight_sync import sinks


_POLL_S = 1.0
"""How often a waiting call checks that the engine thread is still alive."""
_HEARTBEAT_S = 30.0
"""How often an idle tensor-parallel first process tells its peers it is alive (a follower waiting in a collective
past the process group's timeout would fail)."""


class RolloutWorker(Worker):
    def __init__(self, config: WorkerConfig, device: str = "auto") -> None:
        super().__init__()
        self.config = config
        self.device_type = device_utils.set_device_type(device)
        device_utils.init_distributed()
        self.device = device_utils.get_local_device()
        if self.device.type == "cuda":  # vLLM's external launcher picks its device from LOCAL_RANK: make it this one
            os.environ["LOCAL_RANK"] = str(self.device.index)
        self.transfer_group: Any = None
        self.version: int | None = None
        """Weight updates the engine's weights carry; None until the first weights arrive."""
        self.engine: EngineThread | None = None
        """The thread that owns the engine (a tensor-parallel peer's follows its first process)."""
        self._submit_needed = False
        self._window_start = time.perf_counter()
        self._taken_version: tuple[int, int] | None = None  # the RolloutRequest.batch_key of the last batch taken
        self.tp_rank, self.tp_size = 0, 1
        self.data_group: Any = None
        """Tensor-parallel: the group's gloo group for admissions and batches, apart from the engine threads' own."""
        self._posted: dict[str, tuple[Callable[[], Any], Future]] = {}
        """A follower: its weight load ("load") or validation call ("generate") and its result, run when the first
        process runs its own."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.workers.rollout.vllm_rollout import VLLMRollout

        model = self.config.actor.model
        options = dict(
            trust_remote_code=model.trust_remote_code, override_chat_template=self.config.override_chat_template
        )
        # the driver loaded the tokenizer too, and said what it lacks
        tokenizer = get_tokenizer(model.tokenizer_path, **options, warn_no_pad=False)
        processor = get_processor(model.tokenizer_path, **options)
        self.rollout = VLLMRollout(
            model.model_path,
            self.config.rollout,
            tokenizer,
            processor,
            colocated=False,
            tokenizer_path=model.tokenizer_path,
        )
        self.n, _, self.make_params, _ = self.rollout.request_sampling(RolloutRequest(), self.rollout.request_loop)
        tp_size = self.config.rollout.tensor_parallel_size or 1
        if tp_size > 1:
            self.tp_rank, self.tp_size = dist.get_rank() % tp_size, tp_size
            for first in range(0, dist.get_world_size(), tp_size):  # every process creates every group, in order
                group = dist.new_group(list(range(first, first + tp_size)), backend="gloo")
                if first <= dist.get_rank() < first + tp_size:
                    self.data_group = group
        leader = self.rollout.engine_leader
        self.engine = EngineThread(
            self.rollout.request_loop,
            prepare=self._prepare_step,
            has_work=lambda: (self._submit_needed and self.version is not None) or self._env_pending(),
            on_idle=None if leader is None else lambda: leader.send("noop"),
            idle_s=_HEARTBEAT_S,
            on_stop=self._end_peers,
            name="rollout-engine",
        )
        self.engine.start(self._follow_loop if self.rollout.follows else None)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_weight_transfer(self, host: str, port: int, world_size: int, backend: str) -> str:
        """Join the weight-transfer group as member 1 + rank (trainer rank 0 is member 0); returns the engine dtype."""
        self.transfer_group = sinks.create_group(host, port, 1 + dist.get_rank(), world_size, backend)
        return str(self.rollout.torch_dtype).removeprefix("torch.")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def prepare_rollout_engine(self) -> dict[str, float]:
        """Nothing to do: the trainer sends the weights after each update (`receive_weights`)."""
        return {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def release_rollout_engine(self) -> dict[str, float]:
        return {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def receive_weights(self, version: int) -> dict[str, float]:
        """Take the trainer's broadcast, then load it between two engine steps; from then on tokens are sampled under
        `version`. Returns the transfer's figures. An engine of one process generates on while the broadcast comes
        in; an engine over several (tensor-parallel) receives between two steps too, its processes together: its
        steps' all-reduces and the broadcast are collectives of two communicators, which NCCL may deadlock on when
        two threads issue them in different orders on different processes."""
        from verl.workers.rollout import vllm_compat

        start = time.perf_counter()
        received: dict[str, Any] = {}
        if not self.rollout.spans_processes:
            received["weights"], received["stats"] = sinks.receive_weights(self.transfer_group, self.device)
        received["at"] = time.perf_counter()

        def load() -> float:
            paused = time.perf_counter()
            self._suspend()  # the running samples continue from their tokens after the load
            if self.rollout.engine_leader is not None:  # the peers receive and load their own copy at this point
                self.rollout.engine_leader.send("load")
            if "weights" not in received:  # (every process of the engine takes the broadcast here, together)
                received["taking"] = True
                received["weights"], received["stats"] = sinks.receive_weights(self.transfer_group, self.device)
                received["at"] = time.perf_counter()
            weights = received.pop("weights")
            try:
                sinks.EngineLoader(self.rollout.inference_engine).load(iter(weights))
            finally:
                weights.clear()  # the received copy is freed once loaded, before the next one comes
            vllm_compat.reset_caches_after_weight_update(self.rollout.inference_engine)
            self.version = self.engine.version = version
            return time.perf_counter() - paused

        try:
            pause = self._on_engine_thread(load, "load")
        except BaseException:
            if not received.get("taking") and "stats" not in received:  # the engine failed before the broadcast:
                with contextlib.suppress(Exception):  # take it here, or the trainer and the peers wait in it for ever
                    sinks.receive_weights(self.transfer_group, self.device)
            raise
        stats = received["stats"]
        return {
            "timing_s/sync_weights_receive": received["at"] - start,
            "timing_s/sync_weights_load": pause,
            "perf/sync_weights_gb": stats.bytes / 2**30,
            "perf/sync_weights_buckets": float(stats.buckets),
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close_rollout_envs(self) -> None:
        """Stop the engine thread and end what the episodes share (`VLLMRollout.close_envs`) at the end of a run, so no
        tool server outlives it."""
        if self.engine is not None:
            self.engine.stop()  # a follower's thread ends with its first process's STOP
        if getattr(self, "rollout", None) is not None:
            self.rollout.close_envs()

    def seed_counts(self) -> tuple[int, int]:
        """Training admissions and validation calls so far: the requests' seeds follow these counts (saved with the
        trainer's checkpoints)."""
        with self.engine.cond:
            return self.rollout.generate_calls, self.rollout.validate_calls

    def restore_seed_counts(self, generate_per_rank: list[int], validate_per_rank: list[int]) -> None:
        """A resumed run's counts, this rank's entries."""
        with self.engine.cond:
            self.rollout.generate_calls = int(generate_per_rank[dist.get_rank()])
            self.rollout.validate_calls = int(validate_per_rank[dist.get_rank()])

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def admit(self, prompts: DataProto, request: RolloutRequest) -> int:
        """Admit this rank's share of `prompts` at `request.version`; returns the groups in flight here."""
        if self.version is None:
            raise RuntimeError("The rollout engine has no weights yet: the trainer sends them before the first step.")
        if self.tp_size > 1:  # the first process admits the group's prompts, seeded as its own
            parts: list[Any] = [None] * self.tp_size
            dist.all_gather_object(parts, prompts, group=self.data_group)
            if self.rollout.follows:
                with self.engine.cond:
                    self.engine.raise_if_failed()
                    self.rollout.generate_calls += 1  # the seeds' count, saved with checkpoints, as the first's
                    return 0
            prompts = DataProto.concat(parts)
        with self.engine.cond:
            self.engine.raise_if_failed()
            self.rollout.admit(prompts, request, dist.get_rank())
            self._submit_needed = True
            self.engine.cond.notify_all()
            return self.rollout.request_loop.in_flight

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def poll(self, request: RolloutRequest, wait_s: float) -> dict[str, Any]:
        """Wait up to `wait_s` seconds for the step's groups; returns "batch" (`request.quota` groups that can be
        taken, as `RequestLoop.pick`, once per `request.batch_key`, else None), "complete" (with `request.stream`,
        copies of the groups completed since the last call) and "metrics" (busy share, groups held)."""
        if self.tp_size > 1:  # the first process polls for the group; each process returns its share of the batch
            result: dict[str, Any] = {}
            failure: Exception | None = None
            if not self.rollout.follows:  # the peers wait for this answer: a failure goes to them too
                try:
                    result = self._poll(replace(request, quota=request.quota * self.tp_size), wait_s)
                except Exception as error:
                    failure, result = error, {"error": f"{type(error).__name__}: {error}"}
            box = [{"batch": result.get("batch"), "error": result.get("error")}]  # what the peers need
            dist.broadcast_object_list(box, src=dist.get_global_rank(self.data_group, 0), group=self.data_group)
            if failure is not None:  # its own error, of its type (the driver reports it, not the peers')
                raise failure
            if box[0]["error"] is not None:
                raise PeerStopped(f"The first process of this tensor-parallel engine failed: {box[0]['error']}")
            if self.rollout.follows:  # this process's own engine thread (a step that failed here, not on the first)
                with self.engine.cond:
                    self.engine.raise_if_failed()
            batch = box[0]["batch"]
            return {
                "batch": None if batch is None else batch.chunk(self.tp_size)[self.tp_rank],
                "complete": result.get("complete"),
                "metrics": result.get("metrics") or {},
            }
        return self._poll(request, wait_s)

    def _poll(self, request: RolloutRequest, wait_s: float) -> dict[str, Any]:
        loop = self.rollout.request_loop
        quota, version, max_staleness, stream = request.quota, request.version, request.max_staleness, request.stream
        width = self.rollout.call_response_length(request)
        take = self._taken_version != request.batch_key
        deadline = time.monotonic() + (wait_s if take else 0.0)  # a rank whose batch is taken answers at once
        with self.engine.cond:
            self.engine.raise_if_failed()
            if take:
                loop.check_quota(quota, version, max_staleness)
            while True:
                picked = loop.pick(quota, version, max_staleness) if take else None
                left = deadline - time.monotonic()
                if picked is not None or (stream and loop.has_newly_complete()) or left <= 0:
                    break
                if take and self.engine.idle and not self._submit_needed:
                    raise RuntimeError(
                        f"The rollout engine is idle with {loop.in_flight} groups in flight and cannot complete "
                        f"{quota} of them; this is a bug in the admission."
                    )
                self.engine.cond.wait(min(left, _POLL_S))
                self.engine.raise_if_failed()
            groups = loop.pop(picked) if picked is not None else None
            fresh = loop.newly_complete(groups) if stream else []
            metrics: dict[str, float] = {}
            if groups is not None:
                self._taken_version = request.batch_key
                now = time.perf_counter()
                metrics["async/engine_busy_share"] = self.engine.busy_s / max(now - self._window_start, 1e-9)
                metrics["async/in_flight_groups"] = float(loop.in_flight)
                self.engine.busy_s, self._window_start = 0.0, now
        return {
            "batch": None if groups is None else self.rollout.groups_to_rollout(groups, self.n, width),
            "complete": self.rollout.groups_to_rollout(fresh, self.n, width) if fresh else None,
            "metrics": metrics,
        }

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto, request: RolloutRequest) -> DataProto:
        """One blocking rollout (validation) between two engine steps; the asynchronous samples continue after it."""

        def generate() -> DataProto:
            self._suspend()
            if self.rollout.engine_leader is not None:  # the peers make the same (collective) call at this point
                self.rollout.engine_leader.send("generate")
            return self.rollout.generate_sequences(prompts, request)

        return self._on_engine_thread(generate, "generate")

    def _on_engine_thread(self, fn: Callable[[], Any], kind: str) -> Any:
        """Run `fn` on the engine thread between two engine steps; a follower posts it as `kind` (the engine work the
        first process sends) so its thread runs it where the first process runs its own."""
        if not self.rollout.follows:
            return self.engine.call(fn)
        result: Future = Future()
        with self.engine.cond:
            self._posted[kind] = (fn, result)
            self.engine.cond.notify_all()
        return self.engine.wait(result)

    def _suspend(self) -> None:
        """Stop the running requests (on the engine thread); the next step submits them again from their tokens."""
        self.rollout.request_loop.suspend()
        self._submit_needed = True

    def _prepare_step(self) -> bool:
        """Before each engine step (under the lock): poll environment steps and submit what was admitted or is ready
        for its next turn; returns whether only environment steps are running."""
        loop = self.rollout.request_loop
        turns = loop.turns
        if turns is not None:
            completed, ready = turns.poll()
            self._submit_needed = self._submit_needed or ready
            if completed:
                self.engine.cond.notify_all()
        if self._submit_needed and self.version is not None:
            loop.submit(self.version, self.make_params)
            self._submit_needed = False
        return self._env_pending()

    def _env_pending(self) -> bool:
        turns = self.rollout.request_loop.turns
        return turns is not None and turns.pending > 0

    def _end_peers(self, error: BaseException | None) -> None:
        """The engine thread stops: a tensor-parallel first process tells its waiting peers."""
        leader = self.rollout.engine_leader
        if leader is None:
            return
        with contextlib.suppress(Exception):
            if error is None:
                leader.send(STOP)
            else:
                leader.end(error=error)

    def _follow_loop(self) -> None:
        """A tensor-parallel peer: repeat the first process's engine calls, running this process's weight load and
        validation call where the first runs its own (engine_mirror)."""

        def posted(kind: str) -> tuple[Callable[[], Any], Future]:
            with self.engine.cond:
                while kind not in self._posted and not self.engine.stopping:
                    self.engine.cond.wait(_POLL_S)
                item = self._posted.pop(kind, None)
            if item is None:
                raise RuntimeError("The rollout worker closed while its engine's first process waited for it.")
            return item

        def run(kind: str) -> None:
            fn, result = posted(kind)
            try:
                result.set_result(fn())
            except BaseException as err:
                result.set_exception(err)
                raise

        handlers = {"load": lambda: run("load"), "generate": lambda: run("generate"), "noop": lambda: None}
        self.rollout.follow_leader(handlers)
