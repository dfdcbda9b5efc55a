#!/usr/bin/env bash
# Partitioned graphs on the device machine: one device whole, one device in blocks, every
# device in blocks, beside PyTorch at n = 2^20, in one run. Carry `.gl` and a binary built
# without HDF5 (KNNG=path, default target/device/knng).
#   bash scripts/partition_bench.sh [SIZES...]   (default sizes: 1048576 2097152)
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
K=${KNNG:-./target/device/knng}
info=$($K info)
echo "$info" | grep -E '^\[[0-9]+\]'
# Every NVIDIA adapter on Vulkan, by index.
gpus=$(echo "$info" | awk '/^\[[0-9]+\] NVIDIA/ {i=$1; gsub(/[][]/, "", i)} /backend Vulkan/ && i != "" {print i; i=""}' | paste -sd, -)
[ -n "$gpus" ] || { echo "no NVIDIA adapter on Vulkan: stopping"; exit 1; }
echo "devices: $gpus"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 scripts/torch_knn.py graph --n 1048576 --d 128 --k 16 --reps 1
for n in "${@:-1048576 2097152}"; do
    for n1 in $n; do
        echo "== n=$n1 d=128 k=16"
        echo "-- one device, whole";      $K bench --n "$n1" --d 128 -k 16 --repeat 1 -q
        echo "-- one device, 4 blocks";   $K bench --n "$n1" --d 128 -k 16 --repeat 1 -q --block-rows $((n1 / 4))
        echo "-- devices $gpus";          $K bench --n "$n1" --d 128 -k 16 --repeat 1 -q --devices "$gpus"
    done
done
echo "== exactness: demo n=2^20, devices $gpus, 512 rows checked"
$K demo --n 1048576 --d 128 -k 16 --check 512 --devices "$gpus" 2>&1 | tail -3
