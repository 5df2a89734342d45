# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The FSDP2 actor on 2 gloo ranks against a single-process Hugging Face forward, on the tiny text and VL models.

The fast tests run the actor in this process on a plain (unsharded) model. Each slow test spawns one 2-rank run that checks several things, since process start-up dominates the cost:
log-probs of every batching mode equal the plain forward; gradients of every mode equal the gradient of the
full-batch loss in one process (which checks the global token normalisation across micro-batches and ranks); a few
updates lower the loss and keep replicas identical; a non-finite gradient skips the step; a frozen vision tower
stays put.
"""

import dataclasses

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import grad_atol, init_rank, make_text_batch, make_vl_batch, reference_outputs, spawn
from verl.algorithms.core_algos import compute_entropy_loss, compute_kl_loss, compute_policy_loss, high_entropy_mask
from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto


WORLD_SIZE = 2
TEMPERATURE = 0.7
MODES = {  # name: (padding_free, dynamic_batching)
    "padded": (False, False),
    "padding_free": (True, False),
    "dynamic": (True, True),
    "padded_dynamic": (False, True),
}


class RecordingSGD(torch.optim.SGD):
    """SGD with lr=0 that keeps the full gradients it was asked to apply, so tests can compare them."""

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim.Optimizer.step signature
        self.grads = {}
        for name, param in self.named:
            grad = param.grad
            self.grads[name] = (
                None if grad is None else (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).clone()
            )
        return super().step(closure)


def recording_optimizer(model: torch.nn.Module) -> RecordingSGD:
    named = [(name, param) for name, param in model.named_parameters() if param.requires_grad]
    optimizer = RecordingSGD([param for _, param in named], lr=0.0)
    optimizer.named = named
    return optimizer


def actor_config(padding_free: bool, dynamic: bool, **overrides):
    from verl.workers.actor.config import ActorConfig

    base = ActorConfig(
        global_batch_size=8,
        micro_batch_size_per_device_for_update=2,
        micro_batch_size_per_device_for_experience=2,
        padding_free=padding_free,
        dynamic_batching=dynamic,
        max_grad_norm=1e6,
        entropy_coeff=0.01,
        use_kl_loss=True,
        kl_coef=0.1,
        kl_penalty="low_var_kl",
    )
    return dataclasses.replace(base, **overrides)


def reference_grads(model: torch.nn.Module, full, config) -> dict[str, torch.Tensor]:
    """Gradient of the whole global batch's loss, computed by one plain process with no micro-batching."""
    model.zero_grad(set_to_none=True)
    out = reference_outputs(model, full, TEMPERATURE)
    batch = full.batch
    mask = batch["response_mask"]
    pg_loss, _ = compute_policy_loss(
        batch["old_log_probs"],
        out["log_probs"],
        batch["advantages"],
        mask,
        config.loss_type,
        config.clip_ratio_low,
        config.clip_ratio_high,
        config.clip_ratio_dual,
        config.loss_avg_mode,
        max_response_length=mask.shape[-1],
        token_weights=high_entropy_mask(out["entropy"], mask, config.top_entropy_quantile),
    )
    entropy = compute_entropy_loss(out["entropy"], mask, config.loss_avg_mode, max_response_length=mask.shape[-1])
    loss = pg_loss - config.entropy_coeff * entropy
    if config.use_kl_loss:
        kl_args = (batch["ref_log_probs"], mask, config.kl_penalty, config.loss_avg_mode, None, None, mask.shape[-1])
        loss = loss + config.kl_coef * compute_kl_loss(out["log_probs"], *kl_args)
    loss.backward()
    return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}


HYBRID_ATOL = 5e-5
"""Log-prob tolerance of the Gated DeltaNet models: the reference's chunked recurrence cuts each row at other places
than a padded or packed micro-batch does, so fp32 sums run in another order (measured 2.3e-5 and 2.8e-5 with two key
and four value heads; 6e-6 with one and two)."""


