// The appending epilogue with subgroups (distance_append.wgsl says what it does). The keys are
// computed once, in place of the accumulators; the lanes of a subgroup that hold the same rows
// (BN / 8 neighbouring invocations hold a row's BN columns) count their kept keys with one
// subgroup scan, the last lane of each such group reserves the group's range of each row's list
// with one global atomic, and shuffles hand the first slots to the group. No workgroup memory
// and no workgroup barrier: the form without subgroups pays two barriers and computes every key
// twice.
//
// Which lanes share rows comes from `local_invocation_index`: invocation lid holds the rows of
// ty = lid / (BN / 8). Where a subgroup's lanes are its invocations in order of lid (lid = first
// + lane, as on every adapter seen so far), each run of lanes with one ty is a group; otherwise
// every lane is a group of its own, which is still correct, with one atomic per lane and row.

// One row's eight keys held by an invocation, and the row's bound.
struct KeyRow {
    lo: vec4<f32>, // columns c..c+3
    hi: vec4<f32>, // columns c+BN/2..c+BN/2+3
    bound: f32,
}

fn key_row(r: u32, c: u32, d0: vec4<f32>, d1: vec4<f32>, cn0: vec4<f32>, cn1: vec4<f32>) -> KeyRow {
    return KeyRow(append_keys(r, c, d0, cn0), append_keys(r, c + BN / 2u, d1, cn1), append_bound(r));
}

// Kept keys of two rows, one count in each half of a u32: sums over a subgroup stay below 2^16
// (at most 8 keys a lane, and subgroups of at most 128 lanes).
fn pair_count(a: KeyRow, b: KeyRow) -> u32 {
    let na = count_below(a.lo, a.bound) + count_below(a.hi, a.bound);
    let nb = count_below(b.lo, b.bound) + count_below(b.hi, b.bound);
    return na | (nb << 16u);
}

// The first of `n` slots reserved in row r's list; nothing is reserved for n = 0.
fn reserve(r: u32, n: u32) -> u32 {
    if (n == 0u) {
        return 0u;
    }
    return atomicAdd(&shortlist_len[params.row_base + r], n);
}

fn write_row(r: u32, c: u32, k: KeyRow, slot: u32) {
    let next = append_four(r, slot, c, k.lo, k.bound);
    append_four(r, next, c + BN / 2u, k.hi, k.bound);
}

fn append_tile(
    row0: u32, col0: u32, tx: u32, ty: u32, lid: u32,
    r0c0: vec4<f32>, r0c1: vec4<f32>, r1c0: vec4<f32>, r1c1: vec4<f32>,
    r2c0: vec4<f32>, r2c1: vec4<f32>, r3c0: vec4<f32>, r3c1: vec4<f32>,
    r4c0: vec4<f32>, r4c1: vec4<f32>, r5c0: vec4<f32>, r5c1: vec4<f32>,
    r6c0: vec4<f32>, r6c1: vec4<f32>, r7c0: vec4<f32>, r7c1: vec4<f32>,
) {
    let cn0 = column_norms(col0 + tx * 4u);
    let cn1 = column_norms(col0 + tx * 4u + BN / 2u);
    let c = col0 + tx * 4u;
    let m = row0 + ty * 4u;
    let h = BM / 2u;
    let k0 = key_row(m, c, r0c0, r0c1, cn0, cn1);
    let k1 = key_row(m + 1u, c, r1c0, r1c1, cn0, cn1);
    let k2 = key_row(m + 2u, c, r2c0, r2c1, cn0, cn1);
    let k3 = key_row(m + 3u, c, r3c0, r3c1, cn0, cn1);
    let k4 = key_row(m + h, c, r4c0, r4c1, cn0, cn1);
    let k5 = key_row(m + h + 1u, c, r5c0, r5c1, cn0, cn1);
    let k6 = key_row(m + h + 2u, c, r6c0, r6c1, cn0, cn1);
    let k7 = key_row(m + h + 3u, c, r7c0, r7c1, cn0, cn1);

    // Every lane is active here (the only early return is the workgroup's own), so a lane's
    // index is the count of lanes before it.
    let lane = subgroupExclusiveAdd(1u);
    let size = subgroupAdd(1u);
    let first = lid - lane;
    var head = lane;
    var tail = lane;
    if (subgroupAll(first == subgroupBroadcastFirst(first))) {
        // The run of lanes holding ty's rows: lids ty * BN / 8 + 0..BN / 8, cut by the subgroup.
        head = lane - min(lane, tx);
        tail = lane + min(size - 1u - lane, BN / 8u - 1u - tx);
    }

    let p0 = pair_count(k0, k1);
    let p1 = pair_count(k2, k3);
    let p2 = pair_count(k4, k5);
    let p3 = pair_count(k6, k7);
    let i0 = subgroupInclusiveAdd(p0);
    let i1 = subgroupInclusiveAdd(p1);
    let i2 = subgroupInclusiveAdd(p2);
    let i3 = subgroupInclusiveAdd(p3);
    // Kept keys of the lanes before the group's first: a prefix of every lane's prefix.
    let s0 = subgroupShuffle(i0 - p0, head);
    let s1 = subgroupShuffle(i1 - p1, head);
    let s2 = subgroupShuffle(i2 - p2, head);
    let s3 = subgroupShuffle(i3 - p3, head);
    // Kept keys of the group's lanes up to this one, and before it: this lane's offsets in the
    // group's ranges. At the group's last lane the first are the group's totals.
    let t0 = i0 - s0;
    let t1 = i1 - s1;
    let t2 = i2 - s2;
    let t3 = i3 - s3;
    let o0 = t0 - p0;
    let o1 = t1 - p1;
    let o2 = t2 - p2;
    let o3 = t3 - p3;
    var f0 = 0u;
    var f1 = 0u;
    var f2 = 0u;
    var f3 = 0u;
    var f4 = 0u;
    var f5 = 0u;
    var f6 = 0u;
    var f7 = 0u;
    if (lane == tail) {
        f0 = reserve(m, t0 & 0xffffu);
        f1 = reserve(m + 1u, t0 >> 16u);
        f2 = reserve(m + 2u, t1 & 0xffffu);
        f3 = reserve(m + 3u, t1 >> 16u);
        f4 = reserve(m + h, t2 & 0xffffu);
        f5 = reserve(m + h + 1u, t2 >> 16u);
        f6 = reserve(m + h + 2u, t3 & 0xffffu);
        f7 = reserve(m + h + 3u, t3 >> 16u);
    }
    // Lanes need not have reconverged after the branch (the H100 gave wrong shuffles without it).
    subgroupBarrier();
    write_row(m, c, k0, subgroupShuffle(f0, tail) + (o0 & 0xffffu));
    write_row(m + 1u, c, k1, subgroupShuffle(f1, tail) + (o0 >> 16u));
    write_row(m + 2u, c, k2, subgroupShuffle(f2, tail) + (o1 & 0xffffu));
    write_row(m + 3u, c, k3, subgroupShuffle(f3, tail) + (o1 >> 16u));
    write_row(m + h, c, k4, subgroupShuffle(f4, tail) + (o2 & 0xffffu));
    write_row(m + h + 1u, c, k5, subgroupShuffle(f5, tail) + (o2 >> 16u));
    write_row(m + h + 2u, c, k6, subgroupShuffle(f6, tail) + (o3 & 0xffffu));
    write_row(m + h + 3u, c, k7, subgroupShuffle(f7, tail) + (o3 >> 16u));
}
