#!/bin/bash
# The batch index sort issue's device run, in one command on the device machine (carry .gl
# and a release build in target/release; PyTorch is there):
#   1. the radix sort's throughput, 2^20 to 2^28 (f32 key, u32 value) pairs, beside
#      torch.sort(stable=True) (CUB's radix sort underneath);
#   2. graphs at n=16384 d=4096 and n=65536 d=128 for k = 16 ... 2048 with each selector,
#      beside the torch graph (GEMM + topk) of the same shape.
# Every knng line is checked: the sort bench against a host sort, graphs by `bench`'s check.
# `sort_bench.sh sort` or `sort_bench.sh graphs` runs one part.
set -u
KNNG=${KNNG:-./target/release/knng}
WHAT=${1:-all}
$KNNG info | head -3
[ "$WHAT" = graphs ] || for p in 20 22 24 26 28; do
    n=$((1 << p))
    $KNNG bench --what sort --n $n --profile --repeat 3 --backend gpu
    python3 scripts/torch_knn.py sort --n $n --reps 5
done
[ "$WHAT" = sort ] || for shape in "16384 4096" "65536 128"; do
    set -- $shape
    for k in 16 128 512 1024 2048; do
        for s in quick sort; do
            $KNNG bench --n $1 --d $2 -k $k --select $s --backend gpu --profile
        done
        python3 scripts/torch_knn.py graph --n $1 --d $2 --k $k --reps 3
    done
done