def check_log_probs(model, local, reference, modes=MODES, atol=1e-5) -> dict[str, torch.Tensor]:
    """Every batching mode gives the plain forward's log-probs and entropy (max abs diff <= `atol`)."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    results = {}
    for name, (padding_free, dynamic) in modes.items():
        actor = DataParallelPPOActor(actor_config(padding_free, dynamic), model)
        assert actor.padding_free == padding_free
        log_probs, entropy = actor.compute_log_probs(local, TEMPERATURE, calculate_entropy=True)
        diff = (log_probs - reference["log_probs"]).abs().max().item()
        assert diff <= atol, f"{name}: log-probs differ from the HF forward by {diff}"
        assert (entropy - reference["entropy"]).abs().max().item() <= 1e-4, name
        assert torch.equal(log_probs == 0, local.batch["response_mask"] == 0), f"{name}: padding must be exactly 0"
        results[name] = log_probs
    return results


def check_gradients(
    model,
    local,
    full,
    ref_model,
    modes=MODES,
    loss_avg_modes=("token-mean",),
    summed_scalars: tuple[str, ...] = (),
    **overrides,
) -> None:
    """Every batching mode accumulates the gradient of the full batch's loss computed in one process, with the
    parameters gathered once per mini-batch (the CPU default) and, for the first mode, re-gathered per micro-batch.

    Parameters whose names end with one of `summed_scalars` get 100x the absolute tolerance: per-head scalars whose
    gradient sums cancelling contributions of every token (a Gated DeltaNet layer's A_log and dt_bias), so fp32
    noise is large against the sum; on the tiny Qwen3.5 the padded path's own error reaches 0.75 of the usual bound."""
    from verl.models.config import FSDPConfig
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    first = next(iter(modes))
    runs = [(name, mode, True) for name, mode in modes.items()] + [(f"{first}/per_micro_batch", modes[first], False)]
    for loss_avg_mode in loss_avg_modes:
        expected = reference_grads(
            ref_model, full, actor_config(False, False, loss_avg_mode=loss_avg_mode, **overrides)
        )
        for name, (padding_free, dynamic), gather_once in runs:
            optimizer = recording_optimizer(model)
            config = actor_config(
                padding_free,
                dynamic,
                loss_avg_mode=loss_avg_mode,
                fsdp=FSDPConfig(gather_once_per_pass=gather_once),
                **overrides,
            )
            actor = DataParallelPPOActor(config, model, optimizer, rollout_n=1)
            metrics = actor.update_policy(local, TEMPERATURE)
            assert np.isfinite(metrics["actor/grad_norm"]) and metrics["actor/kl_loss"] > 0
            assert metrics["actor/pg_clipfrac"] > 0
            got = {key: value for key, value in optimizer.grads.items() if value is not None}
            assert set(got) == set(expected), set(got) ^ set(expected)
            for key, grad in got.items():
                # fp32 noise: packed attention sums in another order (~1e-6 of the gradient's scale)
                atol = grad_atol(expected, key)
                atol *= 100 if key.endswith(summed_scalars) else 1
                label = f"{name}/{loss_avg_mode} {key}"
                torch.testing.assert_close(
                    grad, expected[key], rtol=1e-4, atol=atol, msg=lambda m, label=label: f"{label}: {m}"
                )


def check_updates(model_config, local, rank: int, fsdp_size: int) -> None:
    """A few AdamW updates on a fixed on-policy batch lower the loss; replicas stay bitwise identical."""
    from verl.models.config import FSDPConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    fsdp_config = FSDPConfig(fsdp_size=fsdp_size)
    mesh = build_device_mesh(WORLD_SIZE, fsdp_size, "cpu")
    model = create_fsdp_model(model_config, fsdp_config, mesh, torch.device("cpu"))
    optimizer = build_optimizer(model, OptimConfig(lr=2e-5, weight_decay=0.0))
    actor = DataParallelPPOActor(actor_config(True, True, entropy_coeff=0.0, use_kl_loss=False), model, optimizer)
    local.batch["old_log_probs"] = actor.compute_log_probs(local, TEMPERATURE)
    losses = [actor.update_policy(local, TEMPERATURE)["actor/pg_loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 1e-3, losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses

    local_params = torch.cat([param.to_local().detach().reshape(-1) for param in model.parameters()])
    gathered = [torch.empty_like(local_params) for _ in range(WORLD_SIZE)]
    dist.all_gather(gathered, local_params)
    if fsdp_size == 1:  # HSDP with shard groups of 1: every rank holds a full replica
        assert torch.equal(gathered[0], gathered[1]), "replicas diverged"
    full = torch.cat([param.full_tensor().reshape(-1) for param in model.parameters()])
    checksums = [torch.empty(2, dtype=torch.float64) for _ in range(WORLD_SIZE)]
    dist.all_gather(checksums, torch.stack([full.double().sum(), full.double().square().sum()]))
    assert torch.equal(checksums[0], checksums[1])

    # A non-finite gradient norm skips the step and leaves the weights untouched.
    before = [param.detach().clone() for param in model.parameters()]
    poisoned = local[np.arange(len(local))]
    poisoned.batch["advantages"][0, 0] = float("nan")
    metrics = actor.update_policy(poisoned, TEMPERATURE)
    assert not np.isfinite(metrics["actor/grad_norm"])
    assert all(torch.equal(a.to_local(), b.to_local()) for a, b in zip(before, model.parameters()))


def _run_text_actor(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.loading import build_model

    model_config = ModelConfig(model_path=model_dir)
    model = create_fsdp_model(
        model_config, FSDPConfig(), build_device_mesh(world_size, -1, "cpu"), torch.device("cpu")
    )
    ref_model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False))
    full = make_text_batch(seed=0, batch_size=8)
    local = full.chunk(world_size)[rank]
    with torch.no_grad():
        reference = reference_outputs(ref_model, local, TEMPERATURE)
    log_probs = check_log_probs(model, local, reference)

    # Old log-probs a little off-policy on both sides, so both clip bounds are active somewhere.
    noise = 0.3 * torch.randn(full.batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))
    full_log_probs = torch.cat([torch.zeros_like(log_probs["padded"])] * world_size)
    full_log_probs[rank * len(local) : (rank + 1) * len(local)] = log_probs["padded"]
    dist.all_reduce(full_log_probs)
    full.batch["old_log_probs"] = (full_log_probs + noise) * full.batch["response_mask"]
    local = full.chunk(world_size)[rank]  # a fresh view: the old one still holds the replaced column
    # every built-in aggregation: its normalisers count the whole mini-batch, whatever its micro-batches and ranks
    modes = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
    check_gradients(model, local, full, ref_model, loss_avg_modes=modes)
    # top_entropy_quantile's tokens are the whole mini-batch's, over both ranks (each rank chose its own)
    check_gradients(model, local, full, ref_model, {"padded": (False, False)}, top_entropy_quantile=0.2)

    for fsdp_size in (-1, 1):
        check_updates(model_config, full.chunk(world_size)[rank], rank, fsdp_size)
    dist.destroy_process_group()


def _run_vl_actor(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from verl.data.tokenizer import get_processor
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.loading import build_model, get_vision_tower
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.dp_actor import DataParallelPPOActor, process_multi_modal_inputs

    processor = get_processor(model_dir)
    mesh = build_device_mesh(world_size, -1, "cpu")
    model = create_fsdp_model(ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"))
    ref_model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False))
    full = make_vl_batch(ref_model, processor, seed=0, batch_size=4)
    process_multi_modal_inputs(full, processor)
    local = full.chunk(world_size)[rank]
    with torch.no_grad():
        reference = reference_outputs(ref_model, local, TEMPERATURE)
    check_log_probs(model, local, reference)
    check_gradients(model, local, full, ref_model, modes={"padded": MODES["padded"], "dynamic": MODES["dynamic"]})

    # A mixed dataset: rank 0's rows have images, rank 1's are text only. Rank 1 still runs the vision tower (on a
    # dummy image) so both ranks issue the same FSDP collectives; without that the ranks wait for each other forever.
    mixed = make_vl_batch(ref_model, processor, seed=1, batch_size=4, text_only_rows=(2, 3))
    process_multi_modal_inputs(mixed, processor)
    local = mixed.chunk(world_size)[rank]
    assert all(row is None for row in local.non_tensor_batch["multi_modal_data"]) == (rank == 1)
    with torch.no_grad():
        reference = reference_outputs(ref_model, local, TEMPERATURE)
    check_log_probs(model, local, reference, modes={"padded": MODES["padded"], "dynamic": MODES["dynamic"]})
    check_gradients(model, local, mixed, ref_model, modes={"padded": MODES["padded"]})
    local = full.chunk(world_size)[rank]

    # freeze_vision_tower: the tower gets no gradient and no optimizer state; the language model moves.
    frozen = create_fsdp_model(
        ModelConfig(model_path=model_dir, freeze_vision_tower=True), FSDPConfig(), mesh, torch.device("cpu")
    )
    tower_ids = {id(param) for param in get_vision_tower(frozen).parameters()}
    optimizer = build_optimizer(frozen, OptimConfig(lr=1e-3))
    assert not any(id(param) in tower_ids for group in optimizer.param_groups for param in group["params"])
    before = {name: param.detach().clone() for name, param in frozen.named_parameters()}
    actor = DataParallelPPOActor(actor_config(True, True, use_kl_loss=False), frozen, optimizer)
    actor.update_policy(local, TEMPERATURE)
    for name, param in frozen.named_parameters():
        same = torch.equal(param.to_local(), before[name].to_local())
        assert same == (id(param) in tower_ids), f"{name}: frozen={id(param) in tower_ids} but unchanged={same}"
    dist.destroy_process_group()


def _run_hybrid_actor(rank: int, world_size: int, port: int, model_dir: str) -> None:
    """Qwen3.5's language model sharded on 2 ranks (rank-0 load, gradient checkpointing): packed Gated DeltaNet
    layers give the padded forward's log-probs and the full batch's gradient."""
    init_rank(rank, world_size, port)
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.gated_deltanet import packed_linear_attention_layers
    from verl.models.loading import build_model

    model_config = ModelConfig(model_path=model_dir)
    model = create_fsdp_model(
        model_config, FSDPConfig(), build_device_mesh(world_size, -1, "cpu"), torch.device("cpu")
    )
    assert packed_linear_attention_layers(model) == 3
    ref_model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False))
    full = make_text_batch(seed=0, batch_size=8)
    local = full.chunk(world_size)[rank]
    with torch.no_grad():
        reference = reference_outputs(ref_model, local, TEMPERATURE)
    log_probs = check_log_probs(model, local, reference, atol=HYBRID_ATOL)
    full_log_probs = torch.cat([torch.zeros_like(log_probs["padded"])] * world_size)
    full_log_probs[rank * len(local) : (rank + 1) * len(local)] = log_probs["padded"]
    dist.all_reduce(full_log_probs)
    noise = 0.3 * torch.randn(full.batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))
    full.batch["old_log_probs"] = (full_log_probs + noise) * full.batch["response_mask"]
    local = full.chunk(world_size)[rank]
    # and the gates of the decay and of the write strength, whose gradients sum over the recurrence too (measured
    # 1.5e-5 of the gradient's scale on in_proj_a with two key heads)
    summed_scalars = (
        "linear_attn.A_log",
        "linear_attn.dt_bias",
        "linear_attn.in_proj_a.weight",
        "linear_attn.in_proj_b.weight",
    )
    check_gradients(model, local, full, ref_model, modes=MODES, summed_scalars=summed_scalars)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def model_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("tiny_models"))


