#!/usr/bin/env python3
"""A saved cover-tree index against building the tree on every search, and against brute
force: `knng index build`, then `knng search INDEX.knng`, each a whole process, beside
`knng search CORPUS.npy --algorithm covertree` and `--algorithm brute` on the same files;
every answer must be identical.

    pip install numpy
    python3 scripts/index_bench.py                          # 10^5 rows, 10^4 queries, CPU
    python3 scripts/index_bench.py --n 1000000 --backend auto

Data: manifolds of intrinsic dimension M in D columns (`flat-M-D`: M uniform coordinates
through a random linear map; `curved-M-D`: M angles through random sinusoids), queries drawn
from the same manifold. Each line: seconds of each command (whole process), the index file's
size, and the search through the index as a fraction of the others.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

KNNG = os.environ.get("KNNG", "./target/release/knng")


def flat(rng, n, m, d):
    return (rng.uniform(0.0, 1.0, (n, m)) @ rng.standard_normal((m, d))).astype(np.float32)


def curved(rng, n, m, d):
    which, freq, phase = rng.integers(0, m, d), rng.uniform(0.5, 3.0, d), rng.uniform(0.0, 6.3, d)
    return np.sin(freq * rng.uniform(0.0, 6.3, (n, m))[:, which] + phase).astype(np.float32)


def timed(cmd):
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000, help="corpus rows")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--backend", default="cpu", help="backend of the brute-force search")
    args = p.parse_args()
    rng = np.random.default_rng(5)
    sets = [("flat-2-64", flat, 2, 64), ("flat-4-128", flat, 4, 128), ("curved-2-64", curved, 2, 64)]
    print(f"{'data':>12} {'build':>7} {'MB':>6} {'search':>7} {'again':>7} {'rebuild':>8} {'brute':>7}  index / rebuild, / brute")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, m, d in sets:
            x = make(rng, args.n + args.queries, m, d)
            corpus, queries, index = (os.path.join(tmp, f) for f in ("corpus.npy", "queries.npy", "corpus.knng"))
            np.save(corpus, x[: args.n])
            np.save(queries, x[args.n :])
            build = timed([KNNG, "index", "build", corpus, "-o", index, "--algorithm", "covertree", "-q"])
            outs = {w: os.path.join(tmp, f"{w}.npz") for w in ("index", "again", "rebuild", "brute")}
            search = lambda source, out, *extra: timed(
                [KNNG, "search", source, "--queries", queries, "-k", str(args.k), "-o", out, "-q", *extra]
            )
            t = {
                "index": search(index, outs["index"], "--backend", "cpu"),
                "again": search(index, outs["again"], "--backend", "cpu"),
                "rebuild": search(corpus, outs["rebuild"], "--backend", "cpu", "--algorithm", "covertree"),
                "brute": search(corpus, outs["brute"], "--backend", args.backend, "--algorithm", "brute"),
            }
            answers = [np.load(o) for o in outs.values()]
            for a in answers[1:]:
                if not all(np.array_equal(a[f], answers[0][f]) for f in ("indices", "distances")):
                    sys.exit(f"{name}: the answers differ")
            mb = os.path.getsize(index) / 1e6
            best = min(t["index"], t["again"])
            print(
                f"{name:>12} {build:7.2f} {mb:6.0f} {t['index']:7.2f} {t['again']:7.2f} {t['rebuild']:8.2f} "
                f"{t['brute']:7.2f}  {best / t['rebuild']:.2f}, {best / t['brute']:.2f}"
            )


if __name__ == "__main__":
    main()
