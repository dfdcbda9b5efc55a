// The appending epilogue without subgroups (distance_append.wgsl says what it does): each
// invocation counts its kept keys per row in workgroup memory, one invocation per row reserves
// the workgroup's range, then each invocation computes its keys again and writes them.

// Kept keys per row of the workgroup's tile, then the first slot of each row's range.
var<workgroup> row_kept: array<atomic<u32>, BM>;
var<workgroup> row_first: array<u32, BM>;

// Phase 1 for one row (local row `m` of the tile): counts the invocation's kept keys and
// takes its offset within the workgroup's range.
fn append_count(m: u32, r: u32, c: u32, d0: vec4<f32>, d1: vec4<f32>, cn0: vec4<f32>, cn1: vec4<f32>) -> u32 {
    let bound = append_bound(r);
    let n = count_below(append_keys(r, c, d0, cn0), bound) + count_below(append_keys(r, c + BN / 2u, d1, cn1), bound);
    if (n == 0u) {
        return 0u;
    }
    return atomicAdd(&row_kept[m], n);
}

// Phase 3 for one row: writes the invocation's kept keys from its offset on.
fn append_write(m: u32, offset: u32, r: u32, c: u32, d0: vec4<f32>, d1: vec4<f32>, cn0: vec4<f32>, cn1: vec4<f32>) {
    let bound = append_bound(r);
    let slot = append_four(r, row_first[m] + offset, c, append_keys(r, c, d0, cn0), bound);
    append_four(r, slot, c + BN / 2u, append_keys(r, c + BN / 2u, d1, cn1), bound);
}

fn append_tile(
    row0: u32, col0: u32, tx: u32, ty: u32, lid: u32,
    r0c0: vec4<f32>, r0c1: vec4<f32>, r1c0: vec4<f32>, r1c1: vec4<f32>,
    r2c0: vec4<f32>, r2c1: vec4<f32>, r3c0: vec4<f32>, r3c1: vec4<f32>,
    r4c0: vec4<f32>, r4c1: vec4<f32>, r5c0: vec4<f32>, r5c1: vec4<f32>,
    r6c0: vec4<f32>, r6c1: vec4<f32>, r7c0: vec4<f32>, r7c1: vec4<f32>,
) {
    if (lid < BM) {
        atomicStore(&row_kept[lid], 0u);
    }
    workgroupBarrier();
    let cn0 = column_norms(col0 + tx * 4u);
    let cn1 = column_norms(col0 + tx * 4u + BN / 2u);
    let c = col0 + tx * 4u;
    let m = ty * 4u;
    let h = BM / 2u;
    let o0 = append_count(m, row0 + m, c, r0c0, r0c1, cn0, cn1);
    let o1 = append_count(m + 1u, row0 + m + 1u, c, r1c0, r1c1, cn0, cn1);
    let o2 = append_count(m + 2u, row0 + m + 2u, c, r2c0, r2c1, cn0, cn1);
    let o3 = append_count(m + 3u, row0 + m + 3u, c, r3c0, r3c1, cn0, cn1);
    let o4 = append_count(m + h, row0 + m + h, c, r4c0, r4c1, cn0, cn1);
    let o5 = append_count(m + h + 1u, row0 + m + h + 1u, c, r5c0, r5c1, cn0, cn1);
    let o6 = append_count(m + h + 2u, row0 + m + h + 2u, c, r6c0, r6c1, cn0, cn1);
    let o7 = append_count(m + h + 3u, row0 + m + h + 3u, c, r7c0, r7c1, cn0, cn1);
    workgroupBarrier();
    if (lid < BM) {
        let kept = atomicLoad(&row_kept[lid]);
        if (kept > 0u && row0 + lid < params.q_rows) {
            row_first[lid] = atomicAdd(&shortlist_len[params.row_base + row0 + lid], kept);
        }
    }
    workgroupBarrier();
    append_write(m, o0, row0 + m, c, r0c0, r0c1, cn0, cn1);
    append_write(m + 1u, o1, row0 + m + 1u, c, r1c0, r1c1, cn0, cn1);
    append_write(m + 2u, o2, row0 + m + 2u, c, r2c0, r2c1, cn0, cn1);
    append_write(m + 3u, o3, row0 + m + 3u, c, r3c0, r3c1, cn0, cn1);
    append_write(m + h, o4, row0 + m + h, c, r4c0, r4c1, cn0, cn1);
    append_write(m + h + 1u, o5, row0 + m + h + 1u, c, r5c0, r5c1, cn0, cn1);
    append_write(m + h + 2u, o6, row0 + m + h + 2u, c, r6c0, r6c1, cn0, cn1);
    append_write(m + h + 3u, o7, row0 + m + h + 3u, c, r7c0, r7c1, cn0, cn1);
}
