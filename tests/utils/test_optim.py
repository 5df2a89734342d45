# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import copy
import math

import pytest
import torch

from verl.utils.optim import BF16AdamW, OptimConfig, build_lr_scheduler, build_optimizer, reset_optimizer_state


def lrs(config: OptimConfig, steps: int) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=config.lr)
    scheduler = build_lr_scheduler(optimizer, config)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def test_constant_schedule_with_warmup_steps():
    assert lrs(OptimConfig(lr=1.0, lr_warmup_steps=4), 6) == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_warmup_ratio_and_cosine_to_min_lr():
    config = OptimConfig(lr=1.0, lr_warmup_ratio=0.2, training_steps=10, lr_scheduler_type="cosine", min_lr_ratio=0.1)
    out = lrs(config, 12)
    assert out[:2] == [0.5, 1.0]  # 2 warmup steps
    assert out[2] == pytest.approx(1.0)
    halfway = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 8))
    assert out[6] == pytest.approx(halfway)
    assert out[10:] == pytest.approx([0.1, 0.1])  # stays at the floor after training_steps
    assert all(a >= b for a, b in zip(out[1:], out[2:]))


def test_linear_decay_after_warmup_to_min_lr():
    """Hugging Face's and TRL's default: warmup, then a straight line to min_lr_ratio at training_steps."""
    config = OptimConfig(lr=1.0, lr_warmup_steps=2, training_steps=10, lr_scheduler_type="linear", min_lr_ratio=0.2)
    out = lrs(config, 12)
    assert out[:2] == [0.5, 1.0]
    assert out[2:11] == pytest.approx([0.2 + 0.8 * (1 - k / 8) for k in range(9)])
    assert out[11] == pytest.approx(0.2)
    assert lrs(OptimConfig(lr=1.0, training_steps=4, lr_scheduler_type="linear"), 5) == pytest.approx(
        [1.0, 0.75, 0.5, 0.25, 0.0]
    )


def test_schedule_errors_name_the_key():
    with pytest.raises(ValueError, match="training_steps"):
        lrs(OptimConfig(lr_scheduler_type="cosine"), 1)
    with pytest.raises(ValueError, match="training_steps"):
        lrs(OptimConfig(lr_scheduler_type="linear"), 1)
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        lrs(OptimConfig(lr_scheduler_type="polynomial"), 1)
    with pytest.raises(ValueError, match="min_lr_ratio"):
        lrs(OptimConfig(lr_scheduler_type="cosine", training_steps=5, min_lr_ratio=2.0), 1)


def test_scheduler_state_round_trip_restores_schedule():
    config = OptimConfig(lr=1.0, lr_warmup_steps=2, training_steps=10, lr_scheduler_type="cosine")
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = build_lr_scheduler(optimizer, config)
    for _ in range(5):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    fresh_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    fresh = build_lr_scheduler(fresh_optimizer, OptimConfig(lr=1.0, lr_warmup_steps=0, lr_scheduler_type="constant"))
    fresh.load_state_dict(state)
    fresh_optimizer.step()
    scheduler.step()
    fresh.step()
    assert fresh.get_last_lr() == scheduler.get_last_lr() and fresh.get_last_lr()[0] < 1.0


def test_build_optimizer_skips_frozen_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    model[0].requires_grad_(False)
    optimizer = build_optimizer(model, OptimConfig(lr=1e-3, betas=[0.8, 0.9], weight_decay=0.0))
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [p.shape for p in optimizer.param_groups[0]["params"]] == [(1, 3), (1,)]
    assert optimizer.param_groups[0]["betas"] == (0.8, 0.9)
    assert isinstance(build_optimizer(model, OptimConfig(strategy="adamw_bf16")), BF16AdamW)
    with pytest.raises(ValueError, match="optim.strategy"):
        build_optimizer(model, OptimConfig(strategy="sgd"))
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer(model, OptimConfig())


