#!/usr/bin/env bash
# CPU code example (`make demo-code`): build a tiny Qwen2 offline, generate the "read a and b, print their sum /
# difference / product / maximum" tasks, give the model a format-only warm start (an SFT run: it answers with one of
# the four programs at random), then train it with GRPO against the sandboxed code reward on 2 CPU worker processes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-outputs/cpu_code}
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
start=$(date +%s)
mkdir -p "$OUT"
"$PY" -m verl.models.tiny_models --kind qwen2 --output "$OUT/tiny-qwen2"
"$PY" examples/cpu_code/make_data.py --output "$OUT/data"
rm -rf "$OUT/warm_start" "$OUT/run"
"$PY" -m verl.sft.main config=examples/cpu_code/sft.yaml data.train_files="$OUT/data/train_sft.jsonl" \
    worker.model.model_path="$OUT/tiny-qwen2" trainer.save_checkpoint_path="$OUT/warm_start"
"$PY" -m verl.trainer.main config=examples/cpu_code/config.yaml \
    data.train_files="$OUT/data/train.jsonl" data.val_files="$OUT/data/val.jsonl" \
    worker.actor.model.model_path="$OUT/warm_start/huggingface" trainer.save_checkpoint_path="$OUT/run" "$@"
summary=$("$PY" scripts/plot_metrics.py --log_dir "$OUT/run" --output "$OUT/code.png" --accuracy_key val/pass_rate_reward)
echo "$summary; wall time $(( $(date +%s) - start )) s"
