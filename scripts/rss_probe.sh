#!/usr/bin/env bash
# Resident memory (anonymous and file-backed) of graphs of 2^19 x 128 sampled every 3 s on
# the device machine: unbounded, under --max-memory 64MiB, and in blocks of 65536 rows.
# Carry `.gl` and a binary built without HDF5 at target/device/knng.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
K=./target/device/knng
$K info | grep -E '^\[[0-9]+\]'
W=/tmp/probe; mkdir -p $W/scratch
python3 -c "
import numpy as np
np.save('$W/x.npy', np.random.default_rng(0).standard_normal((1 << 19, 128), dtype=np.float32))"
probe() {
  echo "== $*"
  "$@" & pid=$!
  t=0
  while kill -0 $pid 2>/dev/null; do
    sleep 3; t=$((t+3))
    grep -E 'VmRSS|RssAnon|RssFile|RssShmem' /proc/$pid/status 2>/dev/null | tr -s ' \n' ' '; echo " t=$t"
    if [ $t -ge 90 ]; then kill $pid; fi
  done
  wait $pid; echo "exit $?"
}
probe $K graph $W/x.npy -k 16 -o $W/a.ivecs -q
probe $K graph $W/x.npy -k 16 -o $W/b.ivecs --max-memory 64MiB --scratch $W/scratch
probe $K graph $W/x.npy -k 16 -o $W/c.ivecs -q --block-rows 65536
cmp $W/a.ivecs $W/b.ivecs && echo same-b; cmp $W/a.ivecs $W/c.ivecs && echo same-c
