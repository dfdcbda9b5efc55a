// Ballot helpers for select_per_subgroup.wgsl, where lanes of one subgroup rank their
// elements by the set bits below them in a ballot (all four words: subgroups may be up to
// 128 wide), and the `select_rows` entry point. Appended to select.wgsl on adapters with
// subgroups.

fn bits_below(ballot: vec4<u32>, lane: u32) -> u32 {
    var n = 0u;
    for (var w = 0u; w < 4u; w++) {
        let lo = w * 32u;
        if (lane >= lo + 32u) {
            n += countOneBits(ballot[w]);
        } else if (lane > lo) {
            n += countOneBits(ballot[w] & ((1u << (lane - lo)) - 1u));
        }
    }
    return n;
}

fn bits_all(ballot: vec4<u32>) -> u32 {
    return countOneBits(ballot.x) + countOneBits(ballot.y) + countOneBits(ballot.z)
        + countOneBits(ballot.w);
}

@compute @workgroup_size(256)
fn select_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    select_row(lid, wid);
}
