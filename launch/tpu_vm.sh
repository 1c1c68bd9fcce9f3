#!/usr/bin/env bash
# Train MicroCoder-GRPO on a Cloud TPU VM (single host or a multi-host pod slice).
#
# usage: launch/tpu_vm.sh [--dry-run] COMMAND [ARGS]
#
#   create     make the slice (ACCELERATOR, RUNTIME)
#   setup      copy the code (tracked and new source files only: no runs/, data_pipeline/,
#              .venv or .git) to every host and pip install it with the TPU extras
#   weights    download MODEL from Hugging Face into MODEL_DIR on every host
#   data FILE...  copy training problem files to ~/data/ on every host
#   plan       check that CONFIG fits the slice (python -m microcoder_jax.plan), on host 0
#   train      plan, then start training on every host (log: REMOTE_DIR/train.log)
#   logs       follow host 0's train.log
#   delete     delete the slice
#   files      list the files `setup` would copy (runs locally)
#
#   --dry-run  print every command (gcloud, tar, ...) instead of running it; also DRY_RUN=1
#   -h, --help this text
#
# Environment: TPU_NAME and ZONE (required for the remote commands), PROJECT, ACCELERATOR (v4-8;
# v5e-N and v5litepod-N are the same slice), TOPOLOGY (what `plan` is given; default ACCELERATOR),
# RUNTIME (the VM image; default by generation: v6e v2-alpha-tpuv6e, v5p v2-alpha-tpuv5, v5e
# v2-alpha-tpuv5-lite, v4 and older tpu-ubuntu2204-base), REMOTE_DIR (microcoder_jax),
# MODEL (Qwen/Qwen3-1.7B), MODEL_DIR, CONFIG (configs/paper.py:qwen3-1.7b,microcoder), WORKDIR, DATA
# (~/data/*.jsonl), EXTRA (more train flags, e.g. "--config.train.steps=100"), SKIP_PLAN=1.
#
# Example:
#   export TPU_NAME=mc ZONE=us-central2-b ACCELERATOR=v4-8
#   launch/tpu_vm.sh create && launch/tpu_vm.sh setup && launch/tpu_vm.sh weights
#   launch/tpu_vm.sh data shards/train-*.jsonl
#   CONFIG=configs/paper.py:qwen3-1.7b,microcoder WORKDIR=/mnt/shared/runs/1p7b-mc launch/tpu_vm.sh train
#
# Every remote command runs on all hosts (--worker=all): JAX needs the same program on each host
# of a slice, and jax.distributed.initialize() finds the other hosts by itself on Cloud TPU. On a
# multi-host slice WORKDIR must be a directory every host sees (Filestore/NFS or a gcsfuse mount).
set -euo pipefail

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^set -euo/,$d'; }

DRY_RUN=${DRY_RUN:-0}
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help|help) usage; exit 0 ;;
    -n|--dry-run) DRY_RUN=1; shift ;;
    *) break ;;
  esac
done
COMMAND=${1:-}
[ -n "$COMMAND" ] || { usage >&2; exit 2; }
shift

ACCELERATOR=${ACCELERATOR:-v4-8}
# gcloud names a v5e slice v5litepod-N; our configs and the planner also say v5e-N: accept both.
case "$ACCELERATOR" in
  v5e-*) ACCELERATOR="v5litepod-${ACCELERATOR#v5e-}" ;;
esac
# The TPU VM software image each generation needs (Cloud TPU's runtime table); RUNTIME overrides it.
case "$ACCELERATOR" in
  v6e-[0-9]*) default_runtime=v2-alpha-tpuv6e ;;
  v5p-[0-9]*) default_runtime=v2-alpha-tpuv5 ;;
  v5litepod-[0-9]*) default_runtime=v2-alpha-tpuv5-lite ;;
  v2-[0-9]*|v3-[0-9]*|v4-[0-9]*) default_runtime=tpu-ubuntu2204-base ;;
  *) echo "error: ACCELERATOR=$ACCELERATOR is not a TPU accelerator type this script knows; use one of" \
          "v4-N, v5p-N, v5e-N (= v5litepod-N), v6e-N (e.g. v5e-8), or v2-N / v3-N" >&2; exit 2 ;;
