// The `scatter` entry point of radix_sort.wgsl without subgroups: its scan in workgroup memory.

fn scan_counters(lid: u32, lane: u32, lanes: u32, subgroup: u32, lo: vec4<u32>, hi: vec4<u32>) -> array<vec4<u32>, 2> {
    return scan_workgroup(lid, lo, hi);
}

@compute @workgroup_size(256)
fn scatter(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    scatter_tile(lid, wid, 0u, 1u, lid);
}
