# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Alias kept for EasyR1 users: `from verl.trainer import core_algos` and `verl.trainer.core_algos.<name>` keep working.

The RL math lives in `verl.algorithms`; new code imports it from there.
"""

from verl.algorithms.core_algos import *  # noqa: F403
from verl.algorithms.core_algos import __all__  # noqa: F401
