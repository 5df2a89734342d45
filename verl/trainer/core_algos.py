# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Alias kept for EasyR1 users (`verl.trainer.core_algos`); the RL math lives in `verl.algorithms`."""

from verl.algorithms.core_algos import *  # noqa: F403
from verl.algorithms.core_algos import __all__  # noqa: F401
