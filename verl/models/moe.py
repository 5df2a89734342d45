# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The actor's routers, watched: how evenly a mixture-of-experts actor spreads the tokens of an update over its
experts, as per-step metrics.

The routers are the modules transformers records `router_logits` from (`_can_record_outputs`), whose output is
(logits, top-k weights, top-k expert ids), as Qwen3-MoE's `Qwen3MoeTopKRouter` returns: the ids are the experts the
actor used, not recomputed. Only the forwards inside `collecting()` count, so gradient checkpointing's re-run of a
layer inside the backward does not count its tokens twice.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def router_modules(module: nn.Module) -> list[nn.Module]:
    """The routers of `module` (one per sparse layer, in layer order); empty for a dense model or one whose router
    transformers does not record."""
    recorders = {}
    for sub in module.modules():
        recorded = getattr(type(sub), "_can_record_outputs", None) or {}
        if "router_logits" in recorded:
            recorders = recorded
            break
    recorder = recorders.get("router_logits")
    router_class = getattr(recorder, "target_class", None)
    if router_class is None:
        return []
    return [sub for sub in module.modules() if isinstance(sub, router_class)]


class RouterStats:
    """Per-layer token counts and router probabilities of `module`'s experts over the forwards in `collecting()`;
    `metrics()` sums them over `group` (every rank must call it) and starts over.

    `collecting(mask)`: with padded rows (`mask` = the micro-batch's attention mask, one router row per position)
    padding is left out; packed rows hold real tokens only.
    """

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
            if not self._active or not isinstance(output, tuple) or len(output) != 3:
                return
            logits, _, ids = output
            logits = logits.detach().reshape(-1, logits.shape[-1]).float()
            ids = ids.detach().reshape(logits.shape[0], -1)
            if self._mask is not None and self._mask.numel() == logits.shape[0]:
                keep = self._mask.reshape(-1).to(logits.device).bool()
                logits, ids = logits[keep], ids[keep]
            experts = logits.shape[-1]
            self._experts = experts
            counts = torch.bincount(ids.reshape(-1), minlength=experts).double()
            probs = torch.softmax(logits, dim=-1).sum(dim=0).double()
            self._counts[layer] = counts if self._counts[layer] is None else self._counts[layer] + counts
            self._probs[layer] = probs if self._probs[layer] is None else self._probs[layer] + probs
            self._tokens[layer] += float(logits.shape[0])

        return hook

    def metrics(self, group: dist.ProcessGroup | None = None, device: torch.device | None = None) -> dict[str, float]:
        """Over the tokens since the last call (all ranks of `group`), per layer then over layers:

        - `moe/load_imbalance/mean|max`: the busiest expert's token count over the mean count (1 is even; experts
          / top-k when one expert takes every token);
        - `moe/aux_loss`: the load-balancing loss of Switch and Qwen-MoE, experts x sum over experts of (share of
          routed slots x mean router probability), averaged over layers: top-k when even (not added to the loss);
        - `moe/unused_experts`: the share of (layer, expert) pairs that got no token.
        """
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
        counts = packed[: layers * experts].reshape(layers, experts)
        probs = packed[layers * experts : 2 * layers * experts].reshape(layers, experts)
        tokens = packed[2 * layers * experts :]
        self._counts = [None] * layers
        self._probs = [None] * layers
        self._tokens = [0.0] * layers
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