@pytest.mark.slow
def test_text_actor_matches_hf_and_trains(model_root: str) -> None:
    spawn(_run_text_actor, WORLD_SIZE, get_or_build_tiny_model("qwen2", model_root))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["qwen2_5_vl", "llava_onevision"])  # LLaVA-OneVision: rows of different tile counts
def test_vl_actor_matches_hf_and_freezes_vision_tower(model_root: str, kind: str) -> None:
    spawn(_run_vl_actor, WORLD_SIZE, get_or_build_tiny_model(kind, model_root))


@pytest.mark.slow
def test_hybrid_text_actor_matches_hf_on_two_ranks(model_root: str, tmp_path) -> None:
    from transformers import Qwen3_5ForCausalLM

    text_dir = str(tmp_path / "qwen3_5_text")  # the published checkpoints are VLMs; their language model alone
    Qwen3_5ForCausalLM.from_pretrained(get_or_build_tiny_model("qwen3_5", model_root)).save_pretrained(text_dir)
    spawn(_run_hybrid_actor, WORLD_SIZE, text_dir)


def test_single_process_actor_matches_hf_in_every_mode_and_trains(model_root: str) -> None:
    """Without torch.distributed the actor runs on a plain model: same log-probs, and updates lower the loss."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model_dir = get_or_build_tiny_model("qwen2", model_root)
    model = build_model(ModelConfig(model_path=model_dir))
    data = make_text_batch(seed=5, batch_size=6)
    with torch.no_grad():
        reference = reference_outputs(model, data, TEMPERATURE)
    check_log_probs(model, data, reference)

    data.batch["old_log_probs"] = reference["log_probs"]
    config = actor_config(
        True, True, global_batch_size=6, entropy_coeff=0.0, use_kl_loss=False, skip_zero_advantage_rows=False
    )
    actor = DataParallelPPOActor(config, model, build_optimizer(model, OptimConfig(lr=2e-5, weight_decay=0.0)))
    first, second = (actor.update_policy(data, TEMPERATURE) for _ in range(2))
    assert second["actor/pg_loss"] < first["actor/pg_loss"]
    # every response out of the loss (truncated ones under algorithm.mask_truncated_responses): no optimizer step
    before = [param.detach().clone() for param in model.parameters()]
    masked = data[np.arange(len(data))]
    masked.batch["response_mask"] = torch.zeros_like(masked.batch["response_mask"])
    assert actor.update_policy(masked, TEMPERATURE) == {"actor/lr": 2e-5}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert first["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6) and first["actor/lr"] == 2e-5
    assert set(first) >= {
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_higher",
        "actor/pg_clipfrac_lower",
        "actor/ppo_kl",
        "actor/entropy_loss",
        "actor/grad_norm",
        "actor/lr",
    }


def test_hybrid_linear_attention_actor_packs_exactly(model_root: str, tmp_path) -> None:
    """Qwen3.5's language model (Gated DeltaNet and full-attention layers) through build_model: the actor packs its
    rows (the layers restart at every boundary) and gets the padded forward's log-probs in every mode; a model whose
    Gated DeltaNet layers are the stock ones is kept on padded rows."""
    from transformers import Qwen3_5ForCausalLM

    from verl.models.config import ModelConfig
    from verl.models.gated_deltanet import packed_linear_attention_layers
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    text_dir = str(tmp_path / "qwen3_5_text")  # the published checkpoints are VLMs; their language model alone
    Qwen3_5ForCausalLM.from_pretrained(get_or_build_tiny_model("qwen3_5", model_root)).save_pretrained(text_dir)
    model = build_model(ModelConfig(model_path=text_dir))
    assert packed_linear_attention_layers(model) == 3
    data = make_text_batch(seed=5, batch_size=6)
    with torch.no_grad():
        reference = reference_outputs(model, data, TEMPERATURE)
    check_log_probs(model, data, reference, atol=HYBRID_ATOL)

    stock = Qwen3_5ForCausalLM.from_pretrained(text_dir, attn_implementation="varlen")
    assert not DataParallelPPOActor(actor_config(True, False), stock).padding_free


def test_on_policy_update_without_old_log_probs_has_the_same_loss_and_gradient(model_root: str) -> None:
    """One epoch over one mini-batch: the update's own detached log-probs replace the separate old forward."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=7, batch_size=6)
    config = actor_config(True, True, global_batch_size=6, use_kl_loss=False)
    results = []
    for with_old in (True, False):
        optimizer = recording_optimizer(model)
        actor = DataParallelPPOActor(config, model, optimizer)
        batch = data.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        batch.batch["advantages"] = data.batch["advantages"]
        if with_old:
            batch.batch["old_log_probs"] = actor.compute_log_probs(batch, TEMPERATURE)
        metrics = actor.update_policy(batch, TEMPERATURE)
        results.append((metrics, {name: grad.clone() for name, grad in optimizer.grads.items() if grad is not None}))
    (with_old, grads_old), (without, grads_new) = results
    assert without["actor/pg_loss"] == pytest.approx(with_old["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert without["actor/ppo_kl"] == 0.0
    for name, grad in grads_old.items():
        torch.testing.assert_close(grads_new[name], grad, rtol=1e-4, atol=1e-6 * grad.abs().max().item() + 1e-9)
    with pytest.raises(KeyError, match="off-policy"):  # two epochs need the behaviour policy's log-probs
        DataParallelPPOActor(
            dataclasses.replace(config, ppo_epochs=2), model, recording_optimizer(model)
        ).update_policy(batch, TEMPERATURE)


@pytest.mark.parametrize("loss_avg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_rows_without_advantage_are_skipped_with_the_same_gradient(model_root: str, loss_avg_mode: str) -> None:
    """worker.actor.skip_zero_advantage_rows: the rows whose advantage is 0 everywhere (GRPO's groups that scored
    alike) add nothing to the gradient where no KL loss or entropy bonus reads them; left out of the passes, still
    counted in the normaliser, the gradient is the one of every row. A mini-batch of such rows alone runs one."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=5, batch_size=8)
    data.batch["advantages"][[1, 3, 4, 6]] = 0.0
    base = dict(use_kl_loss=False, entropy_coeff=0.0, loss_avg_mode=loss_avg_mode)
    results = {}
    for skip in (False, True):
        optimizer = recording_optimizer(model)
        config = actor_config(True, False, skip_zero_advantage_rows=skip, **base)
        metrics = DataParallelPPOActor(config, model, optimizer).update_policy(data, TEMPERATURE)
        results[skip] = metrics, {name: grad.clone() for name, grad in optimizer.grads.items() if grad is not None}
    (every, grads_every), (skipped, grads_skipped) = results[False], results[True]
    for name, grad in grads_every.items():
        torch.testing.assert_close(grads_skipped[name], grad, rtol=1e-4, atol=1e-6 * grad.abs().max().item() + 1e-9)
    assert skipped["actor/pg_loss"] == pytest.approx(every["actor/pg_loss"], rel=1e-5)
    zero_tokens = data.batch["attention_mask"][[1, 3, 4, 6]].sum() / data.batch["attention_mask"].sum()
    assert skipped["actor/skipped_token_share"] == pytest.approx(zero_tokens.item())
    assert "actor/entropy_loss" not in skipped and "actor/skipped_token_share" not in every
    # a KL loss, an entropy bonus or a user's loss reads every row: nothing is skipped
    for change in ({"use_kl_loss": True}, {"entropy_coeff": 0.01}, {"top_entropy_quantile": 0.5}):
        config = actor_config(True, False, **{**base, **change})
        metrics = DataParallelPPOActor(config, model, recording_optimizer(model)).update_policy(data, TEMPERATURE)
        assert "actor/skipped_token_share" not in metrics, change
    from verl.algorithms import masked_ops  # a user's aggregation may read every row's length: nothing skipped

    masked_ops.register_loss_avg_mode("test-per-batch-token-mean")(
        lambda sums, lengths, *_: sums.sum() / lengths.sum()
    )
    try:
        config = actor_config(True, False, **{**base, "loss_avg_mode": "test-per-batch-token-mean"})
        metrics = DataParallelPPOActor(config, model, recording_optimizer(model)).update_policy(data, TEMPERATURE)
        assert "actor/skipped_token_share" not in metrics
    finally:
        masked_ops._LOSS_AVG_MODES.pop("test-per-batch-token-mean")
    flat = data.select(deepcopy=True)
    flat.batch["advantages"].zero_()
    config = actor_config(True, False, **base)
    metrics = DataParallelPPOActor(config, model, recording_optimizer(model)).update_policy(flat, TEMPERATURE)
    assert metrics["actor/skipped_token_share"] > 0.8 and metrics["actor/pg_loss"] == 0.0


def test_clip_fractions_with_tokens_of_weight_zero_do_not_depend_on_the_micro_batches(model_root: str) -> None:
    """icepop's and top_entropy_quantile's weight-0 tokens take no part in the clip fractions and ppo_kl: each
    micro-batch's mean is weighed by the tokens it was taken over (it was weighed by all its response tokens, so the
    logged fractions moved with the micro-batch size and dynamic batching: 0.258 over the batch, 0.218 at micro=1)."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=0, batch_size=8)
    mask = data.batch["response_mask"]
    with torch.no_grad():
        log_probs = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    noise = 0.3 * torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))
    data.batch["old_log_probs"] = (log_probs + noise) * mask
    weights = (torch.rand(mask.shape, generator=torch.Generator().manual_seed(3)) > 0.4).float() * mask
    data.batch["rollout_is_weights"] = weights
    names = ("pg_clipfrac", "pg_clipfrac_higher", "ppo_kl")
    _, whole = compute_policy_loss(
        data.batch["old_log_probs"],
        log_probs,
        data.batch["advantages"],
        mask,
        "default",
        0.2,
        0.3,
        3.0,
        "token-mean",
        token_weights=weights,
    )
    assert whole["pg_clipfrac"] > 0 and whole["loss_tokens"] < mask.sum()
    for micro, dynamic in ((8, False), (1, False), (3, True)):
        config = actor_config(True, dynamic, micro_batch_size_per_device_for_update=micro)
        metrics = DataParallelPPOActor(config, model, recording_optimizer(model)).update_policy(data, TEMPERATURE)
        for name in names:
            assert metrics[f"actor/{name}"] == pytest.approx(whole[name].item(), rel=1e-4), (micro, dynamic, name)


