# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`micro_batch_pass` on 2 gloo ranks with the tiny Qwen2: the same gradients with one all-gather and one
reduce-scatter per FSDP unit per pass, and FSDP's own behaviour back after the pass, also after an error."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from tests.workers.fsdp_testing import accumulate_over_pass, init_rank, spawn
from verl.models.tiny_models import get_or_build_tiny_model


WORLD_SIZE = 2
MICRO_BATCHES = 3


# FSDP2 calls these torch.distributed functions: all_gather_single / reduce_scatter_single from torch 2.12, the
# *_tensor ones before.
GATHER = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
REDUCE = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"


class CollectiveCounter:
    """Counts FSDP2's all-gathers and reduce-scatters."""

    def __init__(self) -> None:
        self.counts = {GATHER: 0, REDUCE: 0}
        for name in self.counts:
            original = getattr(dist, name)

            def counted(*args, _name=name, _original=original, **kwargs):
                self.counts[_name] += 1
                return _original(*args, **kwargs)

            setattr(dist, name, counted)

    def take(self) -> tuple[int, int]:
        counts = (self.counts[GATHER], self.counts[REDUCE])
        self.counts = dict.fromkeys(self.counts, 0)
        return counts


def _micro_batches(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [torch.randint(0, 2000, (2, 12), generator=generator) for _ in range(MICRO_BATCHES)]


def _all_sharded(model) -> bool:
    return all(isinstance(param, DTensor) for param in model.parameters())


def _run(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from torch.distributed.fsdp import FSDPModule

    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model, micro_batch_pass

    model_config = ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False)
    model = create_fsdp_model(
        model_config, FSDPConfig(), build_device_mesh(world_size, -1, "cpu"), torch.device("cpu")
    )
    units = sum(isinstance(module, FSDPModule) for module in model.modules())
    counter = CollectiveCounter()
    micro_batches = _micro_batches(rank)

    per_micro_batch = accumulate_over_pass(model, micro_batches, gather_once=False)
    gathers, reductions = counter.take()
    assert reductions == MICRO_BATCHES * units, reductions
    assert gathers >= 2 * MICRO_BATCHES * (units - 1), gathers  # forward and backward of every layer unit
    once = accumulate_over_pass(model, micro_batches, gather_once=True)
    assert counter.take() == (units, units)
    assert _all_sharded(model)
    for name, grad in per_micro_batch.items():
        torch.testing.assert_close(once[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m, name=name: f"{name}: {m}")

    # A no-grad pass gathers once too, and is sharded afterwards.
    with torch.no_grad(), micro_batch_pass(model, True, reshard_after_forward=True):
        for ids in micro_batches:
            model(input_ids=ids)
    assert counter.take() == (units, 0)
    assert _all_sharded(model)

    # After the passes FSDP behaves as configured again: a forward reshards every unit, a backward reduces at once.
    model(input_ids=micro_batches[0]).logits.mean().backward()
    gathers, reductions = counter.take()
    assert reductions == units and gathers > units, (gathers, reductions)
    assert _all_sharded(model)

    # An error in the middle of a pass leaves no gathered parameters and no disabled gradient sync behind.
    with pytest.raises(RuntimeError, match="boom"):
        with micro_batch_pass(model, True, reshard_after_forward=True) as before_backward:
            before_backward(False)
            model(input_ids=micro_batches[0]).logits.mean().backward()
            raise RuntimeError("boom")
    assert _all_sharded(model)
    counter.take()
    after_error = accumulate_over_pass(model, micro_batches, gather_once=True)
    for name, grad in once.items():  # nothing of the failed pass leaks into the next one
        torch.testing.assert_close(after_error[name], grad, rtol=1e-5, atol=1e-7)
    model.zero_grad(set_to_none=True)
    counter.take()
    model(input_ids=micro_batches[0]).logits.mean().backward()
    assert counter.take()[1] == units
    dist.barrier()  # both ranks end their group together (one ending first aborted the other's exit once)
    dist.destroy_process_group()


@pytest.mark.slow
def test_gather_once_per_pass_gives_the_same_gradients_with_one_collective_per_unit(tmp_path) -> None:
    spawn(_run, WORLD_SIZE, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))


def test_gather_once_per_pass_defaults_to_the_cpu_only() -> None:
    from verl.models.config import FSDPConfig
    from verl.models.fsdp import gathers_once_per_pass

    assert gathers_once_per_pass(FSDPConfig(), "cpu")
    assert not gathers_once_per_pass(FSDPConfig(), "cuda")
    assert not gathers_once_per_pass(FSDPConfig(gather_once_per_pass=False), "cpu")
    assert gathers_once_per_pass(FSDPConfig(gather_once_per_pass=True), "cuda")
