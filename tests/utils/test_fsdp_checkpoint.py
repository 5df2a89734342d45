# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""FSDP2 checkpoints: a bitwise round trip on 2 gloo ranks, then resharding 2 -> 1 and training on.

Rank processes come from the tests' rank pool (tests/workers/fsdp_testing.spawn); the training step is a plain
next-token loss, so this test depends only on the model, optimizer, schedule and checkpoint code.
"""

import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from tests.workers.fsdp_testing import spawn
from verl.models.tiny_models import get_or_build_tiny_model


pytestmark = pytest.mark.slow

SEQ_LEN = 16
ROWS_PER_RANK = 2


def _init(rank: int, world_size: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    from verl.utils import device

    device.set_device_type("cpu")
    device.init_distributed(timeout_seconds=120)


def _build(model_dir: str, torch_dtype: str | None = None, **optim: float | str):
    """Sharded model, AdamW and a warmup + cosine schedule, as a worker builds them (`optim`: other settings;
    `torch_dtype`: fsdp.torch_dtype, the weights' dtype)."""
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.utils.optim import OptimConfig, build_lr_scheduler, build_optimizer

    world_size = dist.get_world_size()
    mesh = build_device_mesh(world_size, -1, "cpu")
    fsdp = FSDPConfig(torch_dtype=torch_dtype)
    model = create_fsdp_model(ModelConfig(model_path=model_dir), fsdp, mesh, torch.device("cpu"))
    optim_config = OptimConfig(
        **{"lr": 1e-3, "lr_scheduler_type": "cosine", "lr_warmup_steps": 2, "training_steps": 10, **optim}
    )
    optimizer = build_optimizer(model, optim_config)
    return model, optimizer, build_lr_scheduler(optimizer, optim_config)


def _batch(ranks: list[int]) -> torch.Tensor:
    """Token ids of the given ranks' shares of the global batch (the 1-rank run takes both shares)."""
    return torch.cat(
        [
            torch.randint(0, 2000, (ROWS_PER_RANK, SEQ_LEN), generator=torch.Generator().manual_seed(100 + r))
            for r in ranks
        ]
    )


def _train_step(model, optimizer, scheduler, input_ids: torch.Tensor) -> float:  # noqa: ANN001
    """Next-token loss; every rank has the same number of tokens, so FSDP's gradient mean is the global mean."""
    logits = model(input_ids=input_ids, use_cache=False).logits
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss.item()


def _full_params(model) -> dict[str, torch.Tensor]:  # noqa: ANN001
    from verl.models.fsdp import get_full_state_dict

    return get_full_state_dict(model, rank0_only=False)


def _local_optimizer_state(optimizer) -> list[torch.Tensor]:  # noqa: ANN001
    tensors = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key in ("step", "exp_avg", "exp_avg_sq"):
                value = optimizer.state[param][key]
                tensors.append((value.to_local() if hasattr(value, "to_local") else value).clone())
    return tensors


def _run_two_ranks(rank: int, world_size: int, port: int, model_dir: str, ckpt_root: str) -> None:
    _init(rank, world_size, port)
    from verl.data.tokenizer import get_tokenizer
    from verl.utils.checkpoint import HF_SUBDIR, FSDPCheckpointManager

    ckpt = os.path.join(ckpt_root, "global_step_2", "actor")
    data = _batch([rank])
    model, optimizer, scheduler = _build(model_dir)
    for _ in range(2):
        _train_step(model, optimizer, scheduler, data)
    manager = FSDPCheckpointManager(model, optimizer, scheduler, tokenizer=get_tokenizer(model_dir))
    manager.save(ckpt, extra_state={"global_step": 2, "note": "two ranks"})
    manager.save(ckpt, extra_state={"global_step": 2, "note": "two ranks"})  # overwriting is atomic too
    assert sorted(os.listdir(os.path.dirname(ckpt))) == ["actor"], "no .tmp/.old directories may remain"
    assert os.path.isfile(os.path.join(ckpt, HF_SUBDIR, "config.json"))
    assert os.path.isfile(os.path.join(ckpt, HF_SUBDIR, "tokenizer_config.json"))
    saved_params, saved_optim = _full_params(model), _local_optimizer_state(optimizer)
    saved_lr, random_after_save = scheduler.get_last_lr(), torch.rand(4)
    if rank == 0:
        torch.save(saved_params, os.path.join(ckpt_root, "saved_params.pt"))
    _train_step(model, optimizer, scheduler, data)
    continued = _full_params(model)
    if rank == 0:
        torch.save(continued, os.path.join(ckpt_root, "continued_params.pt"))

    # Round trip in the same world: a fresh model, optimizer and schedule come back bit for bit.
    fresh_model, fresh_optimizer, fresh_scheduler = _build(model_dir)
    extra = FSDPCheckpointManager(fresh_model, fresh_optimizer, fresh_scheduler).load(ckpt)
    assert extra == {"global_step": 2, "note": "two ranks"}
    assert torch.equal(torch.rand(4), random_after_save), "RNG state not restored"
    loaded = _full_params(fresh_model)
    assert all(torch.equal(loaded[name], saved_params[name]) for name in saved_params)
    assert all(torch.equal(a, b) for a, b in zip(_local_optimizer_state(fresh_optimizer), saved_optim))
    assert fresh_scheduler.get_last_lr() == saved_lr and fresh_scheduler.last_epoch == 2
    _train_step(fresh_model, fresh_optimizer, fresh_scheduler, data)
    resumed = _full_params(fresh_model)
    assert all(torch.equal(resumed[name], continued[name]) for name in continued), "resumed training diverged"

    # A weights-only checkpoint restores the weights but refuses to resume an optimizer.
    weights = os.path.join(ckpt_root, "weights_only")
    manager.save(weights, save_model_only=True)
    other_model, other_optimizer, _ = _build(model_dir)
    with pytest.raises(ValueError, match="save_model_only"):
        FSDPCheckpointManager(other_model, other_optimizer).load(weights)
    assert FSDPCheckpointManager(other_model, other_optimizer).load(weights, model_only=True) == {}
    assert all(torch.equal(value, continued[name]) for name, value in _full_params(other_model).items())
    dist.destroy_process_group()


def _run_one_rank(rank: int, world_size: int, port: int, model_dir: str, ckpt_root: str) -> None:
    _init(rank, world_size, port)
    from verl.utils.checkpoint import FSDPCheckpointManager

    model, optimizer, scheduler = _build(model_dir)
    extra = FSDPCheckpointManager(model, optimizer, scheduler).load(os.path.join(ckpt_root, "global_step_2", "actor"))
    assert extra["global_step"] == 2
    saved = torch.load(os.path.join(ckpt_root, "saved_params.pt"))
    loaded = _full_params(model)
    assert all(torch.equal(loaded[name], saved[name]) for name in saved), "2 -> 1 resharding changed the weights"
    assert scheduler.last_epoch == 2 and all(int(optimizer.state[p]["step"]) == 2 for p in optimizer.state)

    # One more step on the whole global batch reproduces the 2-rank step (same math, other summation order).
    loss = _train_step(model, optimizer, scheduler, _batch([0, 1]))
    assert math.isfinite(loss) and loss > 0
    continued = torch.load(os.path.join(ckpt_root, "continued_params.pt"))
    for name, value in _full_params(model).items():
        torch.testing.assert_close(value, continued[name], rtol=1e-4, atol=1e-6, msg=name)
        assert not torch.equal(value, saved[name]), f"{name} did not train"

    # A run resumed with more steps, another lr and weight decay follows its config from the saved step on.
    model, optimizer, scheduler = _build(model_dir, training_steps=20, lr=2e-3, weight_decay=0.5)
    FSDPCheckpointManager(model, optimizer, scheduler).load(os.path.join(ckpt_root, "global_step_2", "actor"))
    expected = 2e-3 * 0.5 * (1 + math.cos(math.pi * 0 / 18))  # cosine after 2 warmup steps, at step 2 of 20
    assert scheduler.last_epoch == 2 and scheduler.get_last_lr() == pytest.approx([expected])
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([expected])
    assert all(group["weight_decay"] == 0.5 for group in optimizer.param_groups)
    assert all(int(optimizer.state[p]["step"]) == 2 for p in optimizer.state)  # the moments are the checkpoint's
    _train_step(model, optimizer, scheduler, _batch([0, 1]))
    lr_at_3 = 2e-3 * 0.5 * (1 + math.cos(math.pi * 1 / 18))
    assert scheduler.get_last_lr() == pytest.approx([lr_at_3])  # not the saved 10-step schedule's

    # A parameter no step gave a gradient (a vision tower on text data) has no optimizer state in the checkpoint:
    # its resume failed ("Missing key in checkpoint state_dict: optimizer.state.<name>.step").
    model, optimizer, scheduler = _build(model_dir)
    idle = dict(model.named_parameters())["model.layers.0.mlp.down_proj.weight"]
    idle.requires_grad_(False)
    _train_step(model, optimizer, scheduler, _batch([0, 1]))
    assert idle not in optimizer.state
    path = os.path.join(ckpt_root, "idle", "actor")
    FSDPCheckpointManager(model, optimizer, scheduler).save(path)
    fresh_model, fresh_optimizer, fresh_scheduler = _build(model_dir)
    FSDPCheckpointManager(fresh_model, fresh_optimizer, fresh_scheduler).load(path)
    dict(fresh_model.named_parameters())["model.layers.0.mlp.down_proj.weight"].requires_grad_(False)
    for step in (model, optimizer, scheduler), (fresh_model, fresh_optimizer, fresh_scheduler):
        _train_step(*step, _batch([0, 1]))
    resumed, continued = _full_params(fresh_model), _full_params(model)
    assert all(torch.equal(resumed[name], continued[name]) for name in continued), "resumed training diverged"
    dist.destroy_process_group()


def _resume_with_another_optimizer(rank: int, world_size: int, port: int, model_dir: str, ckpt_root: str) -> None:
    """fp32 weights with AdamW saved, bf16 weights with BF16AdamW resumed (the memory saving of EasyR1's pairing),
    and back: the resume failed in DCP ("Missing key in checkpoint state_dict: optimizer.state.<name>.compensation",
    or "...param_groups.0.amsgrad" the other way), inside every worker."""
    import logging

    _init(rank, world_size, port)
    from verl.utils.checkpoint import FSDPCheckpointManager

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("verl.utils.checkpoint.fsdp_checkpoint_manager").addHandler(handler)
    fp32, bf16 = {"strategy": "adamw"}, {"strategy": "adamw_bf16", "torch_dtype": "bf16"}
    for number, (saved, resumed) in enumerate(((fp32, bf16), (bf16, fp32))):
        model, optimizer, scheduler = _build(model_dir, **saved)
        _train_step(model, optimizer, scheduler, _batch([0]))
        path = os.path.join(ckpt_root, f"switched_{number}", "actor")
        FSDPCheckpointManager(model, optimizer, scheduler).save(path)
        moments = [value.float() for value in _local_optimizer_state(optimizer)]
        records.clear()
        model, optimizer, scheduler = _build(model_dir, **resumed)
        FSDPCheckpointManager(model, optimizer, scheduler).load(path)
        # the step counts and moments are the checkpoint's, in the dtype this optimizer keeps them in
        for loaded, before in zip(_local_optimizer_state(optimizer), moments, strict=True):
            torch.testing.assert_close(loaded.float(), before, rtol=1e-2, atol=1e-6)
        assert scheduler.last_epoch == 1
        told = " ".join(record.getMessage() for record in records if record.levelno == logging.WARNING)
        if resumed is bf16:  # the bf16 weights' rounding compensation starts at zero, as in a new run
            assert "saved by another optimizer" in told and "'compensation'" in told, told
            assert all(not state["compensation"].any() for state in optimizer.state.values())
        else:
            assert told == ""  # the other optimizer's settings are this run's config's either way
        before_step = {name: value.clone() for name, value in _full_params(model).items()}
        assert math.isfinite(_train_step(model, optimizer, scheduler, _batch([0])))
        assert any(not torch.equal(value, before_step[name]) for name, value in _full_params(model).items())
    dist.destroy_process_group()


def test_a_resume_with_another_optimizer_or_weight_dtype_keeps_the_moments(tmp_path) -> None:
    spawn(_resume_with_another_optimizer, 1, get_or_build_tiny_model("qwen2", str(tmp_path / "models")), str(tmp_path))


def test_checkpoint_round_trip_and_reshard_two_to_one(tmp_path) -> None:
    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    ckpt_root = str(tmp_path / "checkpoints")
    spawn(_run_two_ranks, 2, model_dir, ckpt_root)
    spawn(_run_one_rank, 1, model_dir, ckpt_root)
