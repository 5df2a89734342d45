#!/usr/bin/env bash
# DAPO: clip-higher, dynamic sampling (online filtering), token-mean loss, no KL, overlong reward shaping, updates
# of 32 prompts' groups (16 a step of 512, the paper's).
# Qwen3 answers without thinking here (data.chat_template_kwargs): a thinking trace does not fit the 2k budget, and
# dapo.py reads the "Answer:" line at the end. For thinking mode drop that line and raise MAX_RESPONSE_LENGTH (the
# DAPO paper: 20480, with a 4096 overlong buffer). Dynamic sampling keeps the groups whose accuracy varies
# (algorithm.filter_key=accuracy: `overall` adds the length penalty and spans [-2, 1]). dapo.py grades as DAPO's own
# scorer does, strictly: a bold "**Answer:** 34" or "Answer: 34." scores -1; watch reward/accuracy early on.
# No validation set: data.prompt_key and data.answer_key serve both files, and math12k's columns (the base config's
# validation set) are named otherwise; pass data.val_files= a split with `prompt` and `solution` columns to validate.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The overlong punishment needs the run's response budget: change it here (not with a data.max_response_length
# argument), so the reward and the rollout agree.
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-2048}
OVERLONG_BUFFER_LEN=${OVERLONG_BUFFER_LEN:-512}
python3 -m verl.trainer.main config=examples/config.yaml \
    data.train_files=open-r1/DAPO-Math-17k-Processed/en@train \
    'data.chat_template_kwargs={enable_thinking: false}' \
    data.val_files= \
    trainer.val_freq=-1 \
    data.prompt_key=prompt \
    data.answer_key=solution \
    data.format_prompt=./examples/format_prompt/dapo.jinja \
    data.max_response_length="${MAX_RESPONSE_LENGTH}" \
    data.mini_rollout_batch_size=256 \
    algorithm.disable_kl=true \
    algorithm.use_kl_loss=false \
    algorithm.online_filtering=true \
    algorithm.filter_key=accuracy \
    worker.actor.clip_ratio_low=0.2 \
    worker.actor.clip_ratio_high=0.28 \
    worker.actor.loss_avg_mode=token-mean \
    worker.actor.global_batch_size=32 \
    worker.actor.model.model_path=Qwen/Qwen3-4B \
    worker.rollout.n=16 \
    worker.reward.reward_function=./examples/reward_function/dapo.py:compute_score \
    "worker.reward.reward_function_kwargs={max_response_length: ${MAX_RESPONSE_LENGTH}, overlong_buffer_len: ${OVERLONG_BUFFER_LEN}, overlong_penalty_factor: 1.0}" \
    trainer.experiment_name=qwen3_4b_math_dapo \
    "$@"
