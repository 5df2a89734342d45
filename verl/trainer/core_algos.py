# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Alias kept for EasyR1 users: `from verl.trainer import core_algos` and `verl.trainer.core_algos.<name>` keep working.

The RL math lives in `verl.algorithms`; new code imports it from there.
"""

from verl.algorithms.core_algos import *  # noqa: F403
from verl.algorithms.core_algos import __all__  # noqa: F401
