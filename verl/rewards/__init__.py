# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reward side of a run: loading a `file.py:function` reward (function.py); managers that score batches in this
process, a process pool or a Ray actor (manager.py, local.py, parallel.py, ray_actor.py); the LLM judge and reward
model (llm_judge.py, model_worker.py), combined in scoring.py; math grading (math_grading.py); the code sandbox."""