esac
RUNTIME=${RUNTIME:-$default_runtime}
TOPOLOGY=${TOPOLOGY:-$ACCELERATOR}
REMOTE_DIR=${REMOTE_DIR:-microcoder_jax}
MODEL=${MODEL:-Qwen/Qwen3-1.7B}
MODEL_DIR=${MODEL_DIR:-\$HOME/models/$(basename "$MODEL")}
CONFIG=${CONFIG:-configs/paper.py:qwen3-1.7b,microcoder}
run_name=$(basename "${CONFIG%%:*}" .py)  # configs/paper.py:qwen3-1.7b,microcoder -> paper_qwen3-1.7b_microcoder
[[ "$CONFIG" == *:* ]] && run_name="${run_name}_${CONFIG#*:}" && run_name=${run_name//,/_}
WORKDIR=${WORKDIR:-\$HOME/runs/$run_name}
DATA=${DATA:-\$HOME/data/*.jsonl}
EXTRA=${EXTRA:-}
TARBALL=${TARBALL:-/tmp/microcoder_jax_code.tgz}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

quote() {  # one argument as the shell reads it back: bare when safe, else in single quotes
  case "$1" in
    *[!A-Za-z0-9_./:=@%+,-]*|'') printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
    *) printf '%s' "$1" ;;
  esac
}

run() {  # run a command, or print it (copy-pastable) under --dry-run
  if [ "$DRY_RUN" = 1 ]; then
    local out="" a
    for a in "$@"; do out+="$(quote "$a") "; done
    echo "${out% }"
  else
    "$@"
  fi
}

need_slice() {
  : "${TPU_NAME:?set TPU_NAME (the TPU VM name)}"
  : "${ZONE:?set ZONE (e.g. us-central2-b)}"
  GCLOUD=(gcloud compute tpus tpu-vm)
  SLICE=("$TPU_NAME" "--zone=$ZONE")
  [ -n "${PROJECT:-}" ] && SLICE+=("--project=$PROJECT")
  return 0
}

on_all() { run "${GCLOUD[@]}" ssh "${SLICE[@]}" --worker=all --command="$1"; }
on_first() { run "${GCLOUD[@]}" ssh "${SLICE[@]}" --worker=0 --command="$1"; }

code_files() {  # the source tree as git sees it: tracked + new files, never ignored ones
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files --cached --others --exclude-standard | while read -r f; do
      [ -f "$ROOT/$f" ] && echo "$f"; done
  else  # not a git checkout: everything but the usual outputs
    (cd "$ROOT" && find . -type f -not -path './.git/*' -not -path './.venv/*' -not -path './runs/*' \
      -not -path './data_pipeline/*' -not -name '*.pyc' | sed 's|^\./||')
  fi
}

plan_cmd="cd $REMOTE_DIR && python3 -m microcoder_jax.plan --config=$CONFIG --topology=$TOPOLOGY${EXTRA:+ $EXTRA}"
train_cmd="cd $REMOTE_DIR && nohup python3 -m microcoder_jax.train --config=$CONFIG --workdir=$WORKDIR \
--config.model.path=$MODEL_DIR --config.data.train_files=\"$DATA\"${EXTRA:+ $EXTRA} > train.log 2>&1 &"

case "$COMMAND" in
  files)
    code_files ;;
  create)
    need_slice
    run "${GCLOUD[@]}" create "${SLICE[@]}" --accelerator-type="$ACCELERATOR" --version="$RUNTIME" ;;
  setup)
    need_slice
    if [ "$DRY_RUN" = 1 ]; then
      echo "(cd $(printf '%q' "$ROOT") && git ls-files --cached --others --exclude-standard | tar -czf $TARBALL -T -)"
    else
      code_files | tar -C "$ROOT" -czf "$TARBALL" -T -
    fi
    run "${GCLOUD[@]}" scp "$TARBALL" "$TPU_NAME:/tmp/microcoder_jax_code.tgz" "${SLICE[@]:1}" --worker=all
    on_all "mkdir -p $REMOTE_DIR && tar -C $REMOTE_DIR -xzf /tmp/microcoder_jax_code.tgz && \
cd $REMOTE_DIR && python3 -m pip install -q -U pip && python3 -m pip install -q -e '.[tpu]' && \
python3 -c 'import jax; print(jax.process_index(), jax.local_device_count(), jax.device_count())'" ;;
  data)
    need_slice
    [ "$#" -gt 0 ] || { echo "usage: launch/tpu_vm.sh data FILE..." >&2; exit 2; }
    on_all "mkdir -p \$HOME/data"
    run "${GCLOUD[@]}" scp "$@" "$TPU_NAME:data/" "${SLICE[@]:1}" --worker=all ;;
  weights)
    need_slice
    on_all "python3 -m pip install -q -U huggingface_hub && \
python3 -c \"from huggingface_hub import snapshot_download as d; d('$MODEL', local_dir='$MODEL_DIR')\"" ;;
  plan)
    need_slice
    on_first "$plan_cmd" ;;
  train)
    need_slice
    if [ "${SKIP_PLAN:-0}" != 1 ]; then
      on_first "$plan_cmd" || { echo "tpu_vm.sh: the plan check failed; fix the config (or SKIP_PLAN=1)" >&2; exit 1; }
    fi
    on_all "$train_cmd" ;;
  logs)
    need_slice
    on_first "tail -n 50 -f $REMOTE_DIR/train.log" ;;
  delete)
    need_slice
    run "${GCLOUD[@]}" delete "${SLICE[@]}" --quiet ;;
  *)
    echo "tpu_vm.sh: unknown command '$COMMAND'" >&2; usage >&2; exit 2 ;;
esac
