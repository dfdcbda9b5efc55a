// Partition ranks from a workgroup-memory prefix sum (Hillis-Steele), for adapters without
// subgroup operations. Appended to select.wgsl in place of rank_subgroup.wgsl; the lane and
// subgroup arguments are ignored.

var<workgroup> scan: array<u32, 256>;
var<workgroup> ranks_total: u32;

fn partition_ranks(left: bool, right: bool, lid: u32, lane: u32, sg_id: u32, sg_count: u32) -> vec4<u32> {
    // Left counts in the low 16 bits, right counts in the high 16: one scan for both.
    let mine = select(0u, 1u, left) | (select(0u, 1u, right) << 16u);
    scan[lid] = mine;
    workgroupBarrier();
    for (var offset = 1u; offset < 256u; offset *= 2u) {
        var add = 0u;
        if (lid >= offset) {
            add = scan[lid - offset];
        }
        workgroupBarrier();
        scan[lid] += add;
        workgroupBarrier();
    }
    let before = scan[lid] - mine;
    if (lid == 255u) {
        ranks_total = scan[lid];
    }
    let total = workgroupUniformLoad(&ranks_total);
    return vec4<u32>(before & 0xffffu, total & 0xffffu, before >> 16u, total >> 16u);
}

@compute @workgroup_size(256)
fn select_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    select_row(lid, wid, 0u, 0u, 1u);
}
