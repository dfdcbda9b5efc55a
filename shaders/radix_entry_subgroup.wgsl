// The `scatter` entry point of radix_sort.wgsl with subgroups: each subgroup scans its lanes'
// counters at once, then adds the totals of the subgroups before it. That follows the pairs'
// order only where invocations are numbered subgroup by subgroup; a workgroup that finds
// otherwise scans in workgroup memory.

var<workgroup> misnumbered: u32;

fn scan_counters(lid: u32, lane: u32, lanes: u32, subgroup: u32, lo: vec4<u32>, hi: vec4<u32>) -> array<vec4<u32>, 2> {
    if (lid == 0u) {
        misnumbered = 0u;
    }
    workgroupBarrier();
    if (lid != subgroup * lanes + lane) {
        misnumbered = 1u;
    }
    if (workgroupUniformLoad(&misnumbered) != 0u) {
        return scan_workgroup(lid, lo, hi);
    }
    let before_lo = subgroupExclusiveAdd(lo);
    let before_hi = subgroupExclusiveAdd(hi);
    let total_lo = subgroupAdd(lo);
    let total_hi = subgroupAdd(hi);
    if (lane == 0u) {
        scanned[subgroup][0] = total_lo;
        scanned[subgroup][1] = total_hi;
    }
    workgroupBarrier();
    var base_lo = vec4<u32>(0u);
    var base_hi = vec4<u32>(0u);
    for (var s = 0u; s < subgroup; s++) {
        base_lo += scanned[s][0];
        base_hi += scanned[s][1];
    }
    return array<vec4<u32>, 2>(before_lo + base_lo, before_hi + base_hi);
}

@compute @workgroup_size(256)
fn scatter(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
    @builtin(subgroup_id) subgroup: u32,
) {
    scatter_tile(lid, wid, lane, lanes, subgroup);
}
