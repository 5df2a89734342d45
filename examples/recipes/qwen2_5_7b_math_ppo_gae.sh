#!/usr/bin/env bash
# PPO with a critic: GAE advantages from a value model initialised from the actor's checkpoint.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    algorithm.adv_estimator=gae \
    algorithm.use_kl_loss=false \
    algorithm.kl_penalty=kl \
    algorithm.kl_coef=1.0e-3 \
    worker.rollout.n=1 \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    worker.critic.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    worker.critic.global_batch_size=128 \
    worker.critic.optim.lr=1e-5 \
    trainer.critic_warmup=0 \
    trainer.experiment_name=qwen2_5_7b_math_ppo_gae \
    "$@"