def test_dr_grpo_normaliser_is_the_configured_response_length_not_the_batch_width(model_root: str) -> None:
    """seq-mean-token-sum-norm divides by data.max_response_length (the worker passes it): a response-length
    schedule's shorter stage must not scale the loss up."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=11, batch_size=4)
    width = data.batch["response_mask"].shape[-1]
    config = actor_config(
        True, True, global_batch_size=4, entropy_coeff=0.0, use_kl_loss=False, loss_avg_mode="seq-mean-token-sum-norm"
    )
    losses = {}
    for constant in (None, 4 * width):
        actor = DataParallelPPOActor(config, model, recording_optimizer(model), max_response_length=constant)
        losses[constant] = actor.update_policy(data, TEMPERATURE)["actor/pg_loss"]
    assert losses[None] != 0
    assert losses[4 * width] == pytest.approx(losses[None] / 4, rel=1e-5)


def test_dense_micro_batches_run_padded_where_the_device_asks_for_it(model_root: str, monkeypatch) -> None:
    """On a DENSE_ROWS_RUN_PADDED device, packed micro-batches without padding run as padded rows (same outputs and
    gradients); micro-batches with padding stay packed. On the CPU (not such a device) everything stays packed."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor import forward
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    dense = make_text_batch(seed=3, batch_size=4, aligned_prompt_len=9)  # 3 padding columns left of every prompt
    ragged = make_text_batch(seed=3, batch_size=4)
    calls = []
    real_padded = forward._forward_padded
    monkeypatch.setattr(forward, "_forward_padded", lambda *args: calls.append(len(args[1])) or real_padded(*args))
    assert not forward.runs_padded(dense, True) and forward.runs_padded(dense, False)  # the CPU keeps packing
    config = actor_config(True, True, global_batch_size=4, entropy_coeff=0.0, use_kl_loss=False)

    def run(data: DataProto) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        optimizer = recording_optimizer(model)
        actor = DataParallelPPOActor(config, model, optimizer)
        data.batch["old_log_probs"] = log_probs = actor.compute_log_probs(data, TEMPERATURE)
        actor.update_policy(data, TEMPERATURE)
        return log_probs, {name: grad for name, grad in optimizer.grads.items() if grad is not None}

    packed = run(dense)
    assert calls == []
    monkeypatch.setattr(forward, "DENSE_ROWS_RUN_PADDED", frozenset({"cpu"}))
    assert forward.runs_padded(dense, True) and not forward.runs_padded(ragged, True)
    padded = run(dense)
    assert calls and sum(calls) == 2 * len(dense)  # every row of the log-prob pass and of the update ran padded
    torch.testing.assert_close(padded[0], packed[0], rtol=0, atol=1e-5)
    for name, grad in packed[1].items():
        torch.testing.assert_close(padded[1][name], grad, rtol=1e-4, atol=1e-6 * grad.abs().max().item() + 1e-9)
    calls.clear()
    run(ragged)
    assert calls == []


