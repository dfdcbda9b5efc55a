// The cover tree built on the GPU (Sharma's GCTVC), every open set of the tree advanced one
// step a round, all sets at once.
//
// A set s stands for a node: its point e and the points below it (its members), each with
// its squared distance to e. The members of every set lie in one run [a, end) of the entry
// arrays (point, squared distance as f32 bits), and `set_of` names each entry's set. A set
// is in one of two steps:
//   SPLIT: the level t drops to the largest power of two below its farthest member; members
//          farther than t go to the end of its run (the far part), the rest stay (the near
//          part, [a, near_end)).
//   PEEL:  the far part's first member f becomes a child: the far members within t of f
//          (their distance to f computed here) move next to it and become the child's
//          members, f's entry leaves every set, and the rest stay far. Once the far part is
//          empty the near part is split again at the next level; once that too is empty the
//          set is done.
// A set whose farthest member is at f32 distance 0 has members no f32 distance tells apart
// from e: each becomes a leaf child at once. Every distinct point becomes one set, so the
// build ends when `done` counts them all.
//
// A round is five dispatches over the entries or the sets: measure, prepare, scatter,
// finish, relabel. Entries move within their set's run by atomic counters (the order within
// a part does not matter to the tree). Sets created during a round (by prepare or finish)
// take no part in it: the sets of a round are those counted when the round before ended.
//
// Mesa's llvmpipe ends every loop of an invocation once its loops together have taken 65535
// steps, with no error: a distance over more columns, or a long run of leaves, would come out
// short. Each entry point whose loops may run long ends with `check_loops_ran_whole`, which
// raises CUT_SHORT, and the host then builds the tree on the CPU.
//
// Once every set is done, `nodes` writes what the host reads of each set but the root's into
// the entry arrays, no longer needed: its point and parent, and its f32 squared distances to
// the parent and to its farthest member. The host turns these into bounds on true distances
// with the error of these f32 sums (`lowdim::covertree::space`, for a device that may flush
// subnormals).

struct Params {
    entries: u32,    // entries: distinct points but the root
    dims: u32,
    sets: u32,       // distinct points: the most sets there can be
    groups_x: u32,
    chunk_rows: u32, // points a binding of `points` holds
}

const NONE: u32 = 0xffffffffu;

// Steps of a set, and what it did in the round under way.
const DONE: u32 = 0u;
const SPLIT: u32 = 1u;
const PEEL: u32 = 2u;
const LEAVES: u32 = 3u;

// Fields of a set, `STRIDE` words each.
const STRIDE: u32 = 16u;
const POINT: u32 = 0u;
const START: u32 = 1u;
const NEAR_END: u32 = 2u;
const FAR_START: u32 = 3u;
const END: u32 = 4u;
const STEP: u32 = 5u;
const LEVEL_SQ: u32 = 6u;      // f32 bits: t^2 of the level being peeled
const PARENT: u32 = 7u;
const PARENT_SQ: u32 = 8u;     // f32 bits: squared distance from the point to the parent's
const RADIUS_SQ: u32 = 9u;     // f32 bits: the farthest member at the first split
const ROUND: u32 = 10u;        // the step taken this round
const CHILD: u32 = 11u;        // the child a peel made this round
const MOVED_LO: u32 = 12u;     // entries that left the set this round: [MOVED_LO, MOVED_HI)
const MOVED_HI: u32 = 13u;
const SPLIT_ONCE: u32 = 14u;   // 1 once RADIUS_SQ holds

// Counters: sets made, sets done, sets of the round; then per set (at HEAD + 4 s) its
// farthest member's bits, the entries placed from the front and from the back.
const MADE: u32 = 0u;
const FINISHED: u32 = 1u;
const OF_ROUND: u32 = 2u;
const CUT_SHORT: u32 = 3u;     // nonzero once an invocation's loops were ended early
const HEAD: u32 = 4u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> points: array<f32>;
@group(0) @binding(2) var<storage, read_write> entries_in: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> entries_out: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> set_in: array<u32>;
@group(0) @binding(5) var<storage, read_write> set_out: array<u32>;
@group(0) @binding(6) var<storage, read_write> sets: array<u32>;
@group(0) @binding(7) var<storage, read_write> counters: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> peeled_sq: array<u32>;

fn invocation(lid: u32, wid: vec3<u32>) -> u32 {
    return (wid.x + wid.y * p.groups_x) * 64u + lid;
}

fn field(s: u32, f: u32) -> u32 {
    return sets[s * STRIDE + f];
}

fn set_field(s: u32, f: u32, v: u32) {
    sets[s * STRIDE + f] = v;
}

