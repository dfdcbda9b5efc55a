// The `select_rows` entry point for adapters without subgroup operations. Appended to
// select.wgsl in place of select_entry_subgroup.wgsl.

@compute @workgroup_size(256)
fn select_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    select_row(lid, wid);
}
