# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""FSDP2 in one place: device mesh, sharding (`create_fsdp_model`), rank-0 weight loading, offloading between phases
and the micro-batch pass that gathers parameters once. Rank 0 alone reads the checkpoint and streams it into the
shards. On CUDA parameters stay fp32 and compute runs in `mp_param_dtype`; on the CPU everything is fp32 (either way
unless `fsdp.torch_dtype` stores and computes in its dtype)."""

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from verl.models.config import DTYPE_NAMES, FSDPConfig, ModelConfig
from verl.models.loading import (
    build_model,
    enable_gradient_checkpointing,
    freeze_vision_tower,
    get_vision_tower,
    run_vision_tower_in_every_forward,
)
from verl.models.lora import apply_lora
from verl.models.transformers_compat import keep_output_capture
from verl.utils.torch_compat import drop_unreduced_grads, reset_iteration


logger = logging.getLogger(__name__)


def to_torch_dtype(name: str | torch.dtype, key: str = "dtype") -> torch.dtype:
    """torch dtype for a config string such as "bf16"; `key` names the config field in errors."""
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPE_NAMES:
        raise ValueError(f"{key}={name!r} is not a dtype; use one of {', '.join(DTYPE_NAMES)}.")
    return getattr(torch, DTYPE_NAMES[name])


def param_dtype(fsdp_config: FSDPConfig) -> torch.dtype:
    """fp32 master weights unless `torch_dtype` asks for pure low precision."""
    return torch.float32 if fsdp_config.torch_dtype is None else to_torch_dtype(fsdp_config.torch_dtype, "torch_dtype")


def frozen_param_dtype(fsdp_config: FSDPConfig, device_type: str) -> torch.dtype:
    """A frozen model's (reference, reward model) parameter dtype: `torch_dtype` when set; else fp32 on the CPU and
    the compute dtype (`mp_param_dtype`) on accelerators, where it needs no fp32 master weights."""
    if fsdp_config.torch_dtype is not None or device_type == "cpu":
        return param_dtype(fsdp_config)
    return to_torch_dtype(fsdp_config.mp_param_dtype, "mp_param_dtype")


def build_device_mesh(world_size: int, fsdp_size: int, device_type: str) -> DeviceMesh:
    """A 1-D ("fsdp",) mesh, or a 2-D ("ddp", "fsdp") HSDP mesh when 0 < fsdp_size < world_size: sharding within
    groups (usually a node) keeps the all-gathers off the slow inter-node network."""
    if fsdp_size <= 0 or fsdp_size >= world_size:
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("fsdp",))
    if world_size % fsdp_size != 0:
        raise ValueError(f"fsdp.fsdp_size={fsdp_size} must divide the world size {world_size} for HSDP.")
    return init_device_mesh(device_type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))


def _mixed_precision(fsdp_config: FSDPConfig, is_cpu: bool) -> MixedPrecisionPolicy:
    if is_cpu:
        return MixedPrecisionPolicy()  # compute in the storage dtype (fp32 on the CPU)
    pure_low_precision = fsdp_config.torch_dtype is not None
    return MixedPrecisionPolicy(
        param_dtype=None if pure_low_precision else to_torch_dtype(fsdp_config.mp_param_dtype, "mp_param_dtype"),
        reduce_dtype=to_torch_dtype(fsdp_config.mp_reduce_dtype, "mp_reduce_dtype"),
        cast_forward_inputs=True,
    )


def _shard_units(model: nn.Module) -> list[nn.Module]:
    """Modules with their own FSDP unit, innermost first: `_no_split_modules` classes (decoder layers, vision blocks),
    then the vision tower (own all-gather for embedding and merger; a frozen tower stays out of the root)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(
            f"{type(model).__name__} does not list its decoder layer classes in _no_split_modules, so FSDP cannot "
            "find the layers to shard; this model is not supported yet."
        )
    units = [module for module in model.modules() if type(module).__name__ in names]
    if not units:
        raise ValueError(f"No module of {type(model).__name__} is one of its _no_split_modules {sorted(names)}.")
    tower = get_vision_tower(model)
    if tower is not None:
        units.append(tower)
    return units


