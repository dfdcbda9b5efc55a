#!/usr/bin/env python3
"""Checks sampled rows of a knng graph (.ivecs + .fvecs) against a float64 brute force.

    python3 scripts/check_rows.py DATA.npy OUT.ivecs [--rows 64] [--seed 0]

Tie-aware: a row passes when its listed neighbours are k distinct other rows, each no
farther (float64 euclidean) than the true k-th distance, listed in non-decreasing order.

One pass over the data for all sampled rows: squared distances first through a float64
matrix product (|x|^2 + |q|^2 - 2 x.q), then, for the rows within that product's error bound
of each sampled row's k-th, again as sums of squared differences. Every row whose exact
distance is at most the true k-th is among those, so the k-th among them is the true one.
"""
import argparse
import sys

import numpy as np

BLOCK = 1 << 16


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
    d = x.shape[1]
    rng = np.random.default_rng(a.seed)
    sample = rng.choice(n, size=min(a.rows, n), replace=False)
    q = np.asarray(x[sample], dtype=np.float64)
    qn = (q * q).sum(axis=1)
    # The product's squared distances, and each row's squared norm (for the error bound).
    approx = np.empty((len(sample), n))
    norms = np.empty(n)
    for s in range(0, n, BLOCK):
        block = np.asarray(x[s : s + BLOCK], dtype=np.float64)
        bn = (block * block).sum(axis=1)
        norms[s : s + len(block)] = bn
        approx[:, s : s + len(block)] = bn[None, :] + qn[:, None] - 2.0 * (q @ block.T)
    # Each of the three terms is a sum of at most d products, rounded: an error of at most
    # about d units of 2^-53 of its magnitude; taken 16 times over.
    err = 16.0 * (d + 2) * 2.0**-53 * (norms.max() + qn + 2.0 * np.sqrt(norms.max() * qn))
    bad = 0
    for j, i in enumerate(sample):
        row = approx[j]
        row[i] = np.inf
        near = np.flatnonzero(row <= np.partition(row, k - 1)[k - 1] + 2.0 * err[j])
        exact = np.full(n, np.inf)
        exact[near] = np.sqrt(((np.asarray(x[near], dtype=np.float64) - q[j]) ** 2).sum(axis=1))
        exact[i] = np.inf
        kth = np.partition(exact, k - 1)[k - 1]
        listed = ids[i]
        ok = (
            len(set(listed.tolist())) == k
            and i not in listed
            and np.all(exact[listed] <= kth)
            and np.all(np.diff(dists[i]) >= 0)
            and np.allclose(dists[i], exact[listed], rtol=1e-5, atol=1e-6)
        )
        bad += not ok
    print(f"{len(sample)} sampled rows checked against float64: {bad} wrong")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
