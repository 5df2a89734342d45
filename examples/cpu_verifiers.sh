#!/usr/bin/env bash
# CPU verifiers example (`make demo-verifiers`): build a tiny Qwen2 offline, export the tool taskset
# examples/envs/verifiers_sum.py as training rows, then train it with GRPO for a few steps on 2 CPU worker processes,
# each episode run by verifiers' harness and tool server. Needs the `verifiers` extra (in `dev`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-outputs/cpu_verifiers}
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
start=$(date +%s)
mkdir -p "$OUT"
"$PY" -m verl.models.tiny_models --kind qwen2 --output "$OUT/tiny-qwen2"
"$PY" -m verl.envs.verifiers_env export --env examples/envs/verifiers_sum.py:SumTaskset --output "$OUT/sum.jsonl"
rm -rf "$OUT/run"
"$PY" -m verl.trainer.main config=examples/cpu_verifiers/config.yaml data.train_files="$OUT/sum.jsonl" \
    worker.actor.model.model_path="$OUT/tiny-qwen2" trainer.save_checkpoint_path="$OUT/run" "$@"
"$PY" scripts/plot_metrics.py --log_dir "$OUT/run" --output "$OUT/verifiers.png" --reward_key env/reward/mean
"$PY" - "$OUT/run/experiment_log.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if "env/reward/mean" in line]
print("taskset reward (env/reward/mean) by step:", ", ".join(f"{row['env/reward/mean']:.2f}" for row in rows))
PY
echo "wall time $(( $(date +%s) - start )) s; plot: $OUT/verifiers.png"
