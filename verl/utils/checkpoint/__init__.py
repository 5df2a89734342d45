# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Sharded worker checkpoints (torch.distributed.checkpoint) that resume on any world size."""

from verl.utils.checkpoint.fsdp_checkpoint_manager import HF_SUBDIR, FSDPCheckpointManager, has_checkpoint


__all__ = ["HF_SUBDIR", "FSDPCheckpointManager", "has_checkpoint"]
