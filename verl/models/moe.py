# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Per-step metrics of how evenly a mixture-of-experts actor spreads an update's tokens over its experts.
The routers are the modules transformers records `router_logits` from; their output (logits, top-k weights, top-k
ids) gives the experts actually used. Only forwards inside `collecting()` count, so gradient checkpointing's re-run
in backward does not count tokens twice."""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def router_modules(module: nn.Module) -> list[nn.Module]:
    """The routers of `module` in layer order; empty for a dense model or an unrecorded router."""
    for sub in module.modules():
        recorded = getattr(type(sub), "_can_record_outputs", None) or {}
        if "router_logits" in recorded:
            router_class = getattr(recorded["router_logits"], "target_class", None)
            if router_class is None:
                return []
            return [child for child in module.modules() if isinstance(child, router_class)]
    return []


def router_choice(output: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(logits, top-k expert ids) of a router's output, a tuple of logits, top-k weights and top-k ids in the order its
    family returns them (Qwen's and Mixtral's: logits first; Granite's: ids first); None for any other output."""
    if not isinstance(output, tuple) or len(output) != 3 or not all(isinstance(part, torch.Tensor) for part in output):
        return None
    ids = [part for part in output if not part.is_floating_point()]
    scores = [part for part in output if part.is_floating_point()]
    if len(ids) != 1 or len(scores) != 2:
        return None
    return max(scores, key=lambda part: part.shape[-1]), ids[0]  # the logits: one column per expert, not per pick


class RouterStats:
    """Per-layer expert token counts and router probabilities over the forwards in `collecting(mask)` (`mask`: the
    attention mask of the padded rows the forward ran, so padding is left out; None for packed rows); `metrics()` sums
    them over `group` (every rank must call it) and starts over."""

    def __init__(self, module: nn.Module) -> None:
        self.routers = router_modules(module)
        self._mask: torch.Tensor | None = None
        self._active = False
        self._counts: list[torch.Tensor | None] = [None] * len(self.routers)
        self._probs: list[torch.Tensor | None] = [None] * len(self.routers)
        self._tokens: list[float] = [0.0] * len(self.routers)
        self._experts = 0
        for layer, router in enumerate(self.routers):
            router.register_forward_hook(self._hook(layer))

    def __bool__(self) -> bool:
        return bool(self.routers)

    @contextlib.contextmanager
    def collecting(self, mask: torch.Tensor | None = None) -> Iterator[None]:
        self._active, self._mask = True, mask
        try:
            yield
        finally:
            self._active, self._mask = False, None

    def _hook(self, layer: int) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            choice = router_choice(output) if self._active else None
            if choice is None:
                return
            logits, ids = choice
            logits = logits.detach().reshape(-1, logits.shape[-1]).float()
            ids = ids.detach().reshape(logits.shape[0], -1)
            if self._mask is not None and self._mask.numel() == logits.shape[0]:
                keep = self._mask.reshape(-1).to(logits.device).bool()
                logits, ids = logits[keep], ids[keep]
            self._experts = experts = logits.shape[-1]
            counts = torch.bincount(ids.reshape(-1), minlength=experts).double()
            probs = torch.softmax(logits, dim=-1).sum(dim=0).double()
            self._counts[layer] = counts if self._counts[layer] is None else self._counts[layer] + counts
            self._probs[layer] = probs if self._probs[layer] is None else self._probs[layer] + probs
            self._tokens[layer] += float(logits.shape[0])

        return hook

    def metrics(self, group: dist.ProcessGroup | None = None, device: torch.device | None = None) -> dict[str, float]:
        """Since the last call, over all ranks of `group`, per layer then over layers:
        - `moe/load_imbalance/mean|max`: busiest expert's count over the mean count (1 is even);
        - `moe/aux_loss`: the Switch / Qwen-MoE load-balancing loss, top-k when even (logged, not trained on);
        - `moe/unused_experts`: share of (layer, expert) pairs that got no token."""
        if not self.routers or self._experts == 0:
            return {}
        experts = self._experts
        empty = torch.zeros(experts, dtype=torch.float64)
        counts = torch.stack([c.cpu() if c is not None else empty for c in self._counts])
        probs = torch.stack([p.cpu() if p is not None else empty for p in self._probs])
        tokens = torch.tensor(self._tokens, dtype=torch.float64)
        packed = torch.cat([counts.reshape(-1), probs.reshape(-1), tokens])
        if dist.is_available() and dist.is_initialized():
            packed = packed.to(device or packed.device)
            dist.all_reduce(packed, group=group)
            packed = packed.cpu()
        layers = len(self.routers)
        counts, probs, tokens = packed.split([layers * experts, layers * experts, layers])
        counts, probs = counts.reshape(layers, experts), probs.reshape(layers, experts)
        self._counts, self._probs, self._tokens = [None] * layers, [None] * layers, [0.0] * layers
        seen = tokens > 0
        if not bool(seen.any()):
            return {}
        counts, probs, tokens = counts[seen], probs[seen], tokens[seen]
        imbalance = counts.max(dim=-1).values / counts.mean(dim=-1)
        aux = experts * ((counts / tokens[:, None]) * (probs / tokens[:, None])).sum(dim=-1)
        return {
            "moe/load_imbalance/mean": float(imbalance.mean()),
            "moe/load_imbalance/max": float(imbalance.max()),
            "moe/aux_loss": float(aux.mean()),
            "moe/unused_experts": float((counts == 0).double().mean()),
        }
