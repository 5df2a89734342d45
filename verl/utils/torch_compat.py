# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every place where the trainer relies on torch beyond its public API, so a torch upgrade is checked here only.

- `drop_unreduced_grads`: FSDP2 has no public call to forget gradients accumulated on unsharded parameters while
  gradient sync is off (after an error mid-accumulation they would join the next reduction); uses
  `_get_fsdp_state`, `_fsdp_param_groups`.
- `FSDPModule.reset_iter_state` is new in torch 2.12; on older torch `reset_iteration` does nothing beyond the
  caller's resharding, and says so.
"""

import logging

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule


logger = logging.getLogger(__name__)


def reset_iteration(module: FSDPModule) -> None:
    """FSDP's per-iteration state reset after an error aborted a forward or backward (root module only)."""
    reset = getattr(module, "reset_iter_state", None)
    if reset is None:
        logger.warning(
            "torch %s has no FSDPModule.reset_iter_state: after this error FSDP's per-iteration state is not reset; "
            "restart the run if the next step fails.",
            torch.__version__,
        )
        return
    reset()


def drop_unreduced_grads(module: nn.Module) -> int:
    """Forget the gradients FSDP2 accumulated on the unsharded parameters of `module` while gradient sync was off,
    without any collective (an error may have hit one rank only). Returns how many parameters were cleared."""
    cleared = 0
    for submodule in module.modules():
        if not isinstance(submodule, FSDPModule):
            continue
        for group in submodule._get_fsdp_state()._fsdp_param_groups:
            for fsdp_param in group.fsdp_params:
                fsdp_param.unsharded_accumulated_grad = None
                unsharded = getattr(fsdp_param, "_unsharded_param", None)
                if unsharded is not None:
                    unsharded.grad = None
                cleared += 1
    return cleared