// Squared distance of points a and b, in f32. Points past one binding lie in chunks of
// `chunk_rows` points, chunk c > 0 in `points_c` (`point_in_chunk` and those bindings are
// appended by the host, `shaders::cover_tree`); both loops sum in the same order.
fn sq(a: u32, b: u32) -> f32 {
    let d = p.dims;
    let ca = a / p.chunk_rows;
    let cb = b / p.chunk_rows;
    var sum = 0.0;
    if (ca == 0u && cb == 0u) {
        for (var j = 0u; j < d; j += 1u) {
            let t = points[a * d + j] - points[b * d + j];
            sum += t * t;
        }
        return sum;
    }
    let ra = (a - ca * p.chunk_rows) * d;
    let rb = (b - cb * p.chunk_rows) * d;
    for (var j = 0u; j < d; j += 1u) {
        let t = point_in_chunk(ca, ra + j) - point_in_chunk(cb, rb + j);
        sum += t * t;
    }
    return sum;
}

// Raises CUT_SHORT where this invocation's loops were ended early (see the header): the steps
// are counted for all loops together, so a last loop that ends short means earlier ones may
// have. Its count comes from the uniform, so the compiler cannot unroll it.
fn check_loops_ran_whole() {
    let want = 2u + (p.dims & 1u);
    var steps = 0u;
    for (var i = 0u; i < want; i++) {
        steps++;
    }
    if (steps != want) {
        atomicStore(&counters[CUT_SHORT], 1u);
    }
}

// The largest power of four below `far` (> 0): the squared level.
fn level_below(far: f32) -> f32 {
    var t = 1.0;
    for (var i = 0u; i < 160u && t >= far; i += 1u) {
        t *= 0.25;
    }
    for (var i = 0u; i < 160u && t * 4.0 < far; i += 1u) {
        t *= 4.0;
    }
    return t;
}

// Every point but the root (point 0) a member of the root's set, with its distance to it.
@compute @workgroup_size(64)
fn root(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = invocation(lid, wid);
    if (i >= p.entries) {
        return;
    }
    entries_in[i] = vec2<u32>(i + 1u, bitcast<u32>(sq(0u, i + 1u)));
    set_in[i] = 0u;
    check_loops_ran_whole();
}

// Each splitting set's farthest member; each peeling set's far members' distances to f.
@compute @workgroup_size(64)
fn measure(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = invocation(lid, wid);
    if (i >= p.entries) {
        return;
    }
    let s = set_in[i];
    if (s == NONE) {
        return;
    }
    let step = field(s, STEP);
    if (step == SPLIT) {
        // Squares are >= 0, whose f32 bits order as their values.
        atomicMax(&counters[HEAD + 4u * s], entries_in[i].y);
    } else if (step == PEEL) {
        let f_at = field(s, FAR_START);
        if (i > f_at) {
            peeled_sq[i] = bitcast<u32>(sq(entries_in[f_at].x, entries_in[i].x));
            check_loops_ran_whole();
        }
    }
}

// A set's step for the round: its level where it splits, its leaves where its members are
// at distance 0.
@compute @workgroup_size(64)
fn prepare(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let s = invocation(lid, wid);
    if (s >= atomicLoad(&counters[OF_ROUND])) {
        return;
    }
    let step = field(s, STEP);
    set_field(s, ROUND, step);
    set_field(s, MOVED_LO, 0u);
    set_field(s, MOVED_HI, 0u);
    atomicStore(&counters[HEAD + 4u * s + 1u], 0u);
    atomicStore(&counters[HEAD + 4u * s + 2u], 0u);
    if (step != SPLIT) {
        return;
    }
    let far_bits = atomicLoad(&counters[HEAD + 4u * s]);
    atomicStore(&counters[HEAD + 4u * s], 0u);
    if (field(s, SPLIT_ONCE) == 0u) {
        set_field(s, RADIUS_SQ, far_bits);
        set_field(s, SPLIT_ONCE, 1u);
    }
    let far = bitcast<f32>(far_bits);
    if (far > 0.0) {
        set_field(s, LEVEL_SQ, bitcast<u32>(level_below(far)));
        return;
    }
    // No f32 distance tells these members from e: leaves of e.
    let a = field(s, START);
    let m = field(s, END) - a;
    let first = atomicAdd(&counters[MADE], m);
    for (var j = 0u; j < m; j += 1u) {
        let c = first + j;
        for (var f = 0u; f < STRIDE; f += 1u) {
            set_field(c, f, 0u);
        }
        set_field(c, POINT, entries_in[a + j].x);
        set_field(c, PARENT, s);
        set_field(c, PARENT_SQ, entries_in[a + j].y);
        set_field(c, SPLIT_ONCE, 1u);
    }
    check_loops_ran_whole();
    atomicAdd(&counters[FINISHED], m + 1u);
    set_field(s, STEP, DONE);
    set_field(s, ROUND, LEAVES);
    set_field(s, MOVED_LO, a);
    set_field(s, MOVED_HI, a + m);
}

