// An exclusive prefix sum of a u32 array of any length, in three kernels: `scan_blocks` scans
// each block of 1024 entries in place and writes the block's total to `sums`; the host scans
// `sums` the same way (until it is one block), then `add_block_offsets` adds each block's
// scanned total to its entries.

struct Params {
    len: u32,
    blocks: u32,
    groups_x: u32,
    _pad0: u32,
}

const ITEMS: u32 = 4u;
const BLOCK: u32 = 1024u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> data: array<u32>;
@group(0) @binding(2) var<storage, read_write> sums: array<u32>;

var<workgroup> partial: array<u32, 256>;

@compute @workgroup_size(256)
fn scan_blocks(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let block = wid.x + wid.y * p.groups_x;
    if (block >= p.blocks) {
        return;
    }
    let first = block * BLOCK + lid * ITEMS;
    var values: array<u32, ITEMS>;
    var own = 0u;
    for (var i = 0u; i < ITEMS; i++) {
        values[i] = 0u;
        if (first + i < p.len) {
            values[i] = data[first + i];
        }
        own += values[i];
    }
    // Hillis-Steele over the invocations' sums.
    var sum = own;
    partial[lid] = sum;
    workgroupBarrier();
    for (var step = 1u; step < 256u; step <<= 1u) {
        var add = 0u;
        if (lid >= step) {
            add = partial[lid - step];
        }
        workgroupBarrier();
        sum += add;
        partial[lid] = sum;
        workgroupBarrier();
    }
    var running = sum - own;
    for (var i = 0u; i < ITEMS; i++) {
        if (first + i < p.len) {
            data[first + i] = running;
        }
        running += values[i];
    }
    if (lid == 255u) {
        sums[block] = sum;
    }
}

@compute @workgroup_size(256)
fn add_block_offsets(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let block = wid.x + wid.y * p.groups_x;
    if (block >= p.blocks) {
        return;
    }
    let add = sums[block];
    for (var i = 0u; i < ITEMS; i++) {
        let at = block * BLOCK + i * 256u + lid;
        if (at < p.len) {
            data[at] += add;
        }
    }
}
