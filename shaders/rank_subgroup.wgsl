// Partition ranks from subgroup ballots: each invocation counts the set bits below its lane
// in the ballot of its predicate (all four words: subgroups may be up to 128 wide), and one
// invocation scans the per-subgroup totals. Appended to select.wgsl on adapters with
// subgroups.

var<workgroup> subgroup_counts: array<u32, 256>;
var<workgroup> ranks_total: u32;

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

// (rank among left, total left, rank among right, total right) over the workgroup.
fn partition_ranks(left: bool, right: bool, lid: u32, lane: u32, sg_id: u32, sg_count: u32) -> vec4<u32> {
    let left_ballot = subgroupBallot(left);
    let right_ballot = subgroupBallot(right);
    if (lane == 0u) {
        // Counts fit in 16 bits: a workgroup has at most 256 invocations.
        subgroup_counts[sg_id] = bits_all(left_ballot) | (bits_all(right_ballot) << 16u);
    }
    workgroupBarrier();
    if (lid == 0u) {
        var running = 0u;
        for (var s = 0u; s < sg_count; s++) {
            let c = subgroup_counts[s];
            subgroup_counts[s] = running;
            running += c;
        }
        ranks_total = running;
    }
    workgroupBarrier();
    let before = subgroup_counts[sg_id];
    let total = workgroupUniformLoad(&ranks_total);
    return vec4<u32>(
        (before & 0xffffu) + bits_below(left_ballot, lane),
        total & 0xffffu,
        (before >> 16u) + bits_below(right_ballot, lane),
        total >> 16u,
    );
}

@compute @workgroup_size(256)
fn select_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) sg_count: u32,
) {
    select_row(lid, wid, lane, sg_id, sg_count);
}
