// The appending epilogue (`shaders::distance_appending`, so far measured by `knng bench --what
// distance --keep` only): instead of writing the dense tile, each row's keys under its bound
// (row_state[row_base + r].y) are appended to the row's list (shortlist, shortlist_cap pairs a
// row, the count in shortlist_len), with one global atomic per row and group of invocations
// holding it instead of one per key. Keys past a list's cap are counted but not written (the
// count says the list overflowed). Why: long lists select every dense tile (notes/select.md,
// "Next for long lists"); with a bound known before the GEMM, the tile need not be written nor
// read back. This file holds what both forms share; the form with subgroups is
// distance_append_subgroup.wgsl, the one without distance_append_workgroup.wgsl.

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