def apply_fsdp2(model: nn.Module, mesh: DeviceMesh, fsdp_config: FSDPConfig, is_cpu: bool) -> nn.Module:
    """Shard `model` in place with FSDP2: each unit of `_shard_units`, then the root (embeddings, heads, final norm).
    `enable_full_shard=False` keeps parameters gathered between forward and backward (ZeRO-2 style). CPU offload
    pins memory only with an accelerator."""
    if not is_cpu and fsdp_config.mp_buffer_dtype:
        buffer_dtype = to_torch_dtype(fsdp_config.mp_buffer_dtype, "mp_buffer_dtype")
        for module in model.modules():
            for name, buffer in module.named_buffers(recurse=False):
                if buffer is not None and buffer.is_floating_point():
                    setattr(module, name, buffer.to(buffer_dtype))
    offload = CPUOffloadPolicy(pin_memory=not is_cpu) if fsdp_config.enable_cpu_offload else OffloadPolicy()
    reshard, mp_policy = fsdp_config.enable_full_shard, _mixed_precision(fsdp_config, is_cpu)
    for module in [*_shard_units(model), model]:
        model_class = type(module)
        fully_shard(module, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp_policy, offload_policy=offload)
        keep_output_capture(module, model_class)
    return model


@torch.no_grad()
def load_rank0_weights(
    model: nn.Module, full_model: nn.Module | None, fsdp_config: FSDPConfig, device: torch.device
) -> None:
    """Fill a meta-initialised sharded `model` from rank 0's `full_model` (None elsewhere), tensor by tensor, each
    rank keeping its shard on the parameter device (the host with CPU offload); non-persistent buffers (rotary
    frequencies) are broadcast separately, and always go to `device`, where the forward uses them."""
    rank = dist.get_rank()
    if rank == 0 and full_model is None:
        raise ValueError("load_rank0_weights needs the loaded model on rank 0.")
    param_device = torch.device("cpu") if fsdp_config.enable_cpu_offload else device
    model.to_empty(device=param_device)
    full_state = full_model.state_dict() if rank == 0 else {}
    set_model_state_dict(
        model, full_state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True)
    )
    full_buffers = dict(full_model.named_buffers()) if rank == 0 else {}
    for name, buffer in model.named_buffers():
        if rank == 0:
            buffer.copy_(full_buffers[name])
        dist.broadcast(buffer, src=0)
    if param_device != device:  # CPU offload keeps parameters on the host, but buffers are used on the device
        for module in model.modules():
            for name, buffer in module.named_buffers(recurse=False):
                setattr(module, name, buffer.to(device))


def create_fsdp_model(
    model_config: ModelConfig,
    fsdp_config: FSDPConfig,
    mesh: DeviceMesh,
    device: torch.device,
    *,
    value_head: bool = False,
    dtype: torch.dtype | None = None,
    attn_implementation: str | None = None,
    with_lora: bool = True,
    lora_key: str = "worker.actor.model.lora",
) -> nn.Module:
    """Build, freeze, checkpoint and shard the model of one role; the weights are read once, by rank 0.
    `dtype` overrides the parameter dtype (default from `fsdp_config.torch_dtype`). Without `enable_rank0_init` or
    in a single process, every rank loads the checkpoint. LoRA adapters (`model_config.lora.rank > 0`, `with_lora`)
    are injected before sharding and alone train; their errors name the config section `lora_key`."""
    is_cpu = device.type == "cpu"
    dtype = dtype or param_dtype(fsdp_config)
    build = {"value_head": value_head, "dtype": dtype, "attn_implementation": attn_implementation}
    rank0_init = fsdp_config.enable_rank0_init and dist.get_world_size() > 1
    full_model = build_model(model_config, device="cpu", **build) if rank0_init and dist.get_rank() == 0 else None
    model = build_model(model_config, device="meta" if rank0_init else "cpu", **build)
    if with_lora and model_config.lora.rank > 0:
        vision_language = get_vision_tower(model) is not None
        for built in (model, full_model) if full_model is not None else (model,):
            trainable = apply_lora(built, model_config.lora, vision_language, model_config.model_path, lora_key)
        logger.info(
            "LoRA rank %d: %d adapter parameters train; the base is frozen.", model_config.lora.rank, trainable
        )
        if not is_cpu and fsdp_config.torch_dtype is None:
            # Mixed precision: the frozen base weights never update, so fp32 masters would only double their memory;
            # they are kept in the compute dtype (FSDP2 needs one dtype among a unit's trainable parameters only).
            compute_dtype = to_torch_dtype(fsdp_config.mp_param_dtype, "mp_param_dtype")
            for param in model.parameters():
                if not param.requires_grad and param.is_floating_point():
                    param.data = param.data.to(compute_dtype)
    if model_config.freeze_vision_tower:
        logger.info("Froze %d vision tower parameters.", freeze_vision_tower(model))
    if model_config.enable_gradient_checkpointing:
        enable_gradient_checkpointing(model)
    apply_fsdp2(model, mesh, fsdp_config, is_cpu)
    if dist.get_world_size() > 1:  # ranks with and without images must all run the tower's collectives
        run_vision_tower_in_every_forward(model)
    if rank0_init:
        load_rank0_weights(model, full_model, fsdp_config, device)
        del full_model
    return model


