#!/usr/bin/env bash
# Train MicroCoder-GRPO on a Cloud TPU VM (single host or a multi-host pod slice).
#
#   TPU_NAME=mc ZONE=us-central2-b ACCELERATOR=v4-8 launch/tpu_vm.sh create
#   TPU_NAME=mc ZONE=us-central2-b launch/tpu_vm.sh setup            # code + deps on every host
#   TPU_NAME=mc ZONE=us-central2-b MODEL=Qwen/Qwen3-1.7B launch/tpu_vm.sh weights
#   TPU_NAME=mc ZONE=us-central2-b launch/tpu_vm.sh data shards/train-*.jsonl  # copy to every host
#   TPU_NAME=mc ZONE=us-central2-b CONFIG=configs/qwen3_1p7b_microcoder.py \
#       WORKDIR=/mnt/shared/runs/1p7b-mc launch/tpu_vm.sh train
#   TPU_NAME=mc ZONE=us-central2-b launch/tpu_vm.sh logs | delete
#
# Every command runs on all hosts (--worker=all): JAX needs the same program on each host of a
# slice, and jax.distributed.initialize() finds the other hosts by itself on Cloud TPU. On a
# multi-host slice WORKDIR must be a directory every host sees (Filestore/NFS or a gcsfuse mount of
# a bucket) so that checkpoints are shared; training data is copied to each host by `data`.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME}"
: "${ZONE:?set ZONE}"
ACCELERATOR=${ACCELERATOR:-v4-8}
RUNTIME=${RUNTIME:-tpu-ubuntu2204-base}
PROJECT_FLAG=${PROJECT:+--project=$PROJECT}
REMOTE_DIR=${REMOTE_DIR:-microcoder_jax}
MODEL=${MODEL:-Qwen/Qwen3-1.7B}
MODEL_DIR=${MODEL_DIR:-\$HOME/models/$(basename "$MODEL")}
CONFIG=${CONFIG:-configs/qwen3_1p7b_microcoder.py}
WORKDIR=${WORKDIR:-\$HOME/runs/$(basename "$CONFIG" .py)}
DATA=${DATA:-\$HOME/data/*.jsonl}
EXTRA=${EXTRA:-}

on_all() {  # run a shell command on every host of the slice
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=all --command="$1"
}

case "${1:-}" in
  create)
    gcloud compute tpus tpu-vm create "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG \
      --accelerator-type="$ACCELERATOR" --version="$RUNTIME" ;;
  setup)
    root=$(git rev-parse --show-toplevel)
    tar -C "$root" --exclude=.git --exclude=.venv -czf /tmp/microcoder_jax.tgz .
    gcloud compute tpus tpu-vm scp /tmp/microcoder_jax.tgz "$TPU_NAME":/tmp/ --zone="$ZONE" \
      $PROJECT_FLAG --worker=all
    on_all "mkdir -p $REMOTE_DIR && tar -C $REMOTE_DIR -xzf /tmp/microcoder_jax.tgz && \
      cd $REMOTE_DIR && python3 -m pip install -q -U pip && python3 -m pip install -q -e '.[tpu]' && \
      python3 -c 'import jax; print(jax.process_index(), jax.local_device_count(), jax.device_count())'" ;;
  data)
    shift
    [ "$#" -gt 0 ] || { echo "usage: launch/tpu_vm.sh data FILE..." >&2; exit 2; }
    on_all "mkdir -p \$HOME/data"
    gcloud compute tpus tpu-vm scp "$@" "$TPU_NAME":data/ --zone="$ZONE" $PROJECT_FLAG --worker=all ;;
  weights)
    on_all "python3 -m pip install -q -U huggingface_hub && \
      python3 -c \"from huggingface_hub import snapshot_download as d; d('$MODEL', local_dir='$MODEL_DIR')\"" ;;
  train)
    on_all "cd $REMOTE_DIR && nohup python3 -m microcoder_jax.train --config $CONFIG \
      --workdir $WORKDIR --config.model.path=$MODEL_DIR --config.data.train_files=\"$DATA\" \
      $EXTRA > train.log 2>&1 &" ;;
  logs)
    gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --worker=0 \
      --command="tail -n 50 -f $REMOTE_DIR/train.log" ;;
  delete)
    gcloud compute tpus tpu-vm delete "$TPU_NAME" --zone="$ZONE" $PROJECT_FLAG --quiet ;;
  *)
    sed -n '2,15p' "$0"; exit 2 ;;
esac
