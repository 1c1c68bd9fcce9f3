#!/usr/bin/env bash
# Train MicroCoder-GRPO on one CUDA machine (all its GPUs form the mesh), after planning it.
#
# usage: [VAR=...] launch/gpu.sh [--dry-run] [-h|--help] [TRAIN FLAGS...]
#
#   MODEL_DIR  the weights: a Hugging Face Qwen3 checkpoint directory (required)
#   CONFIG     config file (configs/paper.py:qwen3-1.7b,microcoder)
#   WORKDIR    run directory (runs/<config name>); rerun the same command to resume
#   DATA       training problem files, globs or commas (e.g. "data/train-*.jsonl")
#   TOPOLOGY   what the planner is given (default: from nvidia-smi, e.g. a100-80gb, with the memory
#              JAX may take: XLA_PYTHON_CLIENT_MEM_FRACTION of the GPU's; a GPU the planner does not
#              name is planned by its memory alone); GPUS the number of GPUs (default: nvidia-smi's)
#   SKIP_PLAN=1  start without planning
#   TRAIN FLAGS are passed on (the --config.* ones to the planner too), e.g. --config.train.steps=100
#   --dry-run  print the environment and the commands instead of running them
#
# First it plans the run for the GPUs it sees (python -m microcoder_jax.plan --topology ...
# --devices N: memory per program against the GPU's, analytic) and refuses to start when
# something does not fit, printing the flags the planner found that fit.
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
# Let XLA overlap collectives with compute, and leave room for the judge's processes.
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
args=(--config="$CONFIG" --workdir="$WORKDIR" --config.model.path="$MODEL_DIR")
[ -n "${DATA:-}" ] && args+=("--config.data.train_files=$DATA")

# The planner's topology for the GPUs here: a chip it knows by name (its FLOP/s and bandwidth), and
# the memory JAX may take of it (XLA_PYTHON_CLIENT_MEM_FRACTION of nvidia-smi's total).
gpu_topology() {
  local name mib gib
  IFS=, read -r name mib <<<"$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits | head -n 1)"
  mib=${mib//[!0-9]/}
  [ -n "$mib" ] || return 1
  gib=$(awk "BEGIN {printf \"%.1f\", $mib * $XLA_PYTHON_CLIENT_MEM_FRACTION / 1024}")
  case "$name" in
    *A100*) if [ "$mib" -gt 50000 ]; then echo "--topology=a100-80gb"; else echo "--topology=a100-40gb"; fi ;;
    *H100*) echo "--topology=h100" ;;
    *H200*) echo "--topology=h200" ;;
    *L4*) echo "--topology=l4" ;;
    *4090*) echo "--topology=rtx4090" ;;
  esac
  echo "--hbm-gib=$gib"
}

if [ "${SKIP_PLAN:-0}" != 1 ]; then
  if [ -n "${TOPOLOGY:-}" ]; then
    where=("--topology=$TOPOLOGY")
  elif command -v nvidia-smi >/dev/null 2>&1 && gpu=$(gpu_topology); then
    mapfile -t where <<<"$gpu"
  else
    echo "gpu.sh: nvidia-smi found no GPU to plan for; set TOPOLOGY (e.g. a100-80gb) and GPUS, or SKIP_PLAN=1" >&2
    exit 1
  fi
  GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
  [ "${GPUS:-0}" -ge 1 ] || { echo "gpu.sh: no GPU counted; set GPUS=N (or SKIP_PLAN=1)" >&2; exit 1; }
  overrides=()
  for a in "$@"; do [[ "$a" == --config.* ]] && overrides+=("$a"); done
  plan=(python -m microcoder_jax.plan --config="$CONFIG" "${where[@]}" --devices="$GPUS"
        --config.model.path="$MODEL_DIR" "${overrides[@]}")
  if [ "$DRY_RUN" = 1 ]; then
    printf '%s' "${plan[0]}"; printf " '%s'" "${plan[@]:1}"; echo
  else
    log=$(mktemp "${TMPDIR:-/tmp}/gpu_plan.XXXXXX")
    status=0
    "${plan[@]}" | tee "$log" || status=$?
    if [ "$status" != 0 ]; then
      fix=$(sed -n 's/^ *suggestion: fits with every change.*: add //p' "$log" | tail -n 1)
      rm -f "$log"
      if [ -n "$fix" ]; then
        echo "gpu.sh: $CONFIG does not fit ${GPUS} GPU(s) as configured; the planner found flags that fit:" >&2
        echo "  $0 $* $fix" >&2
      else
        echo "gpu.sh: the plan check failed (exit $status): $CONFIG does not fit ${GPUS} GPU(s) (${where[*]});" \
             "see the suggestions above, or SKIP_PLAN=1 to start anyway" >&2
      fi
      exit 1
    fi
    rm -f "$log"
  fi
fi

if [ "$DRY_RUN" = 1 ]; then
  echo "export XLA_FLAGS='${XLA_FLAGS# }' XLA_PYTHON_CLIENT_MEM_FRACTION=$XLA_PYTHON_CLIENT_MEM_FRACTION"
  printf 'python -m microcoder_jax.train'; printf " '%s'" "${args[@]}" "$@"; echo
  exit 0
fi
exec python -m microcoder_jax.train "${args[@]}" "$@"
