#!/usr/bin/env bash
# Graphs under memory limits on the device machine, in one run: the data (2^21 x 128 f32,
# 1 GiB) 8x --gpu-memory and 8x --max-memory beside the unbounded run, with wall time, peak
# resident memory and sampled rows checked in float64; one-GPU times of 2^20 and 2^21 and
# PyTorch at 2^20 beside them. Carry `.gl` and a binary built without HDF5 (KNNG=path,
# default target/device/knng).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
K=${KNNG:-./target/device/knng}
$K info | grep -E '^\[[0-9]+\]' | tee /tmp/adapters
grep -q NVIDIA /tmp/adapters || { echo "no NVIDIA adapter: stopping"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W=${WORK:-/tmp/knng-memory}
mkdir -p "$W/scratch"
python3 -c "
import numpy as np
np.save('$W/x.npy', np.random.default_rng(0).standard_normal((1 << 21, 128), dtype=np.float32))"
# Wall seconds and peak resident memory (getrusage of the child) of a command.
timed() {
    python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time()
try:
    rc = subprocess.run(sys.argv[1:], timeout=float(__import__("os").environ.get("LIMIT", "1e9"))).returncode
except subprocess.TimeoutExpired:
    rc = "killed after LIMIT seconds"
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"   wall {time.time() - t:.2f} s, peak RSS {peak:.0f} MiB, exit {rc}")
PY
}
python3 scripts/torch_knn.py graph --n 1048576 --d 128 --k 16 --reps 1
for n in 1048576 2097152; do
    echo "-- bench n=$n d=128 k=16, one GPU"
    $K bench --n "$n" --d 128 -k 16 --repeat 1 -q
done
echo "== graph of $W/x.npy (2^21 x 128), k=16, one GPU"
echo "-- unbounded";            timed $K graph "$W/x.npy" -k 16 -o "$W/whole.ivecs" -q
echo "-- --gpu-memory 128MiB";  timed $K graph "$W/x.npy" -k 16 -o "$W/gpu.ivecs" -q --gpu-memory 128MiB
echo "-- --max-memory 128MiB";  timed $K graph "$W/x.npy" -k 16 -o "$W/host.ivecs" --max-memory 128MiB --scratch "$W/scratch"
for o in gpu host; do
    cmp -s "$W/whole.ivecs" "$W/$o.ivecs" && cmp -s "$W/whole.fvecs" "$W/$o.fvecs" && echo "$o: identical to unbounded" || echo "$o: DIFFERS"
done
python3 scripts/check_rows.py "$W/x.npy" "$W/host.ivecs" --rows 64
