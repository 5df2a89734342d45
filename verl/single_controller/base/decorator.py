# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`@register`: how a worker method's arguments are split across ranks and how the results come back. The driver's
WorkerGroup proxies each registered method: dispatch -> execute -> collect (plain functions, testable alone)."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

import torch

from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.utils import stall_report


REGISTER_ATTR = "__verl_register__"
"""Attribute under which `@register` stores its `RegisterSpec` on the decorated function."""

F = TypeVar("F", bound=Callable[..., Any])


class Dispatch(Enum):
    """How a call's arguments are split across ranks and the results merged.

    | mode              | what each rank receives                                    | what the caller gets            |
    | ----------------- | ---------------------------------------------------------- | ------------------------------- |
    | ONE_TO_ALL        | the same arguments                                         | list of per-rank results        |
    | DP_COMPUTE_PROTO  | a chunk of every DataProto (padded to a multiple of the    | one DataProto, padding removed  |
    |                   | world size); other arguments as-is                         |                                 |
    | DP_COMPUTE_METRIC | as DP_COMPUTE_PROTO                                        | list of per-rank results        |
    """

    ONE_TO_ALL = "one_to_all"
    DP_COMPUTE_PROTO = "dp_compute_proto"
    DP_COMPUTE_METRIC = "dp_compute_metric"


@dataclass(frozen=True)
class RegisterSpec:
    dispatch_mode: Dispatch


def register(dispatch_mode: Dispatch) -> Callable[[F], F]:
    """Mark a worker method as callable through a WorkerGroup (which waits for its result; `WorkerGroup.submit`
    returns a future instead). In the worker, DataProto arguments arrive on `self.device` and a DataProto result
    goes back on the CPU (CPU workers are called unchanged), so worker code never moves a batch and the driver never
    gets device tensors; a call that runs long is reported (`verl.utils.stall_report`)."""
    if not isinstance(dispatch_mode, Dispatch):
        raise TypeError(f"register(dispatch_mode=...) needs a Dispatch member, got {dispatch_mode!r}.")
    spec = RegisterSpec(dispatch_mode=dispatch_mode)

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            with stall_report.watched(f"{type(self).__name__}.{func.__name__}"):  # trainer.stall_report_s
                device = getattr(self, "device", None)
                if not isinstance(device, torch.device) or device.type == "cpu":
                    return func(self, *args, **kwargs)
                args = tuple(_proto_to(value, device) for value in args)
                kwargs = {key: _proto_to(value, device) for key, value in kwargs.items()}
                return _proto_to(func(self, *args, **kwargs), torch.device("cpu"))

        setattr(method, REGISTER_ATTR, spec)
        return method  # type: ignore[return-value]

    return decorator


def _proto_to(data: Any, device: torch.device) -> Any:
    """A DataProto sharing `data`'s non-tensors and meta_info, its tensors on `device` (the input is untouched);
    anything else as it is."""
    if not isinstance(data, DataProto) or data.batch is None or data.batch.device == device:
        return data
    return DataProto(batch=data.batch.to(device), non_tensor_batch=data.non_tensor_batch, meta_info=data.meta_info)


def get_register_spec(func: Any) -> RegisterSpec | None:
    """The `RegisterSpec` of a decorated function, or None for an ordinary attribute."""
    spec = getattr(func, REGISTER_ATTR, None)
    return spec if isinstance(spec, RegisterSpec) else None


def registered_methods(cls: type) -> dict[str, RegisterSpec]:
    """Every `@register` method of `cls` and its bases, by name (a subclass override wins); reads the class dicts,
    so descriptors are never evaluated."""
    methods: dict[str, RegisterSpec] = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            func = attr.__func__ if isinstance(attr, staticmethod | classmethod) else attr
            spec = get_register_spec(func)
            if spec is not None:
                methods[name] = spec
            elif name in methods:
                del methods[name]  # overridden without @register: no longer remote-callable
    return methods


# ---------------------------------------------------------------------------------------------- dispatch plans


Collect = Callable[[list[Any]], Any]


@dataclass
class DispatchPlan:
    """The arguments of one call per rank, and the function that merges the per-rank results."""

    args: list[tuple[Any, ...]]
    kwargs: list[dict[str, Any]]
    collect: Collect


