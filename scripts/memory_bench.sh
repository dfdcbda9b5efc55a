#!/usr/bin/env bash
# Graphs under memory limits on the device machine, in one run: the data (2^21 x 128 f32,
# 1 GiB) 8x --max-memory beside the unbounded run, with wall time, peak resident memory
# (getrusage, and the anonymous and file-backed parts sampled from /proc) and sampled rows
# checked in float64; `knng bench` and PyTorch at 2^20 beside them. GPU_MEMORY=1 adds the
# run whose data is 8x --gpu-memory. Carry `.gl` and a binary built without HDF5 (KNNG=path,
# default target/device/knng).
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
K=${KNNG:-./target/device/knng}
$K info | grep -E '^\[[0-9]+\]' | tee /tmp/adapters
grep -q NVIDIA /tmp/adapters || { echo "no NVIDIA adapter: stopping"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W=${WORK:-/tmp/knng-memory}
mkdir -p "$W/scratch"
python3 -c "
import numpy as np
np.save('$W/x.npy', np.random.default_rng(0).standard_normal((1 << 21, 128), dtype=np.float32))"
# Wall seconds and peak resident memory of a command: getrusage of the child, and the
# largest anonymous and file-backed parts seen in /proc every 0.2 s.
timed() {
    python3 - "$@" <<'PY'
import os, resource, subprocess, sys, time
t = time.time()
p = subprocess.Popen(sys.argv[1:])
peak = {"RssAnon": 0, "RssFile": 0, "RssShmem": 0}
limit = float(os.environ.get("LIMIT", "1e9"))
while p.poll() is None:
    try:
        for line in open(f"/proc/{p.pid}/status"):
            key, _, value = line.partition(":")
            if key in peak:
                peak[key] = max(peak[key], int(value.split()[0]) // 1024)
    except OSError:
        pass
    if time.time() - t > limit:
        p.kill()
    time.sleep(0.2)
rc = p.wait()
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
parts = ", ".join(f"{k} {v} MiB" for k, v in peak.items())
print(f"   wall {time.time() - t:.2f} s, peak RSS {rss:.0f} MiB (sampled peaks: {parts}), exit {rc}", flush=True)
PY
}
python3 scripts/torch_knn.py graph --n 1048576 --d 128 --k 16 --reps 1
for n in 1048576 2097152; do
    echo "-- bench n=$n d=128 k=16, one GPU"
    $K bench --n "$n" --d 128 -k 16 --repeat 1 -q --devices 0
done
echo "== graph of $W/x.npy (2^21 x 128), k=16, one GPU"
echo "-- unbounded";            timed $K graph "$W/x.npy" -k 16 -o "$W/whole.ivecs" --devices 0
echo "-- --max-memory 128MiB";  timed $K graph "$W/x.npy" -k 16 -o "$W/host.ivecs" --devices 0 --max-memory 128MiB --scratch "$W/scratch"
outs="host"
if [ "${GPU_MEMORY:-0}" = 1 ]; then
    echo "-- --gpu-memory 128MiB"; timed $K graph "$W/x.npy" -k 16 -o "$W/gpu.ivecs" --devices 0 --gpu-memory 128MiB
    outs="host gpu"
fi
for o in $outs; do
    cmp -s "$W/whole.ivecs" "$W/$o.ivecs" && cmp -s "$W/whole.fvecs" "$W/$o.fvecs" && echo "$o: identical to unbounded" || echo "$o: DIFFERS"
done
python3 scripts/check_rows.py "$W/x.npy" "$W/host.ivecs" --rows 64
ls "$W/scratch" | head
