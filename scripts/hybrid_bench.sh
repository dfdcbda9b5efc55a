#!/bin/bash
# The hybrid join's device run (issue table: 10^7 points of the paper's uniform and
# exponential distributions), in one command on the device machine (carry .gl and
# target/release/knng; numpy and scipy are there): whole-process times of `knng graph` by the
# hybrid join and by the kd-tree alone, beside scipy's cKDTree(X).query(X, k + 1,
# workers=-1) on the same .npy, and the rows the GPU grid took and proved. The hybrid's and
# the kd-tree's outputs must be byte-identical (both exact, ties by index).
# `hybrid_bench.sh 2 4` runs those dimensions (default 2 4 6); KS="8 32" sets the k's, N the
# points, DISTS the distributions (default "uniform exponential"); BRUTE=1 adds GPU brute
# force, CKD=0 leaves cKDTree out, BASE=path/to/knng adds that build's hybrid (an A/B in one
# command). A first run on a small file fills the driver's shader cache, which a fresh
# machine's first GPU command would otherwise pay for.
set -u
KNNG=${KNNG:-./target/release/knng}
DIR=${DIR:-/tmp/hybrid}
N=${N:-10000000}
mkdir -p "$DIR"
$KNNG info | head -3
nproc
DIMS=${*:-2 4 6}
python3 - "$DIR" "$N" "${DISTS:-uniform exponential}" $DIMS <<'PY'
import sys, numpy as np
d, n, dists = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
rng = np.random.default_rng(20261127)
for dims in map(int, sys.argv[4:]):
    u = rng.uniform(size=(n, dims)).astype(np.float32)
    # The paper's exponential data: rate 40.
    e = rng.exponential(1 / 40, size=(n, dims)).astype(np.float32)
    for name, x in (("uniform", u), ("exponential", e)):
        if name in dists:
            np.save(f"{d}/{name}_{dims}.npy", x)
PY
cat > "$DIR/ckd.py" <<'PY'
import sys, numpy as np
from scipy.spatial import cKDTree
x = np.load(sys.argv[1]); k = int(sys.argv[2])
d, i = cKDTree(x).query(x, k=k + 1, workers=-1)
PY
python3 -c "import numpy as np; np.save('$DIR/warm.npy', np.random.default_rng(0).uniform(size=(100000, 2)).astype(np.float32))"
$KNNG graph "$DIR/warm.npy" -k 8 --algorithm hybrid -q -o "$DIR/warm.npz"
[ -n "${BASE:-}" ] && $BASE graph "$DIR/warm.npy" -k 8 --algorithm hybrid -q -o "$DIR/warm.npz"
t() { local s=$EPOCHREALTIME; "$@" > "$DIR/out" 2>&1; local rc=$?; awk -v a="$s" -v b="$EPOCHREALTIME" -v rc=$rc 'BEGIN { printf "%.2f s rc=%d", b - a, rc }'; }
for dims in $DIMS; do
    for dist in ${DISTS:-uniform exponential}; do
        ks=${KS:-8 32}
        [ "$dims" = 2 ] && [ -z "${KS:-}" ] && ks="8 32 128"
        for k in $ks; do
            f=$DIR/${dist}_$dims.npy
            echo "== $dist d=$dims k=$k"
            echo "knng hybrid: $(t $KNNG graph $f -k $k --algorithm hybrid -o $DIR/h.npz) | $(grep -o 'by the GPU grid[^;]*' $DIR/out)"
            echo "knng kdtree: $(t $KNNG graph $f -k $k --algorithm kdtree -q -o $DIR/kd.npz)"
            cmp -s $DIR/h.npz $DIR/kd.npz && echo "outputs identical" || echo "OUTPUTS DIFFER"
            if [ -n "${BASE:-}" ]; then
                echo "base hybrid: $(t $BASE graph $f -k $k --algorithm hybrid -o $DIR/hb.npz) | $(grep -o 'by the GPU grid[^;]*' $DIR/out)"
                cmp -s $DIR/hb.npz $DIR/kd.npz && echo "base output identical" || echo "BASE OUTPUT DIFFERS"
            fi
            [ "${BRUTE:-0}" = 1 ] && echo "knng GPU brute: $(t $KNNG graph $f -k $k --algorithm brute --backend gpu -q -o $DIR/b.npz)"
            [ "${CKD:-1}" = 1 ] && echo "cKDTree: $(t python3 $DIR/ckd.py $f $k)"
        done
    done
done