def test_the_steps_entropy_coeff_replaces_the_configured_one(model_root: str) -> None:
    """Adaptive entropy control sends each step's coefficient: it is the one applied, and the entropy reported is the
    exact one even at coefficient 0 (without it, coefficient 0 reports the -log p estimate); `actor/entropy`, which
    the control steers on, is the token mean whatever loss_avg_mode aggregates the entropy loss with."""
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=11, batch_size=6)
    with torch.no_grad():
        reference = reference_outputs(model, data, TEMPERATURE)
    mask = data.batch["response_mask"]
    exact_entropy = compute_entropy_loss(reference["entropy"], mask, "token-mean", max_response_length=mask.shape[-1])

    def update(config_coeff: float, meta_coeff: float | None, **extra) -> tuple[dict, dict]:
        optimizer = recording_optimizer(model)
        actor = DataParallelPPOActor(
            actor_config(
                True,
                True,
                global_batch_size=6,
                use_kl_loss=False,
                entropy_coeff=config_coeff,
                skip_zero_advantage_rows=False,  # actor/entropy_loss is logged then
                **extra,
            ),
            model,
            optimizer,
        )
        batch = data.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        batch.batch["advantages"] = data.batch["advantages"]
        metrics = actor.update_policy(batch, TEMPERATURE, entropy_coeff=meta_coeff)
        return metrics, {name: grad.clone() for name, grad in optimizer.grads.items() if grad is not None}

    configured, grads_configured = update(0.05, None)
    sent, grads_sent = update(0.0, 0.05)  # the configured 0 is replaced by the step's 0.05
    plain, grads_plain = update(0.0, None)
    zero, _ = update(0.0, 0.0)
    assert sent["actor/entropy_coeff"] == 0.05 and "actor/entropy_coeff" not in configured
    for name, grad in grads_configured.items():
        torch.testing.assert_close(grads_sent[name], grad, rtol=1e-4, atol=1e-6 * grad.abs().max().item() + 1e-9)
    assert any(not torch.allclose(grads_plain[name], grad) for name, grad in grads_sent.items())
    assert zero["actor/entropy_loss"] == pytest.approx(exact_entropy.item(), rel=1e-4)
    assert plain["actor/entropy_loss"] != pytest.approx(exact_entropy.item(), rel=1e-3)  # the -log p estimate
    summed, _ = update(0.0, 0.0, loss_avg_mode="seq-mean-token-sum")
    assert zero["actor/entropy"] == pytest.approx(exact_entropy.item(), rel=1e-4)
    assert summed["actor/entropy"] == pytest.approx(exact_entropy.item(), rel=1e-4)
    assert summed["actor/entropy_loss"] > 2 * exact_entropy.item()  # a per-sequence sum, not a per-token entropy


