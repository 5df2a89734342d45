# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend-independent worker groups: the Worker base class, `@register` dispatch modes, WorkerGroup."""

from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import WorkerGroup, WorkerGroupFuture


__all__ = ["Dispatch", "Worker", "WorkerGroup", "WorkerGroupFuture", "register"]
