// The ranked answers of the previous query tile, published into the mapped read-back buffer
// by this tile's first distance dispatch (see distance.wgsl). Both buffers have the read-back
// layout (ids, distances, certificates at their offsets), so the copy is flat.

@group(0) @binding(9) var<storage, read> answers: array<vec4<u32>>;
@group(0) @binding(10) var<storage, read_write> read_back: array<vec4<u32>>;

// Every PUBLISH_STRIDE-th workgroup copies answers instead of computing a tile: workgroups
// start roughly in order, so the copies (and the PCIe transfer behind them) are spread over
// the whole GEMM. Copy code inside the GEMM's own workgroups, even at their end, slowed the
// GEMM whether it copied or not (notes/exactness.md). `PUBLISH_STRIDE` is
// a constant the module is built with (`shaders::distance`).

// The tiles of the dispatch and the copying workgroups among them, as the host launches them:
// `publishers` runs of PUBLISH_STRIDE workgroups, each run's last one copying.
fn publishers() -> u32 {
    let tiles = ((params.q_rows + BM - 1u) / BM) * ((params.c_rows + BN - 1u) / BN);
    return (tiles + PUBLISH_STRIDE - 2u) / (PUBLISH_STRIDE - 1u);
}

fn gemm_tile(group: u32) -> u32 {
    return group - group / PUBLISH_STRIDE;
}

fn publishes_instead(group: u32, lid: u32) -> bool {
    if (group % PUBLISH_STRIDE != PUBLISH_STRIDE - 1u) {
        return false;
    }
    let publisher = group / PUBLISH_STRIDE;
    let count = publishers();
    // The module is built without bounds checks: every index is checked here.
    let len = min(params.publish_len, min(arrayLength(&answers), arrayLength(&read_back)));
    if (publisher < count) {
        let share = (len + count - 1u) / count;
        let start = publisher * share;
        let end = min(start + share, len);
        for (var i = start + lid; i < end; i += WG) {
            read_back[i] = answers[i];
        }
    }
    return true;
}
