#!/usr/bin/env python3
"""knng's cover tree against mlpack's cover tree, scikit-learn's BallTree and knng's brute
force, on data of low intrinsic dimension and on data that fills its space: kNN graphs,
each tool timed as a whole process on the same `.npy`; knng's two graphs must be identical.

    pip install numpy scikit-learn mlpack
    python3 scripts/tree_bench.py                       # the issue's three data sets
    python3 scripts/tree_bench.py --n 20000 --only manifold
    KNNG=path python3 scripts/tree_bench.py             # another build

Data sets: (a) manifolds of intrinsic dimension M in D columns: `flat-M-D`, M uniform
coordinates through a random linear map, and `curved-M-D`, M angles through random sinusoids
(a manifold that folds many times); (b) `digits`: scikit-learn's 1797 x 64 digits; (c) `normal-D`:
standard normal rows. Each line: the wall time of every tool (seconds, whole process) and
knng's cover tree as a fraction of each peer.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

KNNG = os.environ.get("KNNG", "./target/release/knng")

PEER = r"""
import sys, numpy as np
tool, path, k, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
x = np.load(path)
if tool == "mlpack":
    import mlpack
    r = mlpack.knn(reference=x, k=k, tree_type="cover")
    idx = r["neighbors"]
elif tool == "balltree":
    from sklearn.neighbors import BallTree
    _, idx = BallTree(x).query(x, k=k + 1)
    idx = idx[:, 1:]
np.save(out, np.asarray(idx, dtype=np.int64))
"""


def flat(rng, n, m, d):
    """M uniform coordinates through a random linear map into D columns."""
    return (rng.uniform(0.0, 1.0, (n, m)) @ rng.standard_normal((m, d))).astype(np.float32)


def curved(rng, n, m, d):
    """M angles through random sinusoids into D columns: the manifold folds many times."""
    which = rng.integers(0, m, d)
    freq = rng.uniform(0.5, 3.0, d)
    phase = rng.uniform(0.0, 6.3, d)
    angles = rng.uniform(0.0, 6.3, (n, m))
    return np.sin(freq * angles[:, which] + phase).astype(np.float32)


def data_sets(args, rng):
    if args.only in (None, "manifold"):
        for m, d in [(2, 64), (4, 128), (6, 784)]:
            yield f"flat-{m}-{d}", flat(rng, args.n, m, d)
        for m, d in [(2, 64), (4, 128)]:
            yield f"curved-{m}-{d}", curved(rng, args.n, m, d)
    if args.only in (None, "digits"):
        from sklearn.datasets import load_digits

        yield "digits", load_digits().data.astype(np.float32)
    if args.only in (None, "normal"):
        yield "normal-32", rng.standard_normal((args.n, 32)).astype(np.float32)


def timed(cmd, limit=None):
    """Wall seconds of `cmd`, or None past `limit` seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return elapsed


def knng_graph(path, k, algorithm, out):
    cmd = [KNNG, "graph", path, "-k", str(k), "--backend", "cpu", "--algorithm", algorithm, "-o", out, "--quiet"]
    return timed(cmd)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000, help="rows of the generated sets")
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--only", choices=["manifold", "digits", "normal"])
    p.add_argument("--skip", default="", help="comma-separated tools to leave out: mlpack,balltree,brute")
    p.add_argument("--limit", type=float, default=900, help="seconds a peer may take before it is stopped")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    rng = np.random.default_rng(33)
    with tempfile.TemporaryDirectory() as tmp:
        peer = os.path.join(tmp, "peer.py")
        with open(peer, "w") as f:
            f.write(PEER)
        print(f"{'data':>16} {'n':>7} {'covertree':>10} {'brute':>8} {'mlpack':>8} {'balltree':>9}  ratios (cover tree / peer)")
        for name, x in data_sets(args, rng):
            path = os.path.join(tmp, f"{name}.npy")
            np.save(path, x)
            times = {}
            cover, brute = os.path.join(tmp, "cover.npz"), os.path.join(tmp, "brute.npz")
            times["covertree"] = knng_graph(path, args.k, "covertree", cover)
            if "brute" not in skip:
                times["brute"] = knng_graph(path, args.k, "brute", brute)
                a, b = np.load(cover), np.load(brute)
                if not (np.array_equal(a["indices"], b["indices"]) and np.array_equal(a["distances"], b["distances"])):
                    sys.exit(f"{name}: the cover tree's graph differs from the brute force's")
            for tool in ("mlpack", "balltree"):
                if tool not in skip:
                    cmd = [sys.executable, peer, tool, path, str(args.k), os.path.join(tmp, f"{tool}.npy")]
                    times[tool] = timed(cmd, args.limit)
            def cell(t, w):
                if t not in times:
                    return f"{'-':>{w}}"
                return f"{times[t]:>{w}.2f}" if times[t] is not None else f"{'>' + str(int(args.limit)):>{w}}"

            cells = " ".join(cell(t, w) for t, w in [("covertree", 10), ("brute", 8), ("mlpack", 8), ("balltree", 9)])
            ratios = ", ".join(
                f"{t} {times['covertree'] / times[t]:.2f}" if times[t] is not None else f"{t} <{times['covertree'] / args.limit:.2f}"
                for t in ("brute", "mlpack", "balltree")
                if t in times
            )
            print(f"{name:>16} {x.shape[0]:>7} {cells}  {ratios}", flush=True)


if __name__ == "__main__":
    main()
