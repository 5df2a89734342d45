# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""SFTWorker: one process of supervised fine-tuning, an FSDP2-sharded model with its optimizer.
It trains on batches in the RL actor's layout through the actor's own forward (packing, dynamic micro-batches,
vision inputs). The loss is the mean NLL of the assistant tokens over the whole global batch (every token weighs the
same). Checkpoints have the RL actor's layout, so scripts/model_merger.py exports them."""

import dataclasses
import functools
import logging
import math
import os
import shutil
from typing import Any

import torch
import torch.distributed as dist

from verl.data.tokenizer import get_processor, get_tokenizer, stop_at_turn_end
from verl.models.fsdp import (
    build_device_mesh,
    clip_grad_norm,
    create_fsdp_model,
    gathers_once_per_pass,
    get_full_state_dict,
    micro_batch_pass,
)
from verl.models.loading import build_model, declared_dtype, exported_config, load_model_config
from verl.models.lora import adapter_config_dict, base_name, lora_scaling, merged_state_dict
from verl.models.transformers_compat import save_model_folder
from verl.protocol import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.utils import device as device_utils
from verl.utils.checkpoint import FSDPCheckpointManager
from verl.utils.optim import build_lr_scheduler, build_optimizer
from verl.workers.actor.dp_actor import token_head
from verl.workers.actor.forward import (
    forward_response,
    global_loss_counts,
    make_micro_batches,
    packing_is_exact,
    packing_obstacle,
    process_multi_modal_inputs,
)


logger = logging.getLogger(__name__)


def merged_lora_export(
    state: dict[str, torch.Tensor], frozen: set[str], model_config: Any, scaling: float
) -> dict[str, torch.Tensor]:
    """A LoRA run's full state with its adapters merged, for export. On a GPU the frozen base trains in the compute
    dtype (bf16): its weights are taken from the model folder in fp32 instead, as the merger takes them, so the export
    of an fp32- or fp16-declared model is not rounded through bf16 (embeddings and untouched layers included)."""
    narrowed = [name for name in frozen if name in state and state[name].dtype in (torch.bfloat16, torch.float16)]
    if narrowed:
        source = build_model(model_config, device="cpu").state_dict()
        state = {**state, **{name: source[base_name(name)] for name in narrowed if base_name(name) in source}}
    return merged_state_dict(state, scaling)