def test_top_entropy_quantile_keeps_the_policy_gradient_of_the_high_entropy_tokens_only(model_root: str) -> None:
    """actor.top_entropy_quantile=0.2: the gradient is that of the policy loss over the mini-batch's top-20% entropy
    tokens, with the normaliser of all tokens, however the micro-batches split it; 1.0 is the plain loss."""
    from verl.algorithms.core_algos import high_entropy_mask
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=5, batch_size=6)
    batch = data.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
    batch.batch["advantages"] = data.batch["advantages"]
    mask = data.batch["response_mask"]

    def actor_grads(quantile: float, micro: int = 6, dynamic: bool = False) -> dict[str, torch.Tensor]:
        config = actor_config(
            True,
            dynamic,
            global_batch_size=6,
            micro_batch_size_per_device_for_update=micro,
            entropy_coeff=0.0,
            use_kl_loss=False,
            top_entropy_quantile=quantile,
        )
        optimizer = recording_optimizer(model)
        DataParallelPPOActor(config, model, optimizer).update_policy(batch, TEMPERATURE)
        return {name: grad for name, grad in optimizer.grads.items() if grad is not None}

    def reference(kept: torch.Tensor | None) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        out = reference_outputs(model, data, TEMPERATURE)
        config = actor_config(True, False)
        pg_loss, _ = compute_policy_loss(
            out["log_probs"].detach(),
            out["log_probs"],
            data.batch["advantages"],
            mask,
            config.loss_type,
            config.clip_ratio_low,
            config.clip_ratio_high,
            config.clip_ratio_dual,
            "token-mean",
            max_response_length=mask.shape[-1],
            token_weights=kept,
        )
        pg_loss.backward()
        return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}

    with torch.no_grad():
        entropy = reference_outputs(model, data, TEMPERATURE)["entropy"]
    kept = high_entropy_mask(entropy, mask, 0.2)
    assert 0 < kept.sum() < mask.sum()
    assert kept.sum().item() == pytest.approx(0.2 * mask.sum().item(), abs=1)
    assert entropy[kept.bool()].min() > entropy[mask.bool() & ~kept.bool()].max()
    # the tokens are chosen over the mini-batch: micro-batches of 2 and dynamic ones keep the same (per micro-batch,
    # the gradient moved by 99% between micro-batches of 8 and 4)
    for quantile, micro, dynamic, expected in (
        (0.2, 6, False, reference(kept)),
        (0.2, 2, False, reference(kept)),
        (0.2, 3, True, reference(kept)),
        (1.0, 6, False, reference(None)),
    ):
        got = actor_grads(quantile, micro, dynamic)
        for name, grad in expected.items():
            torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-5 * grad.abs().max().item() + 1e-9)
    masked, plain = reference(kept), reference(None)
    assert any(not torch.allclose(masked[name], grad) for name, grad in plain.items())


