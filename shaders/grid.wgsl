// The low-dimensional grid (Gowanlock's HybridKNN-Join, section 4): cells of side w over the
// corpus points' bounding box, each point's cell a linear id. `cell_ids` keys every corpus
// point by its cell; the host sorts the (cell id, point) pairs (radix_sort.wgsl), which makes
// the sorted ids the index: a cell's points are the run of its id, found by bisection, so
// only non-empty cells take memory. `query_cells` gives each query the `kc` nearest points
// (f32 keys) of the 3^d cells around its own, in a max-heap of its own, and how many points
// those cells held; the host proves each answer exact or hands the query to the kd-tree.
// A query whose loops were cut short (`loops_ran_whole`) is reported FAILED instead.
//
// Cell coordinates are floor((x - lo) * inv) in f32, clamped to the grid, computed the same
// way for corpus points and queries. Their rounding moves a coordinate by less than
// (sides + 2) * 3 * 2^-24 cells, so two points whose coordinates differ by less than
// w * (1 - 8 (sides + 2) 2^-24) lie in neighbouring cells or the same one: the host's radius
// within which the 3^d cells hold every point (`lowdim::grid`).

struct Params {
    len: u32,      // corpus points (cell_ids) or queries (query_cells)
    dims: u32,     // coordinates a point, 1 to MAX_DIMS
    kc: u32,       // heap slots a query
    groups_x: u32,
    points: u32,   // corpus points (query_cells)
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

const MAX_DIMS: u32 = 6u;
const NONE: u32 = 0xffffffffu;
// `found` of a query whose answer the kernel cannot vouch for: no proof takes it.
const FAILED: u32 = 0xffffffffu;

// Per dimension j < dims: lo (f32 bits) at j, cells a side at 8 + j, the id's stride at 16 + j;
// inv (f32 bits) at 24.
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> geometry: array<u32>;
@group(0) @binding(2) var<storage, read> coords: array<f32>;
@group(0) @binding(3) var<storage, read_write> cell_keys: array<u32>;
@group(0) @binding(4) var<storage, read_write> cell_points: array<u32>;
@group(0) @binding(5) var<storage, read_write> heap_keys: array<f32>;
@group(0) @binding(6) var<storage, read_write> heap_ids: array<u32>;
@group(0) @binding(7) var<storage, read_write> found: array<u32>;
@group(0) @binding(8) var<storage, read> corpus: array<f32>;

fn invocation(lid: u32, wid: vec3<u32>) -> u32 {
    return (wid.x + wid.y * p.groups_x) * 64u + lid;
}

// The cell coordinate of value `x` along dimension `j`, unclamped but kept within
// [-2, sides + 1] (a coordinate further out has no neighbouring cell in the grid either).
fn cell_of(x: f32, j: u32) -> i32 {
    let lo = bitcast<f32>(geometry[j]);
    let inv = bitcast<f32>(geometry[24]);
    let sides = f32(geometry[8u + j]);
    let t = clamp(floor((x - lo) * inv), -2.0, sides + 1.0);
    return i32(t);
}

@compute @workgroup_size(64)
fn cell_ids(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = invocation(lid, wid);
    if (i >= p.len) {
        return;
    }
    var id = 0u;
    for (var j = 0u; j < p.dims; j++) {
        let c = clamp(cell_of(coords[i * p.dims + j], j), 0, i32(geometry[8u + j]) - 1);
        id += u32(c) * geometry[16u + j];
    }
    cell_keys[i] = id;
    cell_points[i] = i;
}

// The first sorted position whose cell id is not below `id`.
fn first_of(id: u32) -> u32 {
    var lo = 0u;
    var hi = p.points;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (cell_keys[mid] < id) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Whether this invocation's loops all ran to their end. llvmpipe (Mesa's software driver,
// lavapipe and its GL) stops every loop of an invocation once all its loops together have
// taken 65535 steps, and reports nothing: a query of a crowded region then misses points and
// its heap looks complete. The steps are counted for all loops together, so a last loop of
// dims + 1 steps (a count the compiler cannot unroll) that ends short means earlier ones may
// have.
fn loops_ran_whole() -> bool {
    var steps = 0u;
    for (var i = 0u; i <= p.dims; i++) {
        steps++;
    }
    return steps == p.dims + 1u;
}

fn swap_slots(a: u32, b: u32) {
    let key = heap_keys[a];
    let id = heap_ids[a];
    heap_keys[a] = heap_keys[b];
    heap_ids[a] = heap_ids[b];
    heap_keys[b] = key;
    heap_ids[b] = id;
}

// Restores the max-heap of `len` slots from `base` after its top was replaced.
fn sift_down(base: u32, len: u32) {
    var at = 0u;
    loop {
        let left = 2u * at + 1u;
        if (left >= len) {
            break;
        }
        var child = left;
        if (left + 1u < len && heap_keys[base + left + 1u] > heap_keys[base + left]) {
            child = left + 1u;
        }
        if (heap_keys[base + child] <= heap_keys[base + at]) {
            break;
        }
        swap_slots(base + at, base + child);
        at = child;
    }
}

// Adds a key to the heap of `held` slots (kc at most), keeping its largest on top.
fn offer(base: u32, held: u32, key: f32, id: u32) {
    if (held < p.kc) {
        var at = held;
        heap_keys[base + at] = key;
        heap_ids[base + at] = id;
        while (at > 0u) {
            let parent = (at - 1u) / 2u;
            if (heap_keys[base + parent] >= heap_keys[base + at]) {
                break;
            }
            swap_slots(base + parent, base + at);
            at = parent;
        }
    } else if (key < heap_keys[base]) {
        heap_keys[base] = key;
        heap_ids[base] = id;
        sift_down(base, p.kc);
    }
}

@compute @workgroup_size(64)
fn query_cells(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let q = invocation(lid, wid);
    if (q >= p.len) {
        return;
    }
    var own: array<i32, MAX_DIMS>;
    var x: array<f32, MAX_DIMS>;
    var around = 1u;
    for (var j = 0u; j < p.dims; j++) {
        x[j] = coords[q * p.dims + j];
        own[j] = cell_of(x[j], j);
        around *= 3u;
    }
    let base = q * p.kc;
    var held = 0u;
    var seen = 0u;
    // The cells around the query's own lie in 3^(d-1) rows along dimension 0, whose stride
    // is 1: each row is one run of ids, found by one bisection.
    let first_col = max(own[0] - 1, 0);
    let last_col = min(own[0] + 1, i32(geometry[8u]) - 1);
    for (var n = 0u; n < around / 3u; n++) {
        // Row n: offsets -1, 0, +1 in dimensions 1.., n's base-3 digits.
        var row = 0u;
        var inside = first_col <= last_col;
        var rest = n;
        for (var j = 1u; j < p.dims; j++) {
            let c = own[j] + i32(rest % 3u) - 1;
            rest /= 3u;
            inside = inside && c >= 0 && c < i32(geometry[8u + j]);
            row += u32(max(c, 0)) * geometry[16u + j];
        }
        if (!inside) {
            continue;
        }
        let last = row + u32(last_col);
        for (var s = first_of(row + u32(first_col)); s < p.points && cell_keys[s] <= last; s++) {
            let point = cell_points[s];
            var key = 0.0;
            for (var j = 0u; j < p.dims; j++) {
                let diff = x[j] - corpus[point * p.dims + j];
                key = fma(diff, diff, key);
            }
            offer(base, held, key, point);
            held = min(held + 1u, p.kc);
            seen++;
        }
    }
    for (var slot = held; slot < p.kc; slot++) {
        heap_keys[base + slot] = bitcast<f32>(0x7f800000u);
        heap_ids[base + slot] = NONE;
    }
    found[q] = select(FAILED, min(seen, FAILED - 1u), loops_ran_whole());
}
