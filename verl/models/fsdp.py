# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""FSDP2 in one place: the device mesh, sharding a model (`create_fsdp_model`), rank-0 weight loading, offloading
between phases and the micro-batch pass that gathers parameters once.

The checkpoint is read once, by rank 0, and streamed into the shards; no rank holds a second full copy. On CUDA the
parameters stay fp32 and compute runs in `mp_param_dtype`; on the CPU everything is fp32 (bf16 is emulated there).
"""

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from verl.models.config import FSDPConfig, ModelConfig
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

_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}


def to_torch_dtype(name: str | torch.dtype, key: str = "dtype") -> torch.dtype:
    """torch dtype for a config string such as "bf16" or "float32"; `key` names the config field in errors."""
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"{key}={name!r} is not a dtype; use one of {', '.join(_DTYPES)}.")
    return _DTYPES[name]


def param_dtype(fsdp_config: FSDPConfig) -> torch.dtype:
    """Storage dtype of the parameters: fp32 master weights unless `torch_dtype` asks for pure low precision."""
    return torch.float32 if fsdp_config.torch_dtype is None else to_torch_dtype(fsdp_config.torch_dtype, "torch_dtype")


def build_device_mesh(world_size: int, fsdp_size: int, device_type: str) -> DeviceMesh:
    """A 1-D ("fsdp",) mesh over all ranks, or a 2-D ("ddp", "fsdp") HSDP mesh when 0 < fsdp_size < world_size.

    HSDP shards within groups of fsdp_size ranks (usually one node, where the links are fast) and replicates across
    groups, so the parameter all-gathers never cross the slow inter-node network.
    """
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
    """Modules that get their own FSDP unit, innermost first: decoder layers, vision blocks, the vision tower.

    The layer classes come from the model's `_no_split_modules` (the decoder layer and vision block of HF models).
    Wrapping the vision tower too gives its patch embedding and merger their own all-gather, and keeps a frozen
    tower out of the root unit.
    """
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
    """Shard `model` in place with FSDP2 `fully_shard`: each decoder layer, vision block, vision tower, then the root.

    The root unit holds what is left (embeddings, tied LM head or value head, final norm). `enable_full_shard=False`
    keeps the parameters gathered between forward and backward (ZeRO-2 style: more memory, fewer all-gathers).
    CPU offload uses unpinned memory on the CPU, where pinning needs an accelerator.
    """
    if not is_cpu and fsdp_config.mp_buffer_dtype:
        buffer_dtype = to_torch_dtype(fsdp_config.mp_buffer_dtype, "mp_buffer_dtype")
        for module in model.modules():
            for name, buffer in module.named_buffers(recurse=False):
                if buffer is not None and buffer.is_floating_point():
                    setattr(module, name, buffer.to(buffer_dtype))
    offload = CPUOffloadPolicy(pin_memory=not is_cpu) if fsdp_config.enable_cpu_offload else OffloadPolicy()
    kwargs = {
        "mesh": mesh,
        "reshard_after_forward": fsdp_config.enable_full_shard,
        "mp_policy": _mixed_precision(fsdp_config, is_cpu),
        "offload_policy": offload,
    }
    for module in [*_shard_units(model), model]:
        model_class = type(module)
        fully_shard(module, **kwargs)
        keep_output_capture(module, model_class)
    return model


@torch.no_grad()
def load_weights_from_rank0(model: nn.Module, full_model: nn.Module | None, device: torch.device) -> None:
    """Fill a meta-initialised, sharded `model` with the weights of rank 0's `full_model` (None on other ranks).

    Parameters and persistent buffers are broadcast tensor by tensor and each rank keeps only its shard;
    non-persistent buffers (rotary frequencies), which are not in any state dict, are broadcast separately.
    """
    rank = dist.get_rank()
    if rank == 0 and full_model is None:
        raise ValueError("load_weights_from_rank0 needs the loaded model on rank 0.")
    model.to_empty(device=device)
    full_state = full_model.state_dict() if rank == 0 else {}
    set_model_state_dict(
        model, full_state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True)
    )
    full_buffers = dict(full_model.named_buffers()) if rank == 0 else {}
    for name, buffer in model.named_buffers():
        if rank == 0:
            buffer.copy_(full_buffers[name])
        dist.broadcast(buffer, src=0)


def store_frozen_in(model: nn.Module, dtype: torch.dtype) -> None:
    """Keep the frozen floating-point parameters of `model` in `dtype` (the compute dtype): with LoRA on GPU the base
    weights are never updated, so fp32 master copies would only double their memory. FSDP2 needs one dtype among the
    trainable parameters of a unit only, and all-gathers everything in the mixed-precision compute dtype anyway."""
    for param in model.parameters():
        if not param.requires_grad and param.is_floating_point():
            param.data = param.data.to(dtype)


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
) -> nn.Module:
    """Build, freeze, checkpoint and shard the model of one role; the weights are read once, by rank 0.

    `dtype` overrides the parameter dtype (e.g. bf16 for a frozen reference model on GPU); by default it follows
    `fsdp_config.torch_dtype`. With `enable_rank0_init` off, or in a single process, every rank loads the
    checkpoint itself and shards it. With `model_config.lora.rank > 0` (and `with_lora`) LoRA adapters are injected
    before sharding and only they train (see verl.models.lora).
    """
    is_cpu = device.type == "cpu"
    dtype = dtype or param_dtype(fsdp_config)
    build = {"value_head": value_head, "dtype": dtype, "attn_implementation": attn_implementation}
    rank0_init = fsdp_config.enable_rank0_init and dist.get_world_size() > 1
    full_model = None
    if rank0_init:
        full_model = build_model(model_config, device="cpu", **build) if dist.get_rank() == 0 else None
        model = build_model(model_config, device="meta", **build)
    else:
        model = build_model(model_config, device="cpu", **build)
    if with_lora and model_config.lora.rank > 0:
        vision_language = get_vision_tower(model) is not None
        for built in (model, full_model) if full_model is not None else (model,):
            trainable = apply_lora(built, model_config.lora, vision_language, model_config.model_path)
        logger.info(
            "LoRA rank %d: %d adapter parameters train; the base is frozen.", model_config.lora.rank, trainable
        )
        if not is_cpu and fsdp_config.torch_dtype is None:  # mixed precision: the frozen base needs no fp32 copy
            store_frozen_in(model, to_torch_dtype(fsdp_config.mp_param_dtype, "mp_param_dtype"))
    if model_config.freeze_vision_tower:
        frozen = freeze_vision_tower(model)
        logger.info("Froze %d vision tower parameters.", frozen)
    if model_config.enable_gradient_checkpointing:
        enable_gradient_checkpointing(model)
    apply_fsdp2(model, mesh, fsdp_config, is_cpu)
    if dist.get_world_size() > 1:  # ranks with and without images must all run the tower's collectives
        run_vision_tower_in_every_forward(model)
    if rank0_init:
        load_rank0_weights(model, full_model, fsdp_config, device)
        del full_model
    return model


def load_rank0_weights(
    model: nn.Module, full_model: nn.Module | None, fsdp_config: FSDPConfig, device: torch.device
) -> None:
    """Fill a sharded meta-device `model` from rank 0's `full_model` (None elsewhere), onto the parameter device
    (the host with CPU offload; buffers always on `device`, where the forward uses them)."""
    param_device = torch.device("cpu") if fsdp_config.enable_cpu_offload else device
    load_weights_from_rank0(model, full_model, param_device)
    if param_device != device:  # CPU offload keeps parameters on the host, but buffers are used on the device
        for module in model.modules():
            for name, buffer in module.named_buffers(recurse=False):
                setattr(module, name, buffer.to(device))


def get_full_state_dict(model: nn.Module, rank0_only: bool = True) -> dict[str, torch.Tensor]:
    """The unsharded CPU state dict: on rank 0 only (others get {}) or, with rank0_only=False, on every rank."""
    if rank0_only:
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    state = {}
    for name, value in model.state_dict().items():
        full = value.full_tensor() if hasattr(value, "full_tensor") else value
        state[name] = full.detach().cpu()
    return state


def reshard(module: nn.Module) -> None:
    """Free the gathered parameters of every FSDP unit of `module` (left by a forward without backward, or by a pass
    that kept them gathered)."""
    for submodule in module.modules():
        if isinstance(submodule, FSDPModule):
            submodule.reshard()


def gathers_once_per_pass(fsdp_config: FSDPConfig, device_type: str) -> bool:
    """`fsdp.gather_once_per_pass` resolved for a device: unset (None) means on for the CPU only."""
    setting = fsdp_config.gather_once_per_pass
    return device_type == "cpu" if setting is None else bool(setting)


@contextlib.contextmanager
def micro_batch_pass(
    module: nn.Module, gather_once: bool, reshard_after_forward: bool
) -> Iterator[Callable[[bool], None]]:
    """One pass of micro-batches through an FSDP2 `module`: a mini-batch's gradient accumulation, or a no-grad pass.

    Yields `before_backward(is_last)`, to call before each micro-batch's backward. With `gather_once` the first
    forward all-gathers each unit and the parameters stay gathered until the pass ends; gradients accumulate
    unsharded (in the reduce dtype) and only the last micro-batch's backward reduce-scatters them. Every rank must
    run the same number of micro-batches, as FSDP needs anyway. Without `gather_once`, FSDP behaves per micro-batch
    as configured. Either way every unit is sharded again when the pass ends, and the module's `reshard_after_forward`
    (fsdp.enable_full_shard) is restored. After an error inside a gathered pass the gradients it accumulated are
    dropped (they were never reduced), so the next pass starts clean.
    """
    if not gather_once or not isinstance(module, FSDPModule):

        def before_backward(is_last: bool) -> None:
            del is_last

        try:
            yield before_backward
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
    """Clip the gradients of a sharded model to `max_norm` and return the global norm (a plain scalar tensor).

    Under FSDP2 the gradients are DTensors, so the norm is computed across shards and returned as a DTensor; it
    is materialised here so callers can test it for finiteness.
    """
    params = [param for param in model.parameters() if param.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


@torch.no_grad()
def offload_fsdp_model(model: nn.Module) -> None:
    """Move the parameter shards and buffers to CPU memory between phases; a no-op for a model already there.

    `Module.to` is what FSDP2 supports for this: its `_apply` re-registers the moved shards, so the next forward
    gathers them normally once `load_fsdp_model` has brought them back. Gradients are always freed between phases
    (the optimizer step sets them to None), so only parameters and buffers move.
    """
    if isinstance(model, FSDPModule):
        model.reshard()
    model.to("cpu")


@torch.no_grad()
def load_fsdp_model(model: nn.Module, device: torch.device) -> None:
    """Bring offloaded parameter shards and buffers back to `device`; a no-op when already there."""
    model.to(device)


@torch.no_grad()
def offload_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Move the optimizer states (Adam moments) to CPU memory; a no-op on the CPU."""
    _move_optimizer_state(optimizer, torch.device("cpu"))


@torch.no_grad()
def load_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Bring the optimizer states back to `device` before the update."""
    _move_optimizer_state(optimizer, device)


def _move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.device != device:
                state[key] = value.to(device, non_blocking=True)