def test_actor_input_errors_name_the_missing_key(model_root: str) -> None:
    from PIL import Image

    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.workers.actor.dp_actor import DataParallelPPOActor, process_multi_modal_inputs

    model = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen2", model_root)))
    data = make_text_batch(seed=0, batch_size=2)
    actor = DataParallelPPOActor(actor_config(False, False, global_batch_size=2), model, recording_optimizer(model))
    with pytest.raises(KeyError, match="position_ids"):
        actor.compute_log_probs(data.select(batch_keys=["input_ids", "attention_mask", "responses"]), 1.0)
    with pytest.raises(RuntimeError, match="optimizer"):
        DataParallelPPOActor(actor_config(False, False), model).update_policy(data, TEMPERATURE)
    empty = DataProto.from_dict(data.batch.to_dict(), {"multi_modal_data": [None, None]}, data.meta_info)
    assert actor.compute_log_probs(empty, 1.0).shape == data.batch["responses"].shape  # text rows need nothing
    image = {"images": [Image.new("RGB", (56, 56))]}
    images = DataProto.from_dict(data.batch.to_dict(), {"multi_modal_data": [image, None]}, data.meta_info)
    with pytest.raises(ValueError, match="process_multi_modal_inputs"):
        actor.compute_log_probs(images, 1.0)
    with pytest.raises(ValueError, match="no processor"):
        process_multi_modal_inputs(images, None)


