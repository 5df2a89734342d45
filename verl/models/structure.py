# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where a Hugging Face VLM keeps its vision tower and language model; apart from the loaders so that attention and
sequence-parallel code can use it without importing them (they import those)."""

from torch import nn

from verl.models.config import EXPERT_COUNT_KEYS


_VISION_TOWER_NAMES = ("visual", "vision_tower", "vision_model")


def get_vision_tower(model: nn.Module) -> nn.Module | None:
    """The vision encoder of a vision-language model, or None for a text model."""
    owners = (model, getattr(model, "model", None))
    towers = (getattr(owner, name, None) for owner in owners for name in _VISION_TOWER_NAMES)
    return next((tower for tower in towers if isinstance(tower, nn.Module)), None)


def get_language_model(model: nn.Module) -> nn.Module | None:
    """The text decoder a vision-language model feeds its image embeddings into, or None."""
    found = (getattr(owner, "language_model", None) for owner in (getattr(model, "model", None), model))
    return next((language_model for language_model in found if isinstance(language_model, nn.Module)), None)


def matmul_flops_per_token(model: nn.Module) -> tuple[float, float]:
    """Model FLOPs of one training pass (forward and backward): (per token, through every weight but the LM head;
    per token the LM head scores, which the actor does at response positions only). 6 per trained weight a token
    multiplies by, 4 per frozen one (no weight gradient: LoRA's base weights); a mixture-of-experts layer's experts
    count num_experts_per_tok of every num_experts (those a token is routed to), and an input embedding (a lookup)
    counts only as the tied LM head. Attention scores and recomputation are not counted."""
    config = model.config.get_text_config()
    experts = next((getattr(config, n, None) for n in EXPERT_COUNT_KEYS if getattr(config, n, None)), None)
    routed = getattr(config, "num_experts_per_tok", None)
    share = routed / experts if experts and routed else 1.0
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    head = {id(param) for param in output.parameters()} if output is not None else set()
    body_flops = head_flops = 0.0
    for name, param in model.named_parameters():
        if param is embedding and id(param) not in head:
            continue
        used = param.numel() * (share if ".experts." in f".{name}" else 1.0) * (6.0 if param.requires_grad else 4.0)
        if id(param) in head:
            head_flops += used
        else:
            body_flops += used
    return body_flops, head_flops
