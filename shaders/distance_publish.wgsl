// The ranked answers of the previous query tile, published into the mapped read-back buffer
// by this tile's first distance dispatch (see distance.wgsl). Both buffers have the read-back
// layout (ids, distances, certificates at their offsets), so the copy is flat.

@group(0) @binding(9) var<storage, read> answers: array<vec4<u32>>;
@group(0) @binding(10) var<storage, read_write> read_back: array<vec4<u32>>;

// Workgroup `group` copies its share of the vec4s, a few per invocation: the stores to host
// memory leave the invocation at once, and the PCIe transfer of the whole tile's answers
// (about a third of the GEMM's time at k=1000) is spread over every wave of workgroups.
fn publish_answers(group: u32, lid: u32) {
    // The module is built without bounds checks: every index is checked here.
    let len = min(params.publish_len, min(arrayLength(&answers), arrayLength(&read_back)));
    let groups = ((params.q_rows + BM - 1u) / BM) * ((params.c_rows + BN - 1u) / BN);
    if (len == 0u || group >= groups) {
        return;
    }
    let share = (len + groups - 1u) / groups;
    let start = group * share;
    let end = min(start + share, len);
    for (var i = start + lid; i < end; i += WG) {
        read_back[i] = answers[i];
    }
}
