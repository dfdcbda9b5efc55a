// The appending epilogue (`shaders::distance_appending`, so far measured by `knng bench --what
// distance --keep` only): instead of writing the dense tile, each row's keys under its bound
// (row_state[row_base + r].y) are appended to the row's list (shortlist, shortlist_cap pairs a
// row, the count in shortlist_len), with one global atomic per row and workgroup instead of
// one per key: each invocation counts its kept keys per row in workgroup memory, one
// invocation per row reserves the workgroup's range, then each invocation writes its keys.
// Keys past a list's cap are counted but not written (the count says the list overflowed).
// Why: long lists select every dense tile (notes/select.md, "Next for long lists"); with a
// bound known before the GEMM, the tile need not be written nor read back.

// Kept keys per row of the workgroup's tile, then the first slot of each row's range.
var<workgroup> row_kept: array<atomic<u32>, BM>;
var<workgroup> row_first: array<u32, BM>;

// A row's bound, or -inf for rows past the tile (nothing kept).
fn append_bound(r: u32) -> f32 {
    if (r >= params.q_rows) {
        return bitcast<f32>(0xff800000u);
    }
    return bitcast<f32>(row_state[params.row_base + r].y);
}

// The keys of a row's eight columns as store_row computes them: +inf past the tile's columns
// and at the query itself.
fn append_keys(r: u32, c: u32, d: vec4<f32>, cn: vec4<f32>) -> vec4<f32> {
    let inf = vec4<f32>(bitcast<f32>(0x7f800000u));
    var v = keys4(params.mode, q_norms[min(r, params.q_rows - 1u)], cn, d);
    v = select(v, inf, vec4<u32>(c) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(params.c_rows));
    let global = vec4<u32>(params.col_base + c) + vec4<u32>(0u, 1u, 2u, 3u);
    if (r < params.q_rows) {
        v = select(v, inf, global == vec4<u32>(row_state[params.row_base + r].x));
    }
    return v;
}

fn count_below(v: vec4<f32>, bound: f32) -> u32 {
    let kept = select(vec4<u32>(0u), vec4<u32>(1u), v < vec4<f32>(bound));
    return kept.x + kept.y + kept.z + kept.w;
}

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

fn append_four(r: u32, slot: u32, c: u32, v: vec4<f32>, bound: f32) -> u32 {
    var s = slot;
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        if (v[j] < bound) {
            if (s < params.shortlist_cap) {
                shortlist[(params.row_base + r) * params.shortlist_cap + s] = vec2<u32>(bitcast<u32>(v[j]), params.col_base + c + j);
            }
            s += 1u;
        }
    }
    return s;
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
