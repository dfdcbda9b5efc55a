#!/bin/bash
# The low-dimensional issue's device run, in one command on the device machine (carry .gl
# and target/release/knng; numpy is there, scipy where installed): whole-process times of
# `knng graph` by the kd-tree (the host's threads) and by GPU brute force, beside scipy's
# cKDTree(X).query(X, k + 1, workers=-1) on the same .npy. The two knng answers must have
# equal distance arrays (indices may differ only among ties).
set -u
KNNG=${KNNG:-./target/release/knng}
DIR=${DIR:-/tmp/lowdim}
mkdir -p "$DIR"
$KNNG info | head -3
nproc
python3 - "$DIR" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(20261126)
def save(name, x):
    np.save(f"{d}/{name}.npy", x.astype(np.float32))
save("normal_1e6_2", rng.normal(size=(10**6, 2)))
save("exponential_1e6_2", rng.exponential(size=(10**6, 2)))
save("normal_4e6_3", rng.normal(size=(4 * 10**6, 3)))
save("normal_1e6_4", rng.normal(size=(10**6, 4)))
save("uniform_1e6_6", rng.uniform(size=(10**6, 6)))
save("rounded_1e6_2", np.round(rng.normal(size=(10**6, 2)) * 100) / 100)
PY
cat > "$DIR/ckd.py" <<'PY'
import sys, time, numpy as np
from scipy.spatial import cKDTree
x = np.load(sys.argv[1]); k = int(sys.argv[2])
d, i = cKDTree(x).query(x, k=k + 1, workers=-1)
np.savez(sys.argv[3], indices=i[:, 1:], distances=d[:, 1:].astype(np.float32))
PY
python3 -c "import scipy; print('scipy', scipy.__version__)" || echo "no scipy: cKDTree rows skipped"
t() { local s=$EPOCHREALTIME; "$@" > /dev/null 2>&1; local rc=$?; awk -v a="$s" -v b="$EPOCHREALTIME" -v rc=$rc 'BEGIN { printf "%.2f s rc=%d", b - a, rc }'; }
for f in normal_1e6_2 exponential_1e6_2 normal_4e6_3 normal_1e6_4 uniform_1e6_6 rounded_1e6_2; do
    for k in 16; do
        echo "== $f k=$k"
        echo "knng kdtree: $(t $KNNG graph $DIR/$f.npy -k $k --algorithm kdtree -q -o $DIR/kd.npz)"
        echo "knng gpu brute: $(t $KNNG graph $DIR/$f.npy -k $k --algorithm brute --backend gpu -q -o $DIR/gpu.npz)"
        python3 -c "import scipy" 2>/dev/null && echo "cKDTree: $(t python3 $DIR/ckd.py $DIR/$f.npy $k $DIR/ckd.npz)"
        python3 - $DIR <<'PY'
import sys, numpy as np
d = sys.argv[1]
a, b = np.load(f"{d}/kd.npz"), np.load(f"{d}/gpu.npz")
print("distances equal:", np.array_equal(a["distances"], b["distances"]), "indices equal:", (a["indices"] == b["indices"]).mean())
PY
    done
done
