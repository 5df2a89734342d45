# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ray backend: resource pools on placement groups, RayWorkerGroup, colocated roles."""

from verl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    WorkerDiedError,
    create_colocated_worker_cls,
)
from verl.single_controller.ray.resource import InsufficientResourcesError, PlacementGroupTimeoutError, RayResourcePool


__all__ = [
    "WorkerDiedError",
    "InsufficientResourcesError",
    "PlacementGroupTimeoutError",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "create_colocated_worker_cls",
]
