# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reward side of a run.

Loading a `path/to/file.py:function` reward and checking its output (function.py); the managers that score batches
with reward functions (manager.py), in this process, a process pool or a Ray actor (local.py, parallel.py,
ray_actor.py); the LLM judge (llm_judge.py) and the reward model worker (model_worker.py); the combination of rule,
reward-model and judge scores into a batch's reward (scoring.py); math answer grading (math_grading.py) and the code
sandbox (sandbox/).
"""
