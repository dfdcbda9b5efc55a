// One pass of a stable LSD radix sort of (u32 key, u32 value) pairs by the 4-bit digit of the
// keys at bit `shift` (notes/sort.md): `count_digits` counts each tile's digits into
// `offsets`, laid out digit-major (offsets[digit * tiles + tile]); the host scans them
// (prefix_sum.wgsl), after which offsets[digit * tiles + tile] is the first output slot of
// the tile's pairs of that digit; `scatter` ranks each tile's pairs stably and writes them
// there. The entry point `scatter` and the scan it ranks with, `scan_counters`, are appended by
// the host: radix_entry_subgroup.wgsl or radix_entry_workgroup.wgsl.
//
// Float keys: with FLOAT_IN the first pass reads keys as f32 bits and maps them to
// order-preserving u32s (`order_key`); with FLOAT_OUT the last pass writes them back as f32.

struct Params {
    len: u32,
    shift: u32,
    tiles: u32,
    groups_x: u32,
    flags: u32,
    // The digit's bits that belong to the key (a sort by fewer bits than its passes cover).
    digit_mask: u32,
    _pad1: u32,
    _pad2: u32,
}

const FLOAT_IN: u32 = 1u;
const FLOAT_OUT: u32 = 2u;
const ITEMS: u32 = 4u;
const TILE: u32 = 1024u;
const DIGITS: u32 = 16u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> keys_in: array<u32>;
@group(0) @binding(2) var<storage, read> values_in: array<u32>;
@group(0) @binding(3) var<storage, read_write> keys_out: array<u32>;
@group(0) @binding(4) var<storage, read_write> values_out: array<u32>;
@group(0) @binding(5) var<storage, read_write> offsets: array<u32>;

var<workgroup> histogram: array<atomic<u32>, DIGITS>;

// Floats equal as floats become equal integers (-0.0 is +0.0), in the floats' order.
fn order_key(bits: u32) -> u32 {
    if (bits == 0x80000000u) {
        return 0x80000000u;
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

fn float_bits(key: u32) -> u32 {
    if ((key & 0x80000000u) != 0u) {
        return key & 0x7fffffffu;
    }
    return ~key;
}

fn key_at(i: u32) -> u32 {
    let k = keys_in[i];
    if ((p.flags & FLOAT_IN) != 0u) {
        return order_key(k);
    }
    return k;
}

fn digit_of(key: u32) -> u32 {
    return (key >> p.shift) & p.digit_mask;
}

@compute @workgroup_size(256)
fn count_digits(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let tile = wid.x + wid.y * p.groups_x;
    if (tile >= p.tiles) {
        return;
    }
    if (lid < DIGITS) {
        atomicStore(&histogram[lid], 0u);
    }
    workgroupBarrier();
    for (var i = 0u; i < ITEMS; i++) {
        let at = tile * TILE + i * 256u + lid;
        if (at < p.len) {
            atomicAdd(&histogram[digit_of(key_at(at))], 1u);
        }
    }
    workgroupBarrier();
    if (lid < DIGITS) {
        offsets[lid * p.tiles + tile] = atomicLoad(&histogram[lid]);
    }
}

// 16 counters of 16 bits in 8 words, as two vec4s: digit d is in word d / 2, half d % 2.
fn counter_add(lo: ptr<function, vec4<u32>>, hi: ptr<function, vec4<u32>>, d: u32) {
    let one = 1u << ((d & 1u) * 16u);
    let w = (d >> 1u) & 3u;
    if (d < 8u) {
        (*lo)[w] += one;
    } else {
        (*hi)[w] += one;
    }
}

fn counter_get(lo: vec4<u32>, hi: vec4<u32>, d: u32) -> u32 {
    let w = (d >> 1u) & 3u;
    var word = lo[w];
    if (d >= 8u) {
        word = hi[w];
    }
    return (word >> ((d & 1u) * 16u)) & 0xffffu;
}

// Ranks the tile's pairs stably and writes each at its digit's next slot. `lane`, `lanes` and
// `subgroup` are what `scan_counters` needs of the invocation's subgroup.
fn scatter_tile(lid: u32, wid: vec3<u32>, lane: u32, lanes: u32, subgroup: u32) {
    let tile = wid.x + wid.y * p.groups_x;
    if (tile >= p.tiles) {
        return;
    }
    let first = tile * TILE + lid * ITEMS;
    var keys: array<u32, ITEMS>;
    var digits: array<u32, ITEMS>;
    var lo = vec4<u32>(0u);
    var hi = vec4<u32>(0u);
    for (var i = 0u; i < ITEMS; i++) {
        digits[i] = DIGITS;
        if (first + i < p.len) {
            keys[i] = key_at(first + i);
            digits[i] = digit_of(keys[i]);
            counter_add(&lo, &hi, digits[i]);
        }
    }
    let before = scan_counters(lid, lane, lanes, subgroup, lo, hi);
    var seen_lo = vec4<u32>(0u);
    var seen_hi = vec4<u32>(0u);
    for (var i = 0u; i < ITEMS; i++) {
        let d = digits[i];
        if (d < DIGITS) {
            let rank = counter_get(before[0], before[1], d) + counter_get(seen_lo, seen_hi, d);
            let at = offsets[d * p.tiles + tile] + rank;
            var key = keys[i];
            if ((p.flags & FLOAT_OUT) != 0u) {
                key = float_bits(key);
            }
            keys_out[at] = key;
            values_out[at] = values_in[first + i];
            counter_add(&seen_lo, &seen_hi, d);
        }
    }
}

var<workgroup> scanned: array<array<vec4<u32>, 2>, 256>;

// The exclusive scan of the invocations' packed counters in workgroup memory (Hillis-Steele),
// in the order of `local_invocation_index`.
fn scan_workgroup(lid: u32, lo: vec4<u32>, hi: vec4<u32>) -> array<vec4<u32>, 2> {
    var sum_lo = lo;
    var sum_hi = hi;
    scanned[lid][0] = sum_lo;
    scanned[lid][1] = sum_hi;
    workgroupBarrier();
    for (var step = 1u; step < 256u; step <<= 1u) {
        var add_lo = vec4<u32>(0u);
        var add_hi = vec4<u32>(0u);
        if (lid >= step) {
            add_lo = scanned[lid - step][0];
            add_hi = scanned[lid - step][1];
        }
        workgroupBarrier();
        sum_lo += add_lo;
        sum_hi += add_hi;
        scanned[lid][0] = sum_lo;
        scanned[lid][1] = sum_hi;
        workgroupBarrier();
    }
    return array<vec4<u32>, 2>(sum_lo - lo, sum_hi - hi);
}
