#!/usr/bin/env bash
# Train MicroCoder-GRPO on one CUDA machine (all its GPUs form the mesh).
#
#   MODEL_DIR=~/models/Qwen3-1.7B CONFIG=configs/qwen3_1p7b_microcoder.py \
#       WORKDIR=runs/1p7b-mc DATA=data/train-*.jsonl launch/gpu.sh
#
# Install once with: pip install -e '.[cuda]'. Multi-node: run the same command on every node with
# JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set (jax.distributed reads them).
set -euo pipefail
: "${MODEL_DIR:?set MODEL_DIR to a Hugging Face Qwen3 checkpoint directory}"
CONFIG=${CONFIG:-configs/qwen3_1p7b_microcoder.py}
WORKDIR=${WORKDIR:-runs/$(basename "$CONFIG" .py)}
# Let XLA overlap collectives with compute, and leave room for the evaluator's processes.
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
args=(--config "$CONFIG" --workdir "$WORKDIR" --config.model.path="$MODEL_DIR")
[ -n "${DATA:-}" ] && args+=("--config.data.train_files=$DATA")
exec python -m microcoder_jax.train "${args[@]}" "$@"
