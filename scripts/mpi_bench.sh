#!/bin/bash
# The MPI issue's device run, in one command on the device machine. Carry .gl and a release
# build with `--features mpi`. The lent machines (Ubuntu 24.04) have Open MPI 4.1.6, whose
# libmpi.so.40 the binary built here against Debian's 4.1.4 links to; only where a machine has
# no mpirun are the runtime debs carried in .mpi unpacked (never over another Open MPI: mixing
# PMIx versions crashes mpirun).
#   GPU: graph n=2^21 d=128 k=16, one process, then R = 1, 2, 4 ranks sharing the one GPU;
#   CPU backend: graph n=2^17 d=128 k=16 (2^21 would take the CPU backend about 20 min), the
#   same ranks sharing the cores.
# Every multi-rank output must be byte-identical to the one-process output.
set -u
KNNG=${KNNG:-./target/release/knng}
DIR=${DIR:-/tmp/mpi}
GPU_ROWS=${GPU_ROWS:-2097152}
CPU_ROWS=${CPU_ROWS:-131072}
mkdir -p "$DIR"
if ! command -v mpirun > /dev/null; then
    for f in .mpi/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
mpirun --version | head -1
# Containers forbid the cross-memory attach of Open MPI's shared-memory transport.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
$KNNG info | head -3
$MPIRUN -np 2 $KNNG info 2>&1 | head -8
python3 - "$DIR" "$GPU_ROWS" "$CPU_ROWS" <<'PY'
import sys, numpy as np
d, g, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(30)
x = rng.standard_normal((g, 128), dtype=np.float32)
np.save(f"{d}/gpu.npy", x)
np.save(f"{d}/cpu.npy", x[:c])
PY
t() { local s=$EPOCHREALTIME; "$@" > "$DIR/last.log" 2>&1; local rc=$?; awk -v a="$s" -v b="$EPOCHREALTIME" -v rc=$rc 'BEGIN { printf "%.2f s rc=%d", b - a, rc }'; [ $rc = 0 ] || tail -5 "$DIR/last.log"; }
for backend in gpu cpu; do
    echo "== $backend: one process: $(t $KNNG graph $DIR/$backend.npy -k 16 --backend $backend -o $DIR/$backend-1p.npz)"
    grep -E "graph:|backend" "$DIR/last.log" | head -3
    for r in 1 2 4; do
        echo "== $backend: mpirun -np $r: $(t $MPIRUN -np $r $KNNG graph $DIR/$backend.npy -k 16 --backend $backend -o $DIR/$backend-$r.npz)"
        grep -E "graph:|shared by" "$DIR/last.log" | head -2
        cmp -s "$DIR/$backend-1p.npz" "$DIR/$backend-$r.npz" && echo "   identical to one process" || echo "   DIFFERS from one process"
    done
done
