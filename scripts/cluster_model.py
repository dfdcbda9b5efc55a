#!/usr/bin/env python3
"""Predicted efficiency of a partitioned graph on Q nodes (notes/mpi.md).

Blocks of r rows, P = ceil(n / r), every pair I <= J a job. A pair's time is its
brute-force-equivalent flops (2 r^2 d 2 off the diagonal) at a measured rate; a node of G
devices takes its jobs one per free device. Two ways to deal the jobs to nodes: the thesis's
(node J % Q computes every pair of column block J; only I's lists cross the network) and
cyclic over the pairs (both sides' lists may). Lists cross at `entry` bytes a candidate (f32
key, u32 id, f64 exact key), overlapped with the next pair's arithmetic; the other block is
read through the map from a shared file system. Efficiency = 1 / (load imbalance x the last
wave's idle share x exposed transfer).

    python3 scripts/cluster_model.py
"""
import math


def model(n, d, k, r, nodes, rate, devices=4, net=12.5e9, fs=5e9, entry=16, scheme="pairs"):
    kc = k + max(16, k // 4)
    blocks = math.ceil(n / r)
    pairs = [(i, j) for j in range(blocks) for i in range(j + 1)]
    load = [0.0] * nodes
    for index, (i, j) in enumerate(pairs):
        node = j % nodes if scheme == "thesis" else index % nodes
        load[node] += (2 if i != j else 1) * r * r * d * 2 / rate / devices
    imbalance = max(load) / (sum(load) / nodes)
    per_device = len(pairs) / (nodes * devices)
    waves = math.ceil(per_device) / per_device
    t_pair = 2 * r * r * d * 2 / rate
    sides = 2 if scheme == "pairs" else 1
    lists = sides * r * kc * entry * (nodes - 1) / nodes
    transfer = max(lists / net, r * d * 4 / fs)
    efficiency = 1 / (imbalance * waves) * t_pair / (t_pair + max(0.0, transfer - t_pair))
    return blocks, len(pairs), t_pair, lists, transfer, imbalance, waves, efficiency


# Rates: brute-force-equivalent flop/s of one H100/H200 measured on graphs (README table,
# notes/partition.md): d=4096 k=512 at 2^18 on one H200, 27e12; d=96 k=16 at 2^20, 54e12.
CASES = [
    ("n=2e7 d=15000 k=512 (the thesis)", 2 * 10**7, 15000, 512, 1 << 18, 27e12),
    ("n=1e9 d=96 k=16", 10**9, 96, 16, 1 << 22, 54e12),
]

if __name__ == "__main__":
    for name, n, d, k, r, rate in CASES:
        print(f"{name}, blocks of {r} rows, 4 GPUs a node, 100 Gb/s, 5 GB/s reads")
        print("| dealt | nodes | blocks | pairs | s a pair | lists a pair | transfer | imbalance | last wave | efficiency |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for scheme in ["thesis", "pairs"]:
            for nodes in [2, 4, 8, 16, 32, 64]:
                b, p, t, lists, transfer, imb, waves, eff = model(n, d, k, r, nodes, rate, scheme=scheme)
                print(f"| {scheme} | {nodes} | {b} | {p} | {t:.0f} | {lists / 1e9:.2f} GB | {transfer:.2f} s "
                      f"| {imb:.3f} | {waves:.3f} | {eff:.3f} |")
        print()
