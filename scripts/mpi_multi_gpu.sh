#!/bin/bash
# The MPI issue's multi-GPU device run on a kind with two GPUs, in two commands (each under
# the 10-minute limit; the machine stays warm between them):
#   bash scripts/mpi_multi_gpu.sh devices   # make the data; one process with --devices 0,1
#   bash scripts/mpi_multi_gpu.sh ranks     # mpirun -np 2: one rank per GPU; compare bytes
# graph n=2^23 d=128 k=16 (standard normal). Carry .gl and a `--features mpi` release build.
set -u
KNNG=${KNNG:-./target/release/knng}
DIR=${DIR:-/tmp/mpi2}
ROWS=${ROWS:-8388608}
mkdir -p "$DIR"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
t() { local s=$EPOCHREALTIME; "$@" > "$DIR/last.log" 2>&1; local rc=$?; awk -v a="$s" -v b="$EPOCHREALTIME" -v rc=$rc 'BEGIN { printf "%.2f s rc=%d", b - a, rc }'; [ $rc = 0 ] || tail -5 "$DIR/last.log"; }
$KNNG info | head -4
case "${1:-}" in
devices)
    python3 -c "
import numpy as np
np.save('$DIR/data.npy', np.random.default_rng(23).standard_normal(($ROWS, 128), dtype=np.float32))"
    echo "== one process, --devices 0,1: $(t $KNNG graph $DIR/data.npy -k 16 --devices 0,1 -o $DIR/devices.npz)"
    grep -E "graph:|backend" "$DIR/last.log"
    ;;
ranks)
    echo "== mpirun -np 2 (one rank per GPU): $(t mpirun --allow-run-as-root --bind-to none -np 2 $KNNG graph $DIR/data.npy -k 16 -o $DIR/ranks.npz)"
    grep -E "graph:|backend|shared by" "$DIR/last.log"
    cmp -s "$DIR/devices.npz" "$DIR/ranks.npz" && echo "   identical to the one-process run" || echo "   DIFFERS from the one-process run"
    ;;
esac
