// A cover tree's queries on the GPU, a group of neighbouring query points at a time: the
// host finds, by the tree, every point that can be among any group member's k nearest (the
// group's cover set, one list for the group); a workgroup computes the distances of its
// members to that list, as a small dense product, in two passes.
//
//   bound:   each member's k least f32 squared distances to the list (its own point left
//            out) in a max-heap in device memory; from the k-th, a threshold T past which no
//            point can be among the member's k nearest (the host's error bounds of these
//            sums, `lowdim::covertree::space`, evaluated in f32 and widened).
//   collect: the same sums again; each point at or under T appended to the member's list
//            (up to `cap`; the count goes on past it so that the host sees the overflow).
//
// The host does not trust T or the sums: it checks that the member looked at its whole list
// (a member of a workgroup whose loops a driver cut short reports it looked at none), takes
// the member's reach from the collected points' distances computed again on the CPU, checks
// that no point above T could be within it, and answers a member that fails (or overflowed)
// on the CPU. So this kernel decides speed, never the answer.
//
// Every invocation of a workgroup runs the same loops (the list is the group's): barriers
// stay in uniform control flow, and no invocation leaves a loop the others go on with.

struct Params {
    dims: u32,
    k: u32,
    cap: u32,
    groups_x: u32,
    groups: u32,
    euclidean: u32,   // 1: euclidean rows; 0: unit rows (cosine, correlation)
    heap_depth: u32,  // steps of a walk through a heap of k: the bits of k
    pad: u32,
    sum_rel: f32,     // the host's `Space` constants, for a device that flushes subnormals
    sum_abs: f32,
    vector_err: f32,
    key_err: f32,
}

// Members a workgroup, and values of each member staged at a time.
const GROUP: u32 = 32u;
const DEPTH: u32 = 32u;
const STRIDE: u32 = 33u;   // DEPTH + 1: lanes reading their own rows hit different banks

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> vectors: array<f32>;
// Per group: first list entry, list length, first member slot, members.
@group(0) @binding(2) var<storage, read> groups: array<vec4<u32>>;
// Per member slot: its point.
@group(0) @binding(3) var<storage, read> members: array<u32>;
// The groups' lists of points, one after another.
@group(0) @binding(4) var<storage, read> lists: array<u32>;
// Per member slot: k f32 squared distances (bound's heap).
@group(0) @binding(5) var<storage, read_write> heaps: array<f32>;
// Per member slot: T as f32 bits (bound writes, collect reads).
@group(0) @binding(6) var<storage, read_write> thresholds: array<u32>;
// Per member slot: points collected (may exceed cap), then list points looked at (its own
// point left out), which the host checks against the list's length.
@group(0) @binding(7) var<storage, read_write> counts: array<vec2<u32>>;
// Per member slot: cap (point, f32 bits of its squared distance).
@group(0) @binding(8) var<storage, read_write> found: array<vec2<u32>>;

// Nonzero once a driver ended a lane's loops early (see the end of `run`).
var<workgroup> loops_cut: atomic<u32>;
// The members' values, DEPTH of each.
var<workgroup> staged: array<f32, GROUP * STRIDE>;
// Each member's sums to the tile's points (its own row of the array).
var<workgroup> sums: array<f32, GROUP * STRIDE>;


const INFINITE: u32 = 0x7f800000u;

// The largest f32 squared distance s such that a point at s may be among the k nearest of a
// member whose k-th least sum is `kth`: the upper bound on the true distance at `kth`, the
// reach of the float64 keys beyond it, and the sum whose lower bound reaches that far,
// widened by 2^-16 for the f32 arithmetic here.
fn threshold(kth: f32) -> f32 {
    let hi = sqrt((kth + params.sum_abs) / (1.0 - params.sum_rel)) + 2.0 * params.vector_err;
    var reach: f32;
    if params.euclidean == 1u {
        reach = hi * (1.0 + params.key_err);
    } else {
        reach = sqrt(hi * hi + 4.0 * params.key_err);
    }
    let far = reach + 2.0 * params.vector_err;
    return (far * far * (1.0 + params.sum_rel) + params.sum_abs) * (1.0 + 1.0 / 65536.0);
}

// The k least values offered, largest on top, at heaps[base .. base + k], `held` of them
// held so far. Each walk takes a fixed `heap_depth` steps, the moves predicated: no lane's
// loop ends while another's goes on.
fn heap_offer(base: u32, held: u32, s: f32) {
    let k = params.k;
    if held < k {
        var i = held;
        var moving = true;
        for (var step = 0u; step < params.heap_depth; step++) {
            if moving && i > 0u {
                let parent = (i - 1u) / 2u;
                let above = heaps[base + parent];
                if above < s {
                    heaps[base + i] = above;
                    i = parent;
                } else {
                    moving = false;
                }
            }
        }
        heaps[base + i] = s;
        return;
    }
    var i = 0u;
    var moving = true;
    for (var step = 0u; step < params.heap_depth; step++) {
        let left = 2u * i + 1u;
        if moving && left < k {
            var child = left;
            let right = left + 1u;
            if right < k && heaps[base + right] > heaps[base + left] {
                child = right;
            }
            let below = heaps[base + child];
            if below > s {
                heaps[base + i] = below;
                i = child;
            } else {
                moving = false;
            }
        }
    }
    heaps[base + i] = s;
}

