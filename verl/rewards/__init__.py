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
"""The reward side of a run.

Loading a `path/to/file.py:function` reward and checking its output (function.py); the managers that score batches
with reward functions (manager.py), in this process, a process pool or a Ray actor (local.py, parallel.py,
ray_actor.py); the LLM judge (llm_judge.py) and the reward model worker (model_worker.py); the combination of rule,
reward-model and judge scores into a batch's reward (scoring.py); math answer grading (math_grading.py) and the code
sandbox (sandbox/).
"""
