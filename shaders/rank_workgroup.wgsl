// Append ranks from one workgroup atomic add per kept element, for adapters without subgroup
// operations. Appended to select.wgsl in place of rank_subgroup.wgsl.

// (slot among this pass's `a` elements, slot among its `b` elements); only the slot of a
// true predicate is meaningful.
fn append_ranks(a: bool, b: bool, lane: u32) -> vec2<u32> {
    var r = vec2<u32>(0u);
    if (a) {
        r.x = atomicAdd(&appended_a, 1u);
    }
    if (b) {
        r.y = atomicAdd(&appended_b, 1u);
    }
    return r;
}

@compute @workgroup_size(256)
fn select_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    select_row(lid, wid, 0u);
}
