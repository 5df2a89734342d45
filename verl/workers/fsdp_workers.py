# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""FSDPWorker: what runs inside each worker process, in one of several roles.

    actor_rollout_ref   the policy (FSDP2 + optimizer), its vLLM engine and the frozen reference model
    actor_rollout       the same without a reference (algorithm.disable_kl)
    critic              the value model (FSDP2 + optimizer), for gae

Each registered method is one RPC of docs/data_flow.md. With offloading, parameters and optimizer states come to the
device only for the phase that uses them (`_resident`).
"""

import contextlib
import copy
import logging
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from verl.algorithms.user_functions import training_step
from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.config import OffloadConfig
from verl.models.fsdp import (
    build_device_mesh,
    create_fsdp_model,
    frozen_param_dtype,
    load_fsdp_model,
    load_optimizer,
    mix_parameters,
    offload_fsdp_model,
    offload_optimizer,
)
from verl.models.lora import adapters_disabled
from verl.models.structure import matmul_flops_per_token
from verl.models.ulysses import gather_rows, new_sequence_parallel_group, own_rows
from verl.protocol import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.utils import device as device_utils
from verl.utils.checkpoint import FSDPCheckpointManager, has_checkpoint
from verl.utils.optim import build_lr_scheduler, build_optimizer, reset_optimizer_state
from verl.workers.actor.dp_actor import DataParallelPPOActor, process_multi_modal_inputs
from verl.workers.config import UpdateRequest, WorkerConfig
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.rollout.request_loop import RolloutRequest


logger = logging.getLogger(__name__)

ROLES = ("actor_rollout_ref", "actor_rollout", "ref", "critic")


class FSDPWorker(Worker):
    def __init__(self, config: WorkerConfig, role: str, device: str = "auto") -> None:
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"Unknown worker role '{role}'; choose one of {', '.join(ROLES)}.")
        self.config = config
        self.role = role
        self.device_type = device_utils.set_device_type(device)
        device_utils.init_distributed()  # a no-op for the second role of a colocated process
        self.device = device_utils.get_local_device()
        if self.device.type == "cuda":  # vLLM's external launcher picks its device from LOCAL_RANK: make it this one
            os.environ["LOCAL_RANK"] = str(self.device.index)
        self.has_actor = role in ("actor_rollout_ref", "actor_rollout")
        # mode=disaggregated: the engines are the rollout pool's; the actor sends them its weights (`send_weights`)
        self.has_rollout = self.has_actor and config.rollout.mode != "disaggregated"
        self.transfer_group: Any = None
        self.has_ref = role in ("actor_rollout_ref", "ref")
        self.has_critic = role == "critic"
        self.processor: Any = None

    def _build_trainable(self, section: Any, value_head: bool) -> tuple[torch.nn.Module, Any, Any]:
        """The trained model (actor or critic), its optimizer, lr scheduler and checkpoint manager."""
        mesh = build_device_mesh(dist.get_world_size(), section.fsdp.fsdp_size, self.device_type)
        module = create_fsdp_model(section.model, section.fsdp, mesh, self.device, value_head=value_head)
        optimizer = build_optimizer(module, section.optim)
        if section.offload.offload_params:
            offload_fsdp_model(module)
        lr_scheduler = build_lr_scheduler(optimizer, section.optim)
        self.checkpoint_manager = FSDPCheckpointManager(
            module, optimizer, lr_scheduler, self.tokenizer, self.processor, adapter_only=section.model.lora.rank > 0
        )
        return module, optimizer, lr_scheduler

    @contextlib.contextmanager
    def _resident(self, module: torch.nn.Module, offload: OffloadConfig, optimizer: Any = None) -> Iterator[None]:
        """Keep `module` (and `optimizer`'s states) on the device for one phase; offload them again after it."""
        if offload.offload_params:
            load_fsdp_model(module, self.device)
        if optimizer is not None and offload.offload_optimizer:
            load_optimizer(optimizer, self.device)
        try:
            yield
        finally:
            if optimizer is not None and offload.offload_optimizer:
                offload_optimizer(optimizer)
            if offload.offload_params:
                offload_fsdp_model(module)
            if offload.offload_params or offload.offload_optimizer:
                device_utils.empty_cache()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        config = self.config
        section = config.critic if self.has_critic else config.actor
        model = section.model
        options = dict(trust_remote_code=model.trust_remote_code, override_chat_template=config.override_chat_template)
        # the driver loaded the actor's tokenizer and said what it lacks
        same = model.tokenizer_path == config.actor.model.tokenizer_path
        self.tokenizer = get_tokenizer(model.tokenizer_path, **options, warn_no_pad=not same)
        self.processor = get_processor(model.tokenizer_path, **options)
        self.media_inputs: dict[Any, Any] = {}
        """A step's prompts' processed images and videos by uid, from one call to the next (process_multi_modal_inputs)."""
        n = config.rollout.n
        # seq-mean-token-sum-norm divides by data.max_response_length, not the step's width (a length schedule's stage)
        lengths = {"rollout_n": n, "max_response_length": max(config.rollout.response_length, 0) or None}
        # Ulysses: ranks of a group share each row of the actor's and reference's forwards (verl.models.ulysses)
        self.sp_group = None
        if (self.has_actor or self.has_ref) and config.actor.ulysses_size > 1:
            self.sp_group = new_sequence_parallel_group(config.actor.ulysses_size)
        if self.has_critic:
            self.critic_module, self.critic_optimizer, self.critic_lr_scheduler = self._build_trainable(
                config.critic, value_head=True
            )
            self.critic_sp_group = new_sequence_parallel_group(config.critic.ulysses_size)
            self.critic = DataParallelPPOCritic(
                config.critic, self.critic_module, self.critic_optimizer, sp_group=self.critic_sp_group, **lengths
            )
        if self.has_actor:
            self.actor_module, self.actor_optimizer, self.actor_lr_scheduler = self._build_trainable(
                config.actor, value_head=False
            )
            self.actor = DataParallelPPOActor(
                config.actor, self.actor_module, self.actor_optimizer, sp_group=self.sp_group, **lengths
            )
        self.ref_is_actor_base = self.has_ref and self.has_actor and config.actor.model.lora.rank > 0
        if self.ref_is_actor_base:
            # LoRA: the reference policy is the actor's base model, its adapters switched off; no second copy
            self.ref_module, self.ref_offload = self.actor_module, config.actor.offload
        elif self.has_ref:
            mesh = build_device_mesh(dist.get_world_size(), config.ref.fsdp.fsdp_size, self.device_type)
            ref_dtype = frozen_param_dtype(config.ref.fsdp, self.device_type)
            ref_module = create_fsdp_model(
                config.actor.model, config.ref.fsdp, mesh, self.device, dtype=ref_dtype, with_lora=False
            )
            ref_module.requires_grad_(False)
            if config.ref.offload.offload_params:
                offload_fsdp_model(ref_module)
            self.ref_module, self.ref_offload = ref_module, config.ref.offload
        if self.has_ref:
            ref_config = copy.deepcopy(config.actor)
            # under LoRA the reference pass runs on the actor's module: it gathers as the actor's fsdp says
            own = ("fsdp",) if not self.ref_is_actor_base else ()
            for key in ("micro_batch_size_per_device_for_experience", "padding_free", "dynamic_batching", *own):
                setattr(ref_config, key, getattr(config.ref, key))
            self.ref = DataParallelPPOActor(ref_config, self.ref_module, None, sp_group=self.sp_group, **lengths)
        if self.has_rollout:
            # imported here: a critic-only process never pays for vLLM
            from verl.workers.rollout.vllm_rollout import VLLMRollout
            from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

            self.rollout = VLLMRollout(
                config.actor.model.model_path,
                config.rollout,
                self.tokenizer,
                self.processor,
                lora_rank=config.actor.model.lora.rank,
                tokenizer_path=config.actor.model.tokenizer_path,
            )
            self.sharding_manager = FSDPVLLMShardingManager(
                self.actor_module,
                self.rollout,
                offload_params=config.actor.offload.offload_params,
                device=self.device,
                compute_dtype=frozen_param_dtype(config.actor.fsdp, self.device_type),  # the actor's compute dtype
            )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def flops_info(self) -> dict[str, float]:
        """The trained model's FLOPs per token and this device's measured matmul peak: what MFU is computed from."""
        module = self.critic_module if self.has_critic else self.actor_module
        per_token, head = matmul_flops_per_token(module)  # DTensor.numel() is the global size
        return {
            "flops_per_token": per_token,
            "head_flops_per_token": head,
            "peak_flops": device_utils.measure_peak_flops(),
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def prepare_rollout_engine(self) -> dict[str, float]:
        return self.sharding_manager.prepare()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def release_rollout_engine(self) -> dict[str, float]:
        return self.sharding_manager.release()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close_rollout_envs(self) -> None:
        """End what the rollout environment's episodes share (`VLLMRollout.close_envs`) at the end of a run, so no
        tool server outlives it."""
        if getattr(self, "rollout", None) is not None:
            self.rollout.close_envs()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto, request: RolloutRequest | None = None) -> DataProto:
        """n responses for each of this rank's prompts, run to completion (synchronous step or validation)."""
        return self.rollout.generate_sequences(prompts, request)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def generate_sequences_async(self, prompts: DataProto, request: RolloutRequest) -> dict[str, Any]:
        """The colocated asynchronous rollout (`VLLMRollout.generate_async`): admit this rank's share of `prompts`
        (on the step's first call) and return {"batch", "complete", "metrics"} as `RolloutWorker.poll` does."""
        return self.rollout.generate_async(prompts, request)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weight_transfer_address(self) -> tuple[str, int]:
        """Where rank 0 will host the weight-transfer group's store: this node's IP and a port free on it now."""
        import ray

        from verl.single_controller.base.worker import get_free_port

        return ray.util.get_node_ip_address(), get_free_port()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_weight_transfer(self, host: str, port: int, world_size: int, backend: str) -> None:
        """Rank 0 joins the weight-transfer group as its member 0, hosting its store at host:port."""
        from verl.workers.weight_sync.sinks import create_group

        if dist.get_rank() == 0:
            self.transfer_group = create_group(host, port, 0, world_size, backend)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def send_weights(self, dtype: str, bucket_mb: int) -> dict[str, float]:
        """Gather the actor's full weights (collective) and broadcast them from rank 0 to the rollout engines in
        buckets of `bucket_mb` MiB, cast to the engines' `dtype`."""
        from verl.workers.weight_sync import sync
        from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights
        from verl.workers.weight_sync.sinks import PoolBroadcast

        names = getattr(self, "_weight_names", None) or checkpoint_names(self.actor_module)
        self._weight_names = names
        sink = PoolBroadcast(self.transfer_group, bucket_mb * 2**20, self.device)  # no group on ranks > 0
        start = time.perf_counter()
        with self._resident(self.actor_module, self.config.actor.offload):
            stats = sync(sink, iter_full_weights, self.actor_module, getattr(torch, dtype), names)
        return {
            "timing_s/sync_weights": time.perf_counter() - start,
            "timing_s/sync_weights_gather": stats["gather_seconds"],
            "timing_s/sync_weights_broadcast": stats["broadcast_seconds"],
            "perf/sync_weights_gb": stats["bytes"] / 2**30,
        }

    def _forward_rows(
        self,
        data: DataProto,
        sp_group: dist.ProcessGroup | None,
        name: str,
        forward: Callable[[DataProto], torch.Tensor],
        *contexts: contextlib.AbstractContextManager,
    ) -> DataProto:
        """An experience phase: media inputs built, the sequence-parallel group's rows gathered, `forward` run inside
        `contexts` (in order), this rank's rows kept as `name`."""
        process_multi_modal_inputs(data, self.processor, self.media_inputs)
        data = gather_rows(data, sp_group)
        with contextlib.ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context)
            output = forward(data)
        return own_rows(DataProto.from_dict(tensors={name: output}), sp_group)

    def _log_probs(self, model: DataParallelPPOActor) -> Callable[[DataProto], torch.Tensor]:
        return lambda rows: model.compute_log_probs(rows, temperature=self.config.rollout.temperature)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_probs(self, data: DataProto) -> DataProto:
        resident = self._resident(self.actor_module, self.config.actor.offload)
        return self._forward_rows(data, self.sp_group, "old_log_probs", self._log_probs(self.actor), resident)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_probs(self, data: DataProto) -> DataProto:
        resident = self._resident(self.ref_module, self.ref_offload)
        base = adapters_disabled(self.ref_module) if self.ref_is_actor_base else contextlib.nullcontext()
        return self._forward_rows(data, self.sp_group, "ref_log_probs", self._log_probs(self.ref), resident, base)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        resident = self._resident(self.critic_module, self.config.critic.offload)
        return self._forward_rows(data, self.critic_sp_group, "values", self.critic.compute_values, resident)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sync_reference(self, alpha: float, reset_optimizer: bool = False) -> None:
        """algorithm.ref_sync_steps: the reference model moves to the actor, ref <- alpha x actor + (1 - alpha) x ref,
        shard by shard (the trainer saves it with every checkpoint then); with `reset_optimizer` the actor's
        optimizer restarts too (algorithm.ref_sync_reset_optimizer)."""
        actor_resident = self._resident(self.actor_module, self.config.actor.offload)
        with actor_resident, self._resident(self.ref_module, self.ref_offload):
            mix_parameters(self.ref_module, self.actor_module, alpha)
        if reset_optimizer:
            reset_optimizer_state(self.actor_optimizer)

    def _update(
        self, data: DataProto, update: Callable[[DataProto], dict[str, float]], request: UpdateRequest
    ) -> DataProto:
        """An update phase of this worker's trained model (the critic or the actor): as `_forward_rows`, then `update`
        with the model and its optimizer resident and one lr-scheduler step; returns the metrics, `<role>/lr` the
        step's, and for the actor the step's memory figures (`memory_metrics`)."""
        if self.has_critic:
            role, sp_group, lr_scheduler = "critic", self.critic_sp_group, self.critic_lr_scheduler
        else:
            role, sp_group, lr_scheduler = "actor", self.sp_group, self.actor_lr_scheduler
        process_multi_modal_inputs(data, self.processor, self.media_inputs)
        if (
            sp_group is not None
        ):  # each of the group's mini-batches: the same slice of every rank's rows, as without it
            passes = (self.critic if self.has_critic else self.actor).passes
            own = passes.mini_batch_size // passes.sp_size
            data = gather_rows(data, sp_group, len(data) // own if own and len(data) % own == 0 else 1)
        # dropout masks from (rollout.seed, rank, step): the ranks draw other ones, and a resumed run the same ones
        step_rng = device_utils.seeded_rng(self.config.rollout.seed, dist.get_rank(), lr_scheduler.last_epoch)
        with self._trained_resident(), training_step(request.global_step), step_rng:  # the step: in a user's errors
            metrics = update(data)
        metrics[f"{role}/lr"] = lr_scheduler.get_last_lr()[0]
        lr_scheduler.step()
        if role == "actor":
            metrics.update(device_utils.memory_metrics())
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto, request: UpdateRequest) -> DataProto:
        update = partial(
            self.actor.update_policy, temperature=self.config.rollout.temperature, entropy_coeff=request.entropy_coeff
        )
        return self._update(data, update, request)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto, request: UpdateRequest) -> DataProto:
        return self._update(data, self.critic.update_critic, request)

    def _trained_resident(self) -> contextlib.AbstractContextManager:
        """The trained module and its optimizer on the device for an update, or while a checkpoint is written or
        read."""
        if self.has_critic:
            return self._resident(self.critic_module, self.config.critic.offload, self.critic_optimizer)
        return self._resident(self.actor_module, self.config.actor.offload, self.actor_optimizer)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str, save_model_only: bool = False, reference_path: str | None = None) -> None:
        """The trained model's checkpoint at `path`; with `reference_path` (a reference that `sync_reference` moves),
        the reference model's weights there too."""
        # the rollout's call counters seed its requests: restored, a resumed run samples as an unbroken one
        extra = {}
        if self.has_rollout:
            extra = {"rollout_generate_calls": self.rollout.generate_calls}
            extra["rollout_validate_calls"] = self.rollout.validate_calls  # validation's own seeds
        with self._trained_resident():
            self.checkpoint_manager.save(path, extra_state=extra, save_model_only=save_model_only)
        if reference_path is not None:
            with self._resident(self.ref_module, self.ref_offload):
                FSDPCheckpointManager(self.ref_module).save(reference_path, save_model_only=True)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str, reference_path: str | None = None) -> None:
        """Restore `path`; and the reference model from `reference_path` when the checkpoint holds one there."""
        if not os.path.isdir(path):
            raise FileNotFoundError(f"Checkpoint directory '{path}' does not exist.")
        with self._trained_resident():
            extra = self.checkpoint_manager.load(path)
        if self.has_rollout and "rollout_generate_calls" in extra:
            self.rollout.generate_calls = extra["rollout_generate_calls"]
            self.rollout.validate_calls = extra.get("rollout_validate_calls", 0)
        if reference_path is not None and has_checkpoint(reference_path):
            with self._resident(self.ref_module, self.ref_offload):
                FSDPCheckpointManager(self.ref_module).load(reference_path, model_only=True)