def _per_rank(
    world_size: int, args: tuple, kwargs: dict, part: Callable[[Any, int], Any]
) -> tuple[list[tuple], list[dict]]:
    """Every rank's arguments: `part(value, rank)` of each of the call's arguments."""
    per_args = [tuple(part(value, rank) for value in args) for rank in range(world_size)]
    per_kwargs = [{key: part(value, rank) for key, value in kwargs.items()} for rank in range(world_size)]
    return per_args, per_kwargs


def _named(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The call's arguments with the names error messages give them."""
    return [(f"argument {i}", value) for i, value in enumerate(args)] + [(repr(k), v) for k, v in kwargs.items()]


def _dispatch_one_to_all(world_size: int, args: tuple, kwargs: dict) -> DispatchPlan:
    return DispatchPlan([args] * world_size, [kwargs] * world_size, list)


def _split_protos(world_size: int, args: tuple, kwargs: dict) -> tuple[list[tuple], list[dict], int, int]:
    """Pad every DataProto argument to a multiple of world_size (repeating rows from the start, so workers see valid
    rows) and chunk it; other arguments are broadcast. Returns per-rank arguments, padding rows, padded length."""
    protos = [(name, value) for name, value in _named(args, kwargs) if isinstance(value, DataProto)]
    lengths = {len(value) for _, value in protos}
    if len(lengths) > 1:
        described = ", ".join(f"{name} has {len(value)} rows" for name, value in protos)
        raise ValueError(
            f"Data-parallel dispatch needs all DataProto arguments to have the same number of rows, but {described}."
        )
    length = lengths.pop() if lengths else 0
    pad_size = -length % world_size

    def split(value: Any) -> list[Any]:
        if not isinstance(value, DataProto):
            return [value] * world_size
        return pad_dataproto_to_divisor(value, world_size)[0].chunk(world_size)

    split_args = tuple(split(value) for value in args)
    split_kwargs = {key: split(value) for key, value in kwargs.items()}
    per_args, per_kwargs = _per_rank(world_size, split_args, split_kwargs, lambda chunks, rank: chunks[rank])
    return per_args, per_kwargs, pad_size, length + pad_size


def _concat_and_unpad(outputs: list[Any], pad_size: int, padded_length: int) -> DataProto | None:
    """Concatenate the per-rank DataProtos in rank order and drop the rows computed for padding: with k rows returned
    per input row (k samples per prompt, interleaved), the last k * pad_size. Results without rows need no unpadding.
    """
    if all(output is None for output in outputs):
        return None
    for rank, output in enumerate(outputs):
        if not isinstance(output, DataProto):
            raise TypeError(
                f"Dispatch.DP_COMPUTE_PROTO collects DataProtos, but rank {rank} returned a "
                f"{type(output).__name__}; return a DataProto, or use Dispatch.DP_COMPUTE_METRIC for other results."
            )
    merged = DataProto.concat(outputs)
    if pad_size == 0 or len(merged) == 0:
        return merged
    if len(merged) % padded_length != 0:
        raise ValueError(
            f"Cannot drop the {pad_size} padding rows: the workers got {padded_length} rows (padded) but returned "
            f"{len(merged)}, not a multiple of it; send a batch whose size divides the world size instead."
        )
    return unpad_dataproto(merged, pad_size * (len(merged) // padded_length))


def _dispatch_dp_compute_proto(world_size: int, args: tuple, kwargs: dict, merge: bool = True) -> DispatchPlan:
    """DataProto chunks per rank; the results merged into one DataProto, or with merge=False a per-rank list."""
    per_args, per_kwargs, pad_size, padded_length = _split_protos(world_size, args, kwargs)
    collect = (lambda outputs: _concat_and_unpad(outputs, pad_size, padded_length)) if merge else list
    return DispatchPlan(per_args, per_kwargs, collect)


_DISPATCH_FNS: dict[Dispatch, Callable[[int, tuple, dict], DispatchPlan]] = {
    Dispatch.ONE_TO_ALL: _dispatch_one_to_all,
    Dispatch.DP_COMPUTE_PROTO: _dispatch_dp_compute_proto,
    Dispatch.DP_COMPUTE_METRIC: functools.partial(_dispatch_dp_compute_proto, merge=False),
}


def plan_dispatch(dispatch_mode: Dispatch, world_size: int, args: tuple, kwargs: dict) -> DispatchPlan:
    """Split one call's arguments into per-rank calls according to `dispatch_mode`."""
    if world_size <= 0:
        raise ValueError(f"Cannot dispatch to a worker group of world size {world_size}; it needs at least 1 rank.")
    return _DISPATCH_FNS[dispatch_mode](world_size, tuple(args), dict(kwargs))
