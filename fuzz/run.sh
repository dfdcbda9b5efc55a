#!/usr/bin/env bash
# Fuzzes every reader of outside bytes for FUZZ_SECONDS (default 60) seconds each, one target
# after another, starting from the minimised corpus checked in under fuzz/seeds/TARGET/
# (copied into a scratch directory, so that the checked-in corpus is left as it is).
#
# Fails when any target crashes (a panic, an abort, an allocation past 2 GiB or an input
# that runs over 10 s); the input that did it is left in fuzz/artifacts/TARGET/, and the
# libFuzzer output of each run in fuzz/logs/TARGET.log.
#
# Needs a nightly toolchain (libFuzzer's instrumentation); where rustup has none, or
# cargo-fuzz cannot be installed, it says SKIPPED and exits 0. See fuzz/README.md.
set -uo pipefail

cd "$(dirname "$0")"
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
TARGETS=(npy vecs bin text hdf5_layout index)
# The same flags for `build` and `run`, or `run` builds again. 16 codegen units: the fuzz
# build compiles all of knng's dependencies (wgpu included), which one unit makes far slower.
BUILD_FLAGS=(--codegen-units 16)

skip() {
    echo "======================================================================"
    echo "SKIPPED: fuzzing needs a nightly toolchain ($1)"
    echo "======================================================================"
    exit 0
}

command -v rustup >/dev/null 2>&1 || skip "rustup is not installed"
rustup toolchain list | grep -q '^nightly' || skip "rustup lists no nightly toolchain"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked || skip "cargo-fuzz could not be installed"
fi

start=$SECONDS
echo "== building the fuzz targets ($(cargo +nightly fuzz --version))"
if ! cargo +nightly fuzz build "${BUILD_FLAGS[@]}"; then
    echo "FAILED: the fuzz targets do not build"
    exit 1
fi
echo "== built in $((SECONDS - start)) s"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/knng-fuzz-corpus.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p logs
failed=()
for target in "${TARGETS[@]}"; do
    seeds=seeds/$target
    if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
        echo "FAILED: $seeds is missing or empty"
        failed+=("$target (no seeds)")
        continue
    fi
    corpus=$scratch/$target
    mkdir -p "$corpus" "artifacts/$target"
    cp "$seeds"/* "$corpus"/
    echo "== fuzzing $target for $FUZZ_SECONDS s from $(ls "$corpus" | wc -l) seeds"
    cargo +nightly fuzz run "${BUILD_FLAGS[@]}" "$target" "$corpus" -- \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"logs/$target.log" 2>&1
    rc=$?
    grep -E 'stat::number_of_executed_units|DONE|cov:' "logs/$target.log" | tail -n 3
    if [ $rc -ne 0 ]; then
        echo "FAILED: $target crashed (exit $rc); the end of logs/$target.log:"
        tail -n 40 "logs/$target.log"
        failed+=("$target")
    fi
done

echo "== fuzzing took $((SECONDS - start)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "fuzz: ${#TARGETS[@]} passed, 0 failed"
