#!/usr/bin/env bash
# Graphs d=128 k=16 over 1, 2 and 4 GPUs on the device machine, in one run: standard-normal
# f32 data of 2^22 rows through the command line on `--devices 0`, `0,1` and `0,1,2,3`
# (outputs compared byte for byte, sampled rows checked in float64), then 2^23 rows on 4 and
# 2 GPUs (compared likewise). Wall time of each run, and the blocks each partitioned run
# took. Carry `.gl` and a binary built without HDF5 (KNNG=path, default
# target/device/knng). LIMIT: seconds a run may take before it is stopped.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
K=${KNNG:-./target/device/knng}
$K info | grep -E '^\[[0-9]+\]'
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W=${WORK:-/tmp/knng-multi}
mkdir -p "$W"
data() {
    python3 -c "
import numpy as np
n = $1
x = np.lib.format.open_memmap('$W/x$1.npy', mode='w+', dtype=np.float32, shape=(n, 128))
rng = np.random.default_rng(0)
for s in range(0, n, 1 << 20):
    x[s:s + (1 << 20)] = rng.standard_normal((min(1 << 20, n - s), 128), dtype=np.float32)
x.flush()"
}
run() {
    local n=$1 devices=$2
    echo "-- n=$n devices $devices"
    start=$(date +%s.%N)
    timeout "${LIMIT:-300}" $K graph "$W/x$n.npy" -k 16 -o "$W/out$n-$devices.ivecs" --devices "$devices" 2>&1 \
        | grep -E "wrote|rror" | tail -2
    echo "   exit ${PIPESTATUS[0]}, wall $(python3 -c "import time; print(f'{time.time() - $start:.2f}')") s"
}
same() {
    cmp -s "$W/out$1.ivecs" "$W/out$2.ivecs" && cmp -s "$W/out$1.fvecs" "$W/out$2.fvecs" \
        && echo "$2: identical to $1" || echo "$2: DIFFERS from $1"
}
data 4194304
for devices in 0 0,1 0,1,2,3; do run 4194304 "$devices"; done
same 4194304-0 4194304-0,1
same 4194304-0 4194304-0,1,2,3
python3 scripts/check_rows.py "$W/x4194304.npy" "$W/out4194304-0,1,2,3.ivecs" --rows 64
rm -f "$W"/x4194304.npy "$W"/out4194304-*
data 8388608
for devices in 0,1,2,3 0,1; do run 8388608 "$devices"; done
same 8388608-0,1,2,3 8388608-0,1
python3 scripts/check_rows.py "$W/x8388608.npy" "$W/out8388608-0,1,2,3.ivecs" --rows 64
