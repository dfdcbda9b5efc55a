// Append ranks from subgroup ballots: each invocation counts the set bits below its lane in
// the ballot of its predicate (all four words: subgroups may be up to 128 wide). Appended to
// select.wgsl on adapters with subgroups.

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

// (slot among this pass's `a` elements, slot among its `b` elements): one atomic add per
// subgroup and side reserves the subgroup's slots, ballot and popcount order the lanes.
fn append_ranks(a: bool, b: bool, lane: u32) -> vec2<u32> {
    let ballot_a = subgroupBallot(a);
    let ballot_b = subgroupBallot(b);
    var base = vec2<u32>(0u);
    if (lane == 0u) {
        let count_a = bits_all(ballot_a);
        let count_b = bits_all(ballot_b);
        if (count_a != 0u) {
            base.x = atomicAdd(&appended_a, count_a);
        }
        if (count_b != 0u) {
            base.y = atomicAdd(&appended_b, count_b);
        }
    }
    base = subgroupBroadcastFirst(base);
    return base + vec2<u32>(bits_below(ballot_a, lane), bits_below(ballot_b, lane));
}

@compute @workgroup_size(256)
fn select_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    select_row(lid, wid, lane);
}
