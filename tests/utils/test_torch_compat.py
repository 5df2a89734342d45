# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch internals that verl.utils.torch_compat uses still exist and still do what the trainer needs.

One process, a world of one over gloo: FSDP2 keeps the same per-parameter state as on many ranks."""

import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from verl.utils.torch_compat import drop_unreduced_grads, reset_iteration


@pytest.fixture
def sharded_model():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
        mesh = init_device_mesh("cpu", (1,))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        yield model
    finally:
        dist.destroy_process_group()


def _grads(model: nn.Module, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(inputs).sum().backward()
    return {name: param.grad.full_tensor().clone() for name, param in model.named_parameters()}


def test_drop_unreduced_grads_forgets_an_aborted_accumulation(sharded_model):
    inputs = torch.randn(4, 8)
    clean = _grads(sharded_model, inputs)
    sharded_model.set_requires_gradient_sync(False)  # accumulate unsharded, as a gradient-accumulation pass does
    sharded_model(inputs * 3).sum().backward()
    accumulated = [  # in the reduce dtype when it differs from the parameters', else on the unsharded parameter
        fsdp_param.unsharded_accumulated_grad
        if fsdp_param.unsharded_accumulated_grad is not None
        else fsdp_param._unsharded_param.grad
        for module in sharded_model.modules()
        if isinstance(module, FSDPModule)
        for group in module._get_fsdp_state()._fsdp_param_groups
        for fsdp_param in group.fsdp_params
    ]
    assert len(accumulated) == 4 and all(grad is not None for grad in accumulated)
    reset_iteration(sharded_model)
    assert drop_unreduced_grads(sharded_model) == 4
    sharded_model.set_requires_gradient_sync(True)
    after = _grads(sharded_model, inputs)  # nothing of the aborted pass is added into this reduction
    for name, grad in clean.items():
        torch.testing.assert_close(after[name], grad)


def test_without_the_drop_the_aborted_pass_leaks(sharded_model):
    """The reason for the internal access: without it, the next reduction adds the aborted pass's gradients."""
    inputs = torch.randn(4, 8)
    clean = _grads(sharded_model, inputs)
    sharded_model.set_requires_gradient_sync(False)
    sharded_model(inputs * 3).sum().backward()
    reset_iteration(sharded_model)
    sharded_model.set_requires_gradient_sync(True)
    after = _grads(sharded_model, inputs)
    assert any(not torch.allclose(after[name], grad) for name, grad in clean.items())
