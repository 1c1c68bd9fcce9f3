#!/usr/bin/env bash
# Train MicroCoder-GRPO on one CUDA machine (all its GPUs form the mesh).
#
# usage: [VAR=...] launch/gpu.sh [--dry-run] [-h|--help] [TRAIN FLAGS...]
#
#   MODEL_DIR  Hugging Face Qwen3 checkpoint directory (required)
#   CONFIG     config file (configs/paper.py:qwen3-1.7b,microcoder)
#   WORKDIR    run directory (runs/<config name>); rerun the same command to resume
#   DATA       training problem files, globs or commas (e.g. "data/train-*.jsonl")
#   TRAIN FLAGS are passed on, e.g. --config.train.steps=100
#   --dry-run  print the environment and the command instead of running it
#
# Example:
#   MODEL_DIR=~/models/Qwen3-1.7B CONFIG=configs/paper.py:qwen3-1.7b,microcoder \
#       WORKDIR=runs/1p7b-mc DATA="data/train-*.jsonl" launch/gpu.sh
#
# Install once with: pip install -e '.[cuda]'. Multi-node: run the same command on every node with
# JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set (jax.distributed reads them).
set -euo pipefail

usage() { sed -n '2,/^set -euo/{s/^# \{0,1\}//;p}' "$0" | sed '$d'; }

DRY_RUN=${DRY_RUN:-0}
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -n|--dry-run) DRY_RUN=1; shift ;;
    *) break ;;
  esac
done
: "${MODEL_DIR:?set MODEL_DIR to a Hugging Face Qwen3 checkpoint directory (see --help)}"
CONFIG=${CONFIG:-configs/paper.py:qwen3-1.7b,microcoder}
run_name=$(basename "${CONFIG%%:*}" .py)  # configs/paper.py:qwen3-1.7b,microcoder -> paper_qwen3-1.7b_microcoder
[[ "$CONFIG" == *:* ]] && run_name="${run_name}_${CONFIG#*:}" && run_name=${run_name//,/_}
WORKDIR=${WORKDIR:-runs/$run_name}
# Let XLA overlap collectives with compute, and leave room for the evaluator's processes.
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
args=(--config="$CONFIG" --workdir="$WORKDIR" --config.model.path="$MODEL_DIR")
[ -n "${DATA:-}" ] && args+=("--config.data.train_files=$DATA")
if [ "$DRY_RUN" = 1 ]; then
  echo "export XLA_FLAGS='${XLA_FLAGS# }' XLA_PYTHON_CLIENT_MEM_FRACTION=$XLA_PYTHON_CLIENT_MEM_FRACTION"
  printf 'python -m microcoder_jax.train'; printf " '%s'" "${args[@]}" "$@"; echo
  exit 0
fi
exec python -m microcoder_jax.train "${args[@]}" "$@"
