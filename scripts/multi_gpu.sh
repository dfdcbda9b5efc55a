#!/usr/bin/env bash
# Graphs d=128 k=16 of N standard-normal f32 rows (first argument, default 2^22) on the
# device machine through the command line, once for each device list of the second argument
# (default "0 0,1 0,1,2,3"), in one run: wall time of each, each output compared byte for
# byte with the first list's, sampled rows of the last checked in float64. Carry `.gl` and a
# binary built without HDF5 (KNNG=path, default target/device/knng). LIMIT: seconds a run
# may take before it is stopped.
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
        | grep -E "wrote|blocks|rror" | tail -3
    echo "   exit ${PIPESTATUS[0]}, wall $(python3 -c "import time; print(f'{time.time() - $start:.2f}')") s"
}
same() {
    cmp -s "$W/out$1.ivecs" "$W/out$2.ivecs" && cmp -s "$W/out$1.fvecs" "$W/out$2.fvecs" \
        && echo "$2: identical to $1" || echo "$2: DIFFERS from $1"
}
N=${1:-4194304}
LISTS=(${2:-0 0,1 0,1,2,3})
data "$N"
for devices in "${LISTS[@]}"; do run "$N" "$devices"; done
for devices in "${LISTS[@]:1}"; do same "$N-${LISTS[0]}" "$N-$devices"; done
python3 scripts/check_rows.py "$W/x$N.npy" "$W/out$N-${LISTS[-1]}.ivecs" --rows 64