def test_adamw_on_the_cpu_is_fused_and_steps_like_the_default():
    """On the CPU build_optimizer uses torch's fused AdamW kernel; it moves the weights as the per-parameter loop."""
    torch.manual_seed(0)
    start = [torch.randn(6, 5), torch.randn(5)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    reference = [torch.nn.Parameter(t.clone()) for t in start]
    module = torch.nn.Module()
    module.weight, module.bias = ours
    optimizer = build_optimizer(module, OptimConfig(lr=1e-2, betas=[0.9, 0.99], weight_decay=0.1))
    assert optimizer.param_groups[0]["fused"] is True
    default = torch.optim.AdamW(reference, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    assert not default.param_groups[0]["fused"]
    for step in range(5):
        generator = torch.Generator().manual_seed(step)
        grads = [torch.randn(t.shape, generator=generator) for t in start]
        for param, ref, grad in zip(ours, reference, grads):
            param.grad, ref.grad = grad.clone(), grad.clone()
        optimizer.step()
        default.step()
    for param, ref, initial in zip(ours, reference, start):
        torch.testing.assert_close(param, ref, rtol=1e-6, atol=1e-7)
        assert (param - initial).abs().min() > 1e-3  # every weight moved


def test_bf16_adamw_on_fp32_weights_keeps_bf16_moments_and_steps_as_adamw():
    """optim.strategy=adamw_bf16 with fp32 weights (fsdp.torch_dtype unset) kept fp32 moments and a compensation
    buffer: 50% more optimizer memory than AdamW, where its docstring promised bf16 states. The moments are bf16 now
    (also after a checkpoint's state dict, which torch loads in the weights' dtype), with no compensation."""
    torch.manual_seed(0)
    start = torch.randn(4, 5)
    ours, reference = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    opt_ours = BF16AdamW([ours], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    opt_ref = torch.optim.AdamW([reference], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    for step in range(6):
        if step == 3:  # as a resume: a new optimizer loads the saved state
            saved = opt_ours.state_dict()
            opt_ours = BF16AdamW([ours], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
            opt_ours.load_state_dict(saved)
            assert opt_ours.state[ours]["exp_avg"].dtype == torch.float32  # torch's cast to the weights' dtype
        grad = torch.randn(4, 5, generator=torch.Generator().manual_seed(step))
        ours.grad, reference.grad = grad.clone(), grad.clone()
        opt_ours.step()
        opt_ref.step()
        state = opt_ours.state[ours]
        assert sorted(state) == ["exp_avg", "exp_avg_sq", "step"]
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16 and ours.dtype == torch.float32
    moved = (reference - start).abs()
    assert moved.min() > 1e-2
    torch.testing.assert_close(ours, reference, rtol=0, atol=0.01 * moved.max().item())  # bf16 moments: ~0.4%


def test_bf16_adamw_accumulates_updates_below_bf16_resolution():
    # bf16 has 8 mantissa bits: 1 + 1e-3 rounds back to 1, so a naive bf16 update would never move the weight.
    param = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16))
    optimizer = BF16AdamW([param], lr=1e-3, weight_decay=0.0)
    for _ in range(100):
        param.grad = -torch.ones(8, dtype=torch.bfloat16)  # Adam step size ~ lr each step
        optimizer.step()
    assert optimizer.state[param]["exp_avg"].dtype == torch.bfloat16
    assert param.float().mean().item() == pytest.approx(1.1, abs=0.01)


@pytest.mark.parametrize("strategy", ["adamw", "adamw_bf16"])
def test_a_reset_optimizer_steps_like_a_new_one_and_saves_its_restarted_state(strategy):
    """algorithm.ref_sync_reset_optimizer (ProRL): after three steps and a reset, the next step moves the weights as a
    new optimizer's first step from the same weights would; the state dict holds zeros, and restores to the same."""
    dtype = torch.bfloat16 if strategy == "adamw_bf16" else torch.float32
    config = OptimConfig(lr=0.1, weight_decay=0.01, strategy=strategy)
    torch.manual_seed(0)
    grads = [torch.randn(4, 3).to(dtype) for _ in range(4)]

    def step(optimizer, param, grad):
        param.grad = grad.clone()
        optimizer.step()

    used = torch.nn.Linear(3, 4, bias=False).to(dtype)
    optimizer = build_optimizer(used, config)
    for grad in grads[:3]:
        step(optimizer, used.weight, grad)
    reset_optimizer_state(optimizer)
    assert all(not value.any() for state in optimizer.state.values() for value in state.values())
    saved = copy.deepcopy(optimizer.state_dict())  # (its tensors are the optimizer's own)
    fresh = torch.nn.Linear(3, 4, bias=False).to(dtype)
    fresh.weight.data.copy_(used.weight.data)
    new_optimizer = build_optimizer(fresh, config)
    step(optimizer, used.weight, grads[3])
    step(new_optimizer, fresh.weight, grads[3])
    torch.testing.assert_close(used.weight, fresh.weight, rtol=0, atol=0)
    restored = torch.nn.Linear(3, 4, bias=False).to(dtype)
    restored_optimizer = build_optimizer(restored, config)
    step(restored_optimizer, restored.weight, grads[0])  # a state to overwrite, as when a checkpoint loads
    restored_optimizer.load_state_dict(saved)
    assert all(not value.any() for state in restored_optimizer.state.values() for value in state.values())
