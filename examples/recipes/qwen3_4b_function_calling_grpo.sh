#!/usr/bin/env bash
# Single-turn function calling (ToolRL-style): each row's tools are described in its prompt (data.tools_key), the
# model answers with its calls, and examples/reward_function/tool_call.py scores them against the row's expected
# calls (nothing is run). Salesforce/xlam-function-calling-60k is gated: accept its terms on the Hub and log in
# (`hf auth login`) first. Its `tools` and `answers` columns are JSON strings, read as such. The base config's math
# validation set and math prompt template are switched off (its one split has no held-out part: pass a file of the
# same columns as data.val_files to validate).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    data.train_files=Salesforce/xlam-function-calling-60k@train \
    data.val_files= \
    trainer.val_freq=-1 \
    data.format_prompt=null \
    data.prompt_key=query \
    data.answer_key=answers \
    data.tools_key=tools \
    worker.actor.model.model_path=Qwen/Qwen3-4B \
    worker.rollout.n=8 \
    worker.reward.reward_function=./examples/reward_function/tool_call.py:compute_score \
    trainer.experiment_name=qwen3_4b_function_calling_grpo \
    "$@"