// Entries moved to their part: near or far of a split, the new child's or still far of a
// peel. Every other entry stays where it is.
@compute @workgroup_size(64)
fn scatter(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = invocation(lid, wid);
    if (i >= p.entries) {
        return;
    }
    let s = set_in[i];
    var e = entries_in[i];
    var at = i;
    if (s != NONE) {
        let round = field(s, ROUND);
        let level = bitcast<f32>(field(s, LEVEL_SQ));
        if (round == SPLIT) {
            if (bitcast<f32>(e.y) <= level) {
                at = field(s, START) + atomicAdd(&counters[HEAD + 4u * s + 1u], 1u);
            } else {
                at = field(s, END) - 1u - atomicAdd(&counters[HEAD + 4u * s + 2u], 1u);
            }
        } else if (round == PEEL) {
            let f_at = field(s, FAR_START);
            if (i > f_at) {
                let to_f = peeled_sq[i];
                if (bitcast<f32>(to_f) <= level) {
                    at = f_at + 1u + atomicAdd(&counters[HEAD + 4u * s + 1u], 1u);
                    e.y = to_f;
                } else {
                    at = field(s, END) - 1u - atomicAdd(&counters[HEAD + 4u * s + 2u], 1u);
                }
            }
        }
    }
    entries_out[at] = e;
    set_out[at] = s;
}

// A set's next step: a split makes it peel; a peel makes a child of f and peels on, or
// splits the near part at the next level, or ends the set.
@compute @workgroup_size(64)
fn finish(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let s = invocation(lid, wid);
    if (s >= atomicLoad(&counters[OF_ROUND])) {
        return;
    }
    let round = field(s, ROUND);
    let placed = atomicLoad(&counters[HEAD + 4u * s + 1u]);
    if (round == SPLIT) {
        let near_end = field(s, START) + placed;
        set_field(s, NEAR_END, near_end);
        set_field(s, FAR_START, near_end);
        set_field(s, STEP, PEEL);
    } else if (round == PEEL) {
        let f_at = field(s, FAR_START);
        let f = entries_out[f_at];
        let c = atomicAdd(&counters[MADE], 1u);
        for (var j = 0u; j < STRIDE; j += 1u) {
            set_field(c, j, 0u);
        }
        set_field(c, POINT, f.x);
        set_field(c, START, f_at + 1u);
        set_field(c, END, f_at + 1u + placed);
        set_field(c, PARENT, s);
        set_field(c, PARENT_SQ, f.y);
        if (placed > 0u) {
            set_field(c, STEP, SPLIT);
        } else {
            set_field(c, SPLIT_ONCE, 1u);
            atomicAdd(&counters[FINISHED], 1u);
        }
        set_field(s, CHILD, c);
        set_field(s, MOVED_LO, f_at);
        set_field(s, MOVED_HI, f_at + 1u + placed);
        let far_start = f_at + 1u + placed;
        set_field(s, FAR_START, far_start);
        if (far_start == field(s, END)) {
            let near_end = field(s, NEAR_END);
            set_field(s, END, near_end);
            if (near_end == field(s, START)) {
                set_field(s, STEP, DONE);
                atomicAdd(&counters[FINISHED], 1u);
            } else {
                set_field(s, STEP, SPLIT);
            }
        }
    }
}

// Entries that left their set this round: f's leaves every set, its new members join the
// child. The next round takes every set made so far.
@compute @workgroup_size(64)
fn relabel(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = invocation(lid, wid);
    if (i == 0u) {
        atomicStore(&counters[OF_ROUND], atomicLoad(&counters[MADE]));
    }
    if (i >= p.entries) {
        return;
    }
    let s = set_out[i];
    if (s == NONE) {
        return;
    }
    let lo = field(s, MOVED_LO);
    if (i < lo || i >= field(s, MOVED_HI)) {
        return;
    }
    if (field(s, ROUND) == PEEL && i > lo) {
        set_out[i] = field(s, CHILD);
    } else {
        set_out[i] = NONE;
    }
}

// What the host reads of set s > 0, at s - 1: (point, parent) in `entries_in`, (squared
// distance to the parent, squared radius) in `entries_out`.
@compute @workgroup_size(64)
fn nodes(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let s = invocation(lid, wid) + 1u;
    if (s >= p.sets) {
        return;
    }
    entries_in[s - 1u] = vec2<u32>(field(s, POINT), field(s, PARENT));
    entries_out[s - 1u] = vec2<u32>(field(s, PARENT_SQ), field(s, RADIUS_SQ));
}
