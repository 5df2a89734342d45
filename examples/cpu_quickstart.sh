#!/usr/bin/env bash
# CPU quickstart: build a tiny Qwen2.5-VL model offline, then check the quickstart config.
# The full GRPO training run on the synthetic shape-counting task lands with the trainer issue.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-outputs/cpu_quickstart}
mkdir -p "$OUT"
"$PY" -m verl.utils.tiny_models --kind qwen2_5_vl --output "$OUT/tiny-vl"
echo "built $OUT/tiny-vl; the training run of the quickstart is not implemented yet (trainer issue)."
