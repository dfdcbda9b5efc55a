#!/usr/bin/env bash
# Wide vectors over several GPUs on the device machine, in one run: graph of N x 4096
# standard-normal f32 (N from the first argument, default 2^18), k=512, through the command
# line once for each device list of the second argument (default "0 0,1 0,1,2,3"); wall time
# of each, outputs compared byte for byte with the first list's, sampled rows checked in
# float64, PyTorch on one GPU beside them (TORCH=0 leaves it out). Carry `.gl` and a
# binary built without HDF5 (KNNG=path, default target/device/knng). LIMIT: seconds a run
# may take before it is stopped.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
K=${KNNG:-./target/device/knng}
N=${1:-262144}
$K info | grep -E '^\[[0-9]+\]'
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W=${WORK:-/tmp/knng-wide}
mkdir -p "$W"
python3 -c "
import numpy as np
x = np.lib.format.open_memmap('$W/x.npy', mode='w+', dtype=np.float32, shape=($N, 4096))
rng = np.random.default_rng(0)
for s in range(0, $N, 1 << 16):
    x[s:s + (1 << 16)] = rng.standard_normal((min(1 << 16, $N - s), 4096), dtype=np.float32)
x.flush()"
LISTS=(${2:-0 0,1 0,1,2,3})
[ "${TORCH:-1}" = 0 ] || python3 scripts/torch_knn.py graph --n "$N" --d 4096 --k 512 --reps 1
for devices in "${LISTS[@]}"; do
    echo "-- devices $devices"
    start=$(date +%s.%N)
    timeout "${LIMIT:-600}" $K graph "$W/x.npy" -k 512 -o "$W/out-$devices.ivecs" --devices "$devices"
    echo "   exit $?, wall $(python3 -c "import time; print(f'{time.time() - $start:.2f}')") s"
done
first=${LISTS[0]}
for devices in "${LISTS[@]:1}"; do
    cmp -s "$W/out-$first.ivecs" "$W/out-$devices.ivecs" && cmp -s "$W/out-$first.fvecs" "$W/out-$devices.fvecs" \
        && echo "$devices: identical to $first" || echo "$devices: DIFFERS from $first"
done
python3 scripts/check_rows.py "$W/x.npy" "$W/out-${LISTS[-1]}.ivecs" --rows 16
