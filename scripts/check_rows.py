#!/usr/bin/env python3
"""Checks sampled rows of a knng graph (.ivecs + .fvecs) against a float64 brute force.

    python3 scripts/check_rows.py DATA.npy OUT.ivecs [--rows 64] [--seed 0]

Tie-aware: a row passes when its listed neighbours are k distinct other rows, each no
farther (float64 euclidean) than the true k-th distance, listed in non-decreasing order.
"""
import argparse
import sys

import numpy as np


def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    k = int(raw[0])
    rows = raw.reshape(-1, k + 1)[:, 1:]
    return rows.view(dtype) if dtype != np.int32 else rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("ivecs")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x = np.load(a.data, mmap_mode="r")
    ids = read_vecs(a.ivecs, np.int32)
    dists = read_vecs(a.ivecs[: -len(".ivecs")] + ".fvecs", np.float32)
    n, k = ids.shape
    rng = np.random.default_rng(a.seed)
    bad = 0
    for i in rng.choice(n, size=min(a.rows, n), replace=False):
        q = np.asarray(x[i], dtype=np.float64)
        d = np.sqrt(((np.asarray(x, dtype=np.float64) - q) ** 2).sum(axis=1)) if n * x.shape[1] < 2**27 else None
        if d is None:
            d = np.empty(n)
            for s in range(0, n, 1 << 18):
                block = np.asarray(x[s : s + (1 << 18)], dtype=np.float64)
                d[s : s + len(block)] = np.sqrt(((block - q) ** 2).sum(axis=1))
        d[i] = np.inf
        kth = np.partition(d, k - 1)[k - 1]
        listed = ids[i]
        ok = (
            len(set(listed.tolist())) == k
            and i not in listed
            and np.all(d[listed] <= kth)
            and np.all(np.diff(dists[i]) >= 0)
            and np.allclose(dists[i], d[listed], rtol=1e-5, atol=1e-6)
        )
        bad += not ok
    print(f"{min(a.rows, n)} sampled rows checked against float64: {bad} wrong")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
