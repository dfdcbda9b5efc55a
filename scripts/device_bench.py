#!/usr/bin/env python3
"""The performance issue's configurations, knng against PyTorch, in one run on the device machine.

Run from the repository root on a machine with an NVIDIA GPU, PyTorch and no Rust toolchain,
carrying `.gl` and `target/release/knng` built elsewhere; the peer is `scripts/torch_knn.py`.
`.gl` holds the Debian packages that `setup` unpacks: the Vulkan loader (libvulkan1) and what
NVIDIA's Vulkan driver (libGLX_nvidia.so.0) loads with it, without which wgpu finds no
adapter: libglvnd0 libglx0 libgl1 libegl1 libopengl0 libgles2 libx11-6 libxext6 libxcb1
libxau6 libxdmcp6 libbsd0 libmd0 (`apt-get download` with an amd64 package list, as
for libvulkan1).

    python3 scripts/device_bench.py            # the main table
    python3 scripts/device_bench.py --large    # also n = 2^20 and the 10^6-10^7-row searches (minutes more)
    python3 scripts/device_bench.py --scaling  # also the n and k scaling curves
    python3 scripts/device_bench.py --only-scaling

Prints one line per case: knng's time, the peer's time from the same run, and the ratio
(knng / peer; lower is better), plus knng's per-kernel GPU times.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

# KNNG=path runs another build (an earlier commit, for before/after notes).
KNNG = os.environ.get("KNNG", "./target/release/knng")
TORCH = "scripts/torch_knn.py"


def setup():
    for deb in glob.glob(".gl/*.deb"):
        subprocess.run(["dpkg", "-x", deb, "/"], check=True)
    subprocess.run(["ldconfig"], check=True)
    icd = "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json"
    if os.path.exists(icd):
        os.environ["VK_DRIVER_FILES"] = icd


def knng(n, d, k, extra=(), profile=False, queries=None):
    # Best of three runs of one engine, each writing into the answer arrays of the run before
    # (`Knn::graph_into`): torch_knn.py also warms up before timing, and its caching allocator
    # then holds the memory its answers are written into, as knng's kept buffers and arrays do.
    # The first run's time (fresh pages for the answers) is printed beside. Timed without
    # --profile, which waits for every submission to read its timestamps; the phases come from
    # a second, profiled run.
    runs = ["--repeat", "1", "--profile"] if profile else ["--repeat", "3"]
    search = ["--what", "search", "--queries", str(queries)] if queries else []
    cmd = [KNNG, "bench", "--backend", "gpu", "--n", str(n), "--d", str(d), "-k", str(k), *search, *runs,
           "--json", "-q", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch(*args):
    out = subprocess.run([sys.executable, TORCH, *map(str, args)], capture_output=True, text=True, check=True)
    line = out.stdout.strip().splitlines()[-1]
    return line, float(re.search(r"([0-9.]+) ms", line).group(1))


def graph_case(n, d, k, extra=()):
    _, peer_ms = torch("graph", "--n", n, "--d", d, "--k", k)
    r = knng(n, d, k, extra)
    ms = r["seconds"] * 1e3
    g = knng(n, d, k, extra, profile=True).get("gpu") or {}
    phases = " ".join(f"{name[:-2]}={v * 1e3:.0f}ms" for name, v in g.items())
    print(f"graph n={n} d={d} k={k}: knng {ms:.1f} ms (first run {r['first_s'] * 1e3:.1f}), torch {peer_ms:.1f} ms, "
          f"ratio {ms / peer_ms:.2f} "
          f"| host: prepare {r['prepare_s'] * 1e3:.0f}ms refine {r['refine_s'] * 1e3:.0f}ms "
          f"| symmetric rows {r.get('rows_in_symmetric_blocks', 0)} bounded rows {r.get('rows_in_bounded_sweeps', 0)} "
          f"| {phases}", flush=True)
    return r


def search_case(n, d, queries, k):
    """knng's search against torch's tiled GEMM + topk, and the GEMM alone (the limit line)."""
    line, peer_ms = torch("search", "--n", n, "--d", d, "--queries", queries, "--k", k)
    gemm_ms = float(re.search(r"gemm alone ([0-9.]+) ms", line).group(1))
    r = knng(n, d, k, queries=queries)
    ms = r["seconds"] * 1e3
    g = knng(n, d, k, profile=True, queries=queries).get("gpu") or {}
    phases = " ".join(f"{name[:-2]}={v * 1e3:.0f}ms" for name, v in g.items())
    print(f"search n={n} d={d} queries={queries} k={k}: knng {ms:.1f} ms (first run {r['first_s'] * 1e3:.1f}), "
          f"torch {peer_ms:.1f} ms, ratio {ms / peer_ms:.2f}, cuBLAS GEMM alone {gemm_ms:.1f} ms "
          f"({ms / gemm_ms:.2f}x) | host: prepare {r['prepare_s'] * 1e3:.0f}ms refine {r['refine_s'] * 1e3:.0f}ms "
          f"| {phases}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--large", action="store_true")
    p.add_argument("--scaling", action="store_true")
    p.add_argument("--only-scaling", action="store_true", help="the scaling curves alone")
    a = p.parse_args()
    setup()
    print(subprocess.run([KNNG, "info"], capture_output=True, text=True).stdout, flush=True)
    if a.only_scaling:
        scaling()
        return

    graph_case(262144, 128, 10)
    if a.large:
        graph_case(1048576, 96, 16)
        search_case(1000000, 128, 10000, 100)
        search_case(1000000, 960, 10000, 100)
        search_case(10000000, 96, 10000, 100)
    graph_case(65536, 128, 1000)
    graph_case(16384, 4096, 512)

    line, _ = torch("gemm", "--n", 8192)
    cublas = float(re.search(r"([0-9.]+) TFLOP/s", line).group(1))
    # The distance kernel alone (`bench --what distance`, kernel time from timestamps): the kNN
    # shape d=128, and 8192 x 8192 x 8192, the flops of the cuBLAS run.
    for rows, cols, d in ((8192, 65536, 128), (8192, 8192, 8192)):
        cmd = [KNNG, "bench", "--what", "distance", "--rows", str(rows), "--cols", str(cols), "--d", str(d),
               "--backend", "gpu", "--repeat", "3", "--json", "--profile"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"distance {rows} x {cols} d={d}: knng failed: {run.stderr.strip()}")
            continue
        tflops = json.loads(run.stdout.strip().splitlines()[-1])["tflops"]
        print(f"distance kernel {rows} x {cols} d={d}: knng {tflops:.1f} TFLOP/s, cuBLAS {cublas:.1f} TFLOP/s, "
              f"ratio {tflops / cublas:.2f}", flush=True)
    for k in (64, 512, 2048):
        _, peer_ms = torch("select", "--rows", 8192, "--cols", 65536, "--k", k)
        # Wall time from a run without timestamps (a profiled run reads them after every
        # submission), the kernel's GPU time from a profiled one.
        cmd = [KNNG, "bench", "--what", "select", "--rows", "8192", "--cols", "65536", "-k", str(k),
               "--backend", "gpu", "--repeat", "3", "--json"]
        # The wall time is the better of two processes: on some machine starts the first select
        # process (right after the distance benchmarks) ran 2-3x slower in all its repeats.
        runs = [subprocess.run(c, capture_output=True, text=True) for c in (cmd, cmd, cmd + ["--profile"])]
        failed = next((run for run in runs if run.returncode != 0), None)
        if failed is not None:
            print(f"select 8192 x 65536 k={k}: knng failed: {failed.stderr.strip()}; torch.topk {peer_ms:.2f} ms")
            continue
        first, second, prof = (json.loads(run.stdout.strip().splitlines()[-1]) for run in runs)
        ms = min(first["seconds"], second["seconds"]) * 1e3
        # The span from the first kernel's start to the last one's end: the tiles' kernels may
        # overlap (each tile has buffers of its own), and the sum of their times would count
        # the overlap twice.
        gpu_ms = prof["span_s"] * 1e3 if prof.get("span_s") is not None else None
        kernel = f", kernel {gpu_ms:.2f} ms ({gpu_ms / peer_ms:.2f})" if gpu_ms is not None else ""
        print(f"select 8192 x 65536 k={k}: knng {ms:.2f} ms{kernel}, torch.topk {peer_ms:.2f} ms, ratio {ms / peer_ms:.2f}")

    if a.scaling:
        scaling()


def distance_run(rows, cols, d, extra=()):
    """The JSON line of `bench --what distance` (profiled, best of three), or None (the error printed)."""
    cmd = [KNNG, "bench", "--what", "distance", "--rows", str(rows), "--cols", str(cols), "--d", str(d),
           "--backend", "gpu", "--repeat", "3", "--json", "--profile", *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{' '.join(cmd)} failed: {run.stderr.strip()}", flush=True)
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])


def distance_kernel(rows, cols, d, extra=()):
    """TFLOP/s of `bench --what distance` by its kernel time, or None."""
    r = distance_run(rows, cols, d, extra)
    return r and r["tflops"]


def scaling():
    for e in range(14, 21):
        graph_case(2 ** e, 128, 16, ["--gpu-memory", "16384"])
    for k in (1, 4, 16, 64, 256, 1024, 4096):
        graph_case(65536, 128, k)


if __name__ == "__main__":
    main()