// Lane j takes the tile's point j against every member, the members' values staged DEPTH at
// a time (sums kept in registers, one a member). Every lane runs every loop to its end (points
// past the list and lanes past the members sum zeros): no loop of a lane ends while another
// lane's goes on.
fn tile_sums(lane: u32, point: u32, own: u32, is_member: bool, group_members: u32, dims: u32) {
    var acc: array<f32, 32>;
    for (var m = 0u; m < GROUP; m++) {
        acc[m] = 0.0;
    }
    for (var d0 = 0u; d0 < dims; d0 += DEPTH) {
        for (var t = 0u; t < DEPTH; t++) {
            var v = 0.0;
            if is_member && d0 + t < dims {
                v = vectors[own * dims + d0 + t];
            }
            staged[lane * STRIDE + t] = v;
        }
        var x: array<f32, 32>;
        for (var t = 0u; t < DEPTH; t++) {
            var v = 0.0;
            if point != 0xffffffffu && d0 + t < dims {
                v = vectors[point * dims + d0 + t];
            }
            x[t] = v;
        }
        workgroupBarrier();
        for (var m = 0u; m < GROUP; m++) {
            // `group_members` is the workgroup's: a uniform branch.
            if m < group_members {
                var s = acc[m];
                for (var t = 0u; t < DEPTH; t++) {
                    let diff = x[t] - staged[m * STRIDE + t];
                    s = fma(diff, diff, s);
                }
                acc[m] = s;
            }
        }
        workgroupBarrier();
    }
    // Member m's sums to the tile's points in row m.
    for (var m = 0u; m < GROUP; m++) {
        sums[m * STRIDE + lane] = acc[m];
    }
}

// One group's members against its list, a tile of GROUP list points at a time; `collecting`
// picks the pass.
fn run(wid: vec3<u32>, lane: u32, collecting: bool) {
    let g = wid.x + wid.y * params.groups_x;
    // Whole workgroups leave together: `g` is the workgroup's.
    if g >= params.groups {
        return;
    }
    if lane == 0u {
        atomicStore(&loops_cut, 0u);
    }
    workgroupBarrier();
    let group = groups[g];
    let list_start = group.x;
    let list_len = group.y;
    let slot = group.z + lane;
    let is_member = lane < group.w;
    let dims = params.dims;
    var own = 0xffffffffu;
    if is_member {
        own = members[slot];
    }
    let k = params.k;
    var held = 0u;
    var top = 0.0;
    var limit = 0.0;
    var collected = 0u;
    var looked = 0u;
    if collecting && is_member {
        limit = bitcast<f32>(thresholds[slot]);
    }
    let group_members = group.w;
    for (var first = 0u; first < list_len; first += GROUP) {
        var point = 0xffffffffu;
        if first + lane < list_len {
            point = lists[list_start + first + lane];
        }
        tile_sums(lane, point, own, is_member, group_members, dims);
        workgroupBarrier();
        let points = min(GROUP, list_len - first);
        // Every lane walks the tile's points (a uniform count); members act on them.
        for (var j = 0u; j < points; j++) {
            let p = lists[list_start + first + j];
            if is_member && p != own {
                let s = sums[lane * STRIDE + j];
                looked += 1u;
                if collecting {
                    if s <= limit {
                        if collected < params.cap {
                            found[slot * params.cap + collected] = vec2<u32>(p, bitcast<u32>(s));
                        }
                        collected += 1u;
                    }
                } else if held < k {
                    heap_offer(slot * k, held, s);
                    held += 1u;
                    top = heaps[slot * k];
                } else if s < top {
                    heap_offer(slot * k, held, s);
                    top = heaps[slot * k];
                }
            }
        }
        // The next tile writes `sums` only after its staging's barriers, which every member
        // reaches once it has read these.
    }
    // Mesa's llvmpipe ends every loop of an invocation once its loops together have taken
    // 65535 steps, with no error. A lane cut short may have left its share of a tile's sums
    // unstaged while `looked` still came out whole (a last tile of one point), so a last
    // loop, its count read from the uniform so that it is not unrolled, tells every lane;
    // a collection after a cut says it looked at nothing, and the host answers the member.
    let want = 2u + (params.k & 1u);
    var steps = 0u;
    for (var i = 0u; i < want; i++) {
        steps++;
    }
    if steps != want {
        atomicStore(&loops_cut, 1u);
    }
    workgroupBarrier();
    let cut = atomicLoad(&loops_cut) != 0u;
    if !is_member {
        return;
    }
    if collecting {
        counts[slot] = vec2<u32>(collected, select(looked, 0u, cut));
    } else if held < k {
        thresholds[slot] = INFINITE;
    } else {
        thresholds[slot] = bitcast<u32>(threshold(top));
    }
}

@compute @workgroup_size(32)
fn bound(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    run(wid, lane, false);
}

@compute @workgroup_size(32)
fn collect(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    run(wid, lane, true);
}