class SFTWorker(Worker):
    def __init__(self, config: Any, device: str = "auto", override_chat_template: str | None = None) -> None:
        """`override_chat_template`: the data's template file; checkpoints and the HF export carry it, so the RL
        trainer renders prompts the same way."""
        super().__init__()
        self.config = config
        self.override_chat_template = override_chat_template
        self.device_type = device_utils.set_device_type(device)
        device_utils.init_distributed()
        self.device = device_utils.get_local_device()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self, training_steps: int, seed: int) -> None:
        """`seed` (data.seed) with the rank and the step seeds each step's dropout masks."""
        config = self.config
        self.seed = seed
        model = config.model
        tokenizer_path = model.tokenizer_path or model.model_path
        options = {"trust_remote_code": model.trust_remote_code, "override_chat_template": self.override_chat_template}
        self.tokenizer = get_tokenizer(tokenizer_path, **options)
        self.processor = get_processor(tokenizer_path, **options)
        mesh = build_device_mesh(dist.get_world_size(), config.fsdp.fsdp_size, self.device_type)
        self.module = create_fsdp_model(model, config.fsdp, mesh, self.device, lora_key="worker.model.lora")
        optim = dataclasses.replace(config.optim, training_steps=training_steps)
        self.optimizer = build_optimizer(self.module, optim)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, optim)
        self.padding_free = config.padding_free and packing_is_exact(self.module)
        if config.padding_free and not self.padding_free and dist.get_rank() == 0:
            logger.warning("worker.padding_free is set but %s; running padded rows.", packing_obstacle(self.module))
        self.head = functools.partial(token_head(False), temperature=1.0, with_entropy=False)
        """Log-probs of the labels from the logits, at temperature 1."""
        self.checkpoint_manager = FSDPCheckpointManager(
            self.module,
            self.optimizer,
            self.lr_scheduler,
            self.tokenizer,
            self.processor,
            adapter_only=model.lora.rank > 0,
        )

    def _nll(self, data: DataProto, train: bool) -> tuple[float, float]:
        """This rank's summed assistant-token NLL and the global token count; with `train`, backward of this rank's
        share of the global mean."""
        process_multi_modal_inputs(data, self.processor)
        config = self.config
        micro_batches, _ = make_micro_batches(
            data, config.micro_batch_size_per_device, config.dynamic_batching, padded=not self.padding_free
        )
        tokens, _ = global_loss_counts(micro_batches)
        total = 0.0
        gather_once = gathers_once_per_pass(config.fsdp, self.device_type)
        with micro_batch_pass(self.module, gather_once, config.fsdp.enable_full_shard) as before_backward:
            for index, micro in enumerate(micro_batches):
                with torch.set_grad_enabled(train):
                    log_probs = forward_response(self.module, micro, self.padding_free, self.head)["log_probs"]
                    nll = -(log_probs * micro.batch["response_mask"]).sum()
                if train:  # FSDP averages gradients over ranks: each rank's share of the global mean, times the ranks
                    before_backward(index == len(micro_batches) - 1)
                    (nll / max(tokens, 1.0) * dist.get_world_size()).backward()
                total += nll.item()
        return total, tokens

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def train_batch(self, data: DataProto) -> dict[str, float]:
        """One optimizer step on the global batch; returns mean loss, gradient norm and learning rate."""
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        # the steps taken so far: the scheduler's count, which a resumed run loads with the checkpoint
        step = self.lr_scheduler.last_epoch
        with device_utils.seeded_rng(self.seed, dist.get_rank(), step):  # the step's dropout masks
            total, tokens = self._nll(data, train=True)
        grad_norm = clip_grad_norm(self.module, self.config.max_grad_norm).item()
        if math.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("Skipping the optimizer step: the gradient norm is %s.", grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.lr_scheduler.get_last_lr()[0]
        self.lr_scheduler.step()
        loss = torch.tensor([total], dtype=torch.float64)
        dist.all_reduce(loss)
        return {
            "train/loss": loss.item() / max(tokens, 1.0),
            "train/grad_norm": grad_norm,
            "train/lr": lr,
            "train/tokens": tokens,
        }

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def eval_batch(self, data: DataProto) -> dict[str, float]:
        """This rank's summed NLL and the batch's global assistant-token count."""
        self.module.eval()
        total, tokens = self._nll(data, train=False)
        return {"nll_sum": total, "tokens": tokens}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str, extra_state: dict[str, Any] | None = None) -> None:
        self.checkpoint_manager.save(path, extra_state=extra_state)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> dict[str, Any]:
        return self.checkpoint_manager.load(path)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_hf_model(self, path: str) -> None:
        """Write the weights as a Hugging Face model directory (rank 0), usable as the RL trainer's model_path, in the
        dtype the base model's config declares (bf16 for the released Qwen models; the training holds fp32 master
        weights); LoRA adapters are merged into the base weights."""
        state = get_full_state_dict(self.module)  # collective; the full tensors land on rank 0
        if dist.get_rank() == 0:
            if self.config.model.lora.rank > 0:
                frozen = {name for name, param in self.module.named_parameters() if not param.requires_grad}
                state = merged_lora_export(
                    state, frozen, self.config.model, lora_scaling(adapter_config_dict(self.module))
                )
            model = build_model(self.config.model, device="meta")
            model.load_state_dict(state, assign=True)
            model.tie_weights()
            model.to(declared_dtype(load_model_config(self.config.model)))  # as the base model's folder has them
            model.config = exported_config(model)
            stop_at_turn_end(model.generation_config, self.tokenizer)  # a base's EOS: the trained turns' end too
            written = f"{path}.tmp"  # renamed into place once whole: a failed export (a full disk) leaves no half
            shutil.rmtree(written, ignore_errors=True)
            try:
                save_model_folder(model, written)  # Qwen3-VL-MoE's experts as its checkpoints store them
                for processing in (self.processor, self.tokenizer):
                    if processing is not None:
                        processing.save_pretrained(written)
                shutil.rmtree(path, ignore_errors=True)
                os.replace(written, path)
            finally:
                shutil.rmtree(written, ignore_errors=True)
        dist.barrier()