def get_full_state_dict(model: nn.Module, rank0_only: bool = True) -> dict[str, torch.Tensor]:
    """The unsharded CPU state dict on rank 0 ({} elsewhere), or on every rank with rank0_only=False."""
    if rank0_only:
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {
        name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().cpu()
        for name, value in model.state_dict().items()
    }


@torch.no_grad()
def mix_parameters(target: nn.Module, source: nn.Module, alpha: float) -> None:
    """target <- alpha x source + (1 - alpha) x target, parameter by parameter under the same names (alpha 1 copies),
    in the target's dtype. Shards that `source` holds as the target does mix in place; others go through the full
    tensor, a collective: every rank calls this. Both modules resharded (no gathered FSDP unit)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    sources = dict(source.named_parameters())
    targets = dict(target.named_parameters())
    if set(sources) != set(targets):
        raise ValueError(
            f"Cannot mix parameters of two different models: {sorted(set(sources) ^ set(targets))[:5]} are in one only."
        )
    for name, param in targets.items():
        value = sources[name]
        if isinstance(param, DTensor):
            layout = (param.device_mesh, param.placements)
            if not isinstance(value, DTensor) or (value.device_mesh, value.placements) != layout:
                full = value.full_tensor() if isinstance(value, DTensor) else value
                value = distribute_tensor(full.to(param.dtype), param.device_mesh, param.placements)
            local, value = param.to_local(), value.to_local()
        else:
            local = param
            value = value.full_tensor() if isinstance(value, DTensor) else value
        value = value.to(device=local.device, dtype=local.dtype)
        if alpha == 1.0:
            local.copy_(value)
        else:
            local.lerp_(value, alpha)


def reshard(module: nn.Module) -> None:
    """Free the gathered parameters of every FSDP unit of `module`."""
    for submodule in module.modules():
        if isinstance(submodule, FSDPModule):
            submodule.reshard()


def gathers_once_per_pass(fsdp_config: FSDPConfig, device_type: str) -> bool:
    """`fsdp.gather_once_per_pass` for a device: None means on for the CPU only."""
    setting = fsdp_config.gather_once_per_pass
    return device_type == "cpu" if setting is None else bool(setting)


@contextlib.contextmanager
def micro_batch_pass(
    module: nn.Module, gather_once: bool, reshard_after_forward: bool
) -> Iterator[Callable[[bool], None]]:
    """One pass of micro-batches (gradient accumulation, or no-grad) through an FSDP2 `module`.
    Yields `before_backward(is_last)`, to call before each backward. With `gather_once` each unit stays gathered
    after its first forward, gradients accumulate unsharded and only the last backward reduce-scatters: every rank
    must run the same number of micro-batches. Afterwards all units are resharded and `reshard_after_forward`
    restored; on error the unreduced gradients are dropped."""
    if not gather_once or not isinstance(module, FSDPModule):
        try:
            yield lambda is_last: None  # each backward reduce-scatters as usual
        finally:
            reshard(module)
        return

    def before_backward(is_last: bool) -> None:
        module.set_requires_gradient_sync(is_last)
        module.set_reshard_after_backward(is_last)

    module.set_reshard_after_forward(False)
    try:
        yield before_backward
    except BaseException:
        reset_iteration(module)
        drop_unreduced_grads(module)
        raise
    finally:
        module.set_requires_gradient_sync(True)
        module.set_reshard_after_backward(True)
        module.set_reshard_after_forward(reshard_after_forward)
        reshard(module)


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip gradients to `max_norm`; returns the global norm materialised from its DTensor (for finiteness tests)."""
    params = [param for param in model.parameters() if param.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


@torch.no_grad()
def offload_fsdp_model(model: nn.Module) -> None:
    """Move parameter shards and buffers to CPU between phases (gradients are already None after the step).
    `Module.to` is FSDP2's supported way: it re-registers the moved shards."""
    if isinstance(model, FSDPModule):
        model.reshard()
    model.to("cpu")


@torch.no_grad()
def load_fsdp_model(model: nn.Module, device: torch.device) -> None:
    """Bring offloaded parameter shards and buffers back to `device`."""
    model.to(device)


@torch.no_grad()
def offload_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Move the optimizer states (Adam moments) to CPU memory."""
    load_optimizer(optimizer, torch.device("cpu"))


@torch.no_grad()
def load_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move the optimizer states to `device`."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.device != device:
                state[key] = value.to(device, non_blocking=True)