def test_process_multi_modal_inputs_once_per_prompt(model_root: str) -> None:
    from PIL import Image

    from verl.data.tokenizer import get_processor
    from verl.workers.actor.dp_actor import process_multi_modal_inputs

    processor = get_processor(get_or_build_tiny_model("qwen2_5_vl", model_root))
    small, large = Image.new("RGB", (56, 56), "red"), Image.new("RGB", (112, 84), "blue")
    rows = [{"images": [small]}, {"images": [small]}, {"images": [large, small]}, None]
    data = DataProto.from_dict(
        {"attention_mask": torch.ones(4, 3, dtype=torch.long)},
        {"multi_modal_data": rows, "uid": ["a", "a", "b", "c"]},
    )
    process_multi_modal_inputs(data, processor)
    inputs = data.non_tensor_batch["multi_modal_inputs"]
    assert inputs[0] is inputs[1]  # same prompt (uid): processed once
    assert inputs[0]["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert inputs[2]["image_grid_thw"].tolist() == [[1, 6, 8], [1, 4, 4]]
    assert inputs[2]["pixel_values"].shape[0] == 6 * 8 + 4 * 4 and inputs[3] == {}
    process_multi_modal_inputs(data, processor)  # already processed: kept as is
    assert data.non_tensor_batch["multi_modal_inputs"] is inputs
    # a worker keeps them from one call of a step to the next (each call gets the batch afresh); a batch of other
    # prompts (the next step's) empties what it keeps
    kept: dict = {}
    mask = data.batch["attention_mask"]
    first, again = (DataProto.from_dict({"attention_mask": mask}, {**data.non_tensor_batch}) for _ in range(2))
    for batch in (first, again):
        batch.non_tensor_batch.pop("multi_modal_inputs")
        process_multi_modal_inputs(batch, processor, kept)
    assert again.non_tensor_batch["multi_modal_inputs"][2] is first.non_tensor_batch["multi_modal_inputs"][2]
    assert set(kept) == {"a", "b", "c"}
    following = DataProto.from_dict(
        {"attention_mask": torch.ones(1, 3, dtype=torch.long)}, {"multi_modal_data": [rows[0]], "uid": ["d"]}
    )
    process_multi_modal_inputs(following, processor, kept)
    assert set(kept) == {"d"}
    text_only = DataProto.from_dict({"attention_mask": torch.ones(1, 1)}, {"multi_modal_data": [None]})
    process_multi_modal_inputs(text_only, None)  # nothing to process without images
    assert "multi_modal_inputs" not in text_only.non_tensor_batch
