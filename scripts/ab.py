#!/usr/bin/env python3
"""Before/after comparisons of knng builds in one run on the device machine.

Builds are paths to knng binaries (build each commit, copy `target/release/knng` somewhere
ignored such as `.bench/`, carry it). Times of different builds are comparable only within
one command, so each mode runs every build in turn, round after round:

    python3 scripts/ab.py select OLD,NEW [--rounds 3] [--k 64,512,2048]
        the select kernel alone on 8192 x 65536 keys, with torch.topk beside it
    python3 scripts/ab.py graph OLD,NEW --case 65536,128,1000 --case 16384,4096,512 [--rounds 2] [--phases]
        whole graphs (knng's time, best of two runs of one engine, not profiled; the candidate
        rounds; with --phases each kernel's GPU time from a second, profiled run)
    python3 scripts/ab.py compare OLD NEW
        `knng graph` outputs of the two builds compared bit for bit (a change meant to keep
        answers identical must show 0 differences), euclidean, cosine and inner product

Torch runs use `scripts/torch_knn.py`, as device_bench.py does.
"""
import argparse
import json
import subprocess
import sys
import tempfile

from device_bench import setup, torch


def bench_json(build, *args):
    out = subprocess.run([build, "bench", "--backend", "gpu", "--json", *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip()[-300:]
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def select(builds, rounds, ks):
    for _ in range(rounds):
        for k in ks:
            _, peer = torch("select", "--rows", 8192, "--cols", 65536, "--k", k)
            for build in builds:
                shape = ["--what", "select", "--rows", 8192, "--cols", 65536, "-k", k, "--repeat", 3]
                wall, err = bench_json(build, *shape)
                prof, _ = bench_json(build, *shape, "--profile")
                if wall is None or prof is None:
                    print(f"{build} k={k}: failed: {err}", flush=True)
                    continue
                print(f"{build} k={k}: wall {wall['seconds'] * 1e3:.2f} ms, kernel {prof['gpu_s'] * 1e3:.2f} ms, "
                      f"span {prof['span_s'] * 1e3:.2f} ms; torch.topk {peer:.2f} ms", flush=True)


def graph(builds, rounds, cases, phases):
    for _ in range(rounds):
        for case in cases:
            n, d, k, *extra = case.split(",")
            for build in builds:
                shape = ["--n", n, "--d", d, "-k", k, "-q", *extra]
                r, err = bench_json(build, *shape, "--repeat", 2)
                if r is None:
                    print(f"{build} {case}: failed: {err}", flush=True)
                    continue
                line = (f"{build} n={n} d={d} k={k} {' '.join(extra)}: {r['seconds'] * 1e3:.1f} ms, "
                        f"{r['rounds']} round(s), {r['rows_widened']} rows widened")
                if phases:
                    prof, _ = bench_json(build, *shape, "--repeat", 1, "--profile")
                    gpu = (prof or {}).get("gpu") or {}
                    line += "; GPU ms: " + " ".join(f"{key[:-2]} {v * 1e3:.1f}" for key, v in gpu.items()
                                                  if key.endswith("_s") and key != "submitted_s")
                print(line, flush=True)


def compare(old, new):
    import numpy as np

    rng = np.random.default_rng(5)
    # An offset far from the origin: norms dominate the distances, as in the hardest cases.
    x = (rng.standard_normal((40000, 64)) * 3 + 1000).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        for k in (1000, 300):
            for metric in ("euclidean", "cosine", "inner_product"):
                outs = []
                for i, build in enumerate((old, new)):
                    path = f"{tmp}/{i}.npz"
                    subprocess.run([build, "graph", "-k", str(k), "-m", metric, "-q", "-o", path, f"{tmp}/x.npy"],
                                   check=True)
                    outs.append(np.load(path))
                d0, d1 = outs[0]["distances"], outs[1]["distances"]
                nd = int((d0.view(np.uint32) != d1.view(np.uint32)).sum())
                ni = int((outs[0]["indices"] != outs[1]["indices"]).sum())
                print(f"k={k} {metric}: distances differing {nd} of {d0.size}, indices differing {ni}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["select", "graph", "compare"])
    p.add_argument("builds", nargs="+", help="comma-separated builds (select, graph) or two builds (compare)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--k", default="64,512,2048", help="select: the values of k")
    p.add_argument("--case", action="append", default=[], help="graph: n,d,k[,extra flag,...]")
    p.add_argument("--phases", action="store_true", help="graph: also each build's GPU phases (a profiled run)")
    a = p.parse_args()
    setup()
    if a.mode == "compare":
        if len(a.builds) != 2:
            sys.exit("compare takes two builds")
        compare(*a.builds)
    elif a.mode == "select":
        select(a.builds[0].split(","), a.rounds, [int(k) for k in a.k.split(",")])
    else:
        if not a.case:
            sys.exit("graph needs at least one --case n,d,k")
        graph(a.builds[0].split(","), a.rounds, a.case, a.phases)


if __name__ == "__main__":
    main()
