//! Throughput of f16 cooperative-matrix (tensor core) dot products with knng's epilogue,
//! on adapters that offer `EXPERIMENTAL_COOPERATIVE_MATRIX` with 16x16 f16 -> f32.
//!
//! Measures what a tensor-core distance kernel could reach before it is built into the
//! engine (notes/distance.md, "Tensor cores"). Each workgroup computes a tile of
//! `|a|^2 + |b|^2 - 2 a.b` for rows of f16 values and counts the keys under a threshold,
//! as the shortlist epilogue compares every key with its row's bound. The inputs are
//! multiples of 1/8 in [-1, 1], whose products and sums are exact in f32, so the keys of
//! the check run must equal the float64 ones bit for bit.
//!
//! ```text
//! cargo run --release --example tensor_probe -- M N K WM WN WARPS_M WARPS_N FORM [REPS]
//! ```
//! WM x WN 16x16 accumulators per subgroup, WARPS_M x WARPS_N subgroups per workgroup; FORM
//! 0 loads straight from storage, 1 stages f16 tiles, 2 stages vec4<f16> tiles, +4 syncs the
//! epilogue per subgroup instead of per workgroup, +8 reads one key of each accumulator
//! (the tensor work and the stores alone; the check then fails by design).

use std::time::Instant;

/// Bindings, workgroup arrays and the start of the entry point shared by both forms: the
/// tile's norms in workgroup memory, the subgroup's place in the tile, zeroed accumulators.
/// `staged`: the element type and row length of workgroup tiles of both operands.
fn prologue(wm: usize, wn: usize, warps_m: usize, warps_n: usize, rows: &str, staged: Option<(&str, usize)>) -> String {
    let warps = warps_m * warps_n;
    let (tm, tn, threads) = (16 * wm * warps_m, 16 * wn * warps_n, warps * 32);
    let tiles = match staged {
        Some((elem, row)) => format!(
            "var<workgroup> ta: array<{elem}, {}>;\nvar<workgroup> tb: array<{elem}, {}>;\n",
            tm * row,
            tn * row
        ),
        None => String::new(),
    };
    let mut s = format!(
        "enable f16;
enable wgpu_cooperative_matrix;

struct Params {{ m: u32, n: u32, k: u32, write_keys: u32, threshold: f32, p0: u32, p1: u32, p2: u32 }}
@group(0) @binding(0) var<storage, read> a: array<{rows}>;
@group(0) @binding(1) var<storage, read> b: array<{rows}>;
@group(0) @binding(2) var<storage, read> norms_a: array<f32>;
@group(0) @binding(3) var<storage, read> norms_b: array<f32>;
@group(0) @binding(4) var<storage, read_write> keys: array<f32>;
@group(0) @binding(5) var<storage, read_write> below: array<atomic<u32>>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read> zeros: array<f32>;

{tiles}var<workgroup> scratch: array<f32, {scratch}>;
var<workgroup> row_norm: array<f32, {tm}>;
var<workgroup> col_norm: array<f32, {tn}>;

@compute @workgroup_size({threads})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let warp = lid / 32u;
    let lane = lid % 32u;
    let m0 = wg.y * {tm}u;
    let n0 = wg.x * {tn}u;
    for (var i = lid; i < {tm}u; i += {threads}u) {{ row_norm[i] = norms_a[m0 + i]; }}
    for (var i = lid; i < {tn}u; i += {threads}u) {{ col_norm[i] = norms_b[n0 + i]; }}
    let wr = (warp / {warps_n}u) * {wrows}u;
    let wc = (warp % {warps_n}u) * {wcols}u;
    let zero_at = 0u;
    let zs = 16u;
",
        scratch = warps * wn * 256,
        wrows = 16 * wm,
        wcols = 16 * wn,
    );
    for i in 0..wm {
        for j in 0..wn {
            s += &format!("    var c{i}_{j} = coopLoad<coop_mat16x16<f32, C>>(&zeros[zero_at], zs);\n");
        }
    }
    s
}

fn shader_direct(wm: usize, wn: usize, warps_m: usize, warps_n: usize) -> String {
    let mut s = prologue(wm, wn, warps_m, warps_n, "f16", None);
    s += "    let stride = p.k;\n";
    s += "    for (var k0 = 0u; k0 < p.k; k0 += 16u) {\n";
    for i in 0..wm {
        s += &format!("        let ao{i} = (m0 + wr + {}u) * stride + k0;\n", 16 * i);
        s += &format!("        let a{i} = coopLoadT<coop_mat16x16<f16, A>>(&a[ao{i}], stride);\n");
    }
    for j in 0..wn {
        s += &format!("        let bo{j} = (n0 + wc + {}u) * stride + k0;\n", 16 * j);
        s += &format!("        let b{j} = coopLoad<coop_mat16x16<f16, B>>(&b[bo{j}], stride);\n");
    }
    multiply_add(&mut s, wm, wn, "");
    s += "    }\n";
    end_products(&mut s, wn);
    for i in 0..wm {
        store_accumulators(&mut s, i, wn);
        s += &format!(
            "    workgroupBarrier();
    for (var e = 0u; e < {per_lane}u; e++) {{
        let idx = lane + 32u * e;
        let within = idx % 256u;
        let r = wr + {row}u + within % 16u;
        let c = wc + (idx / 256u) * 16u + within / 16u;
        let key = row_norm[r] + col_norm[c] - 2.0 * scratch[soff + idx];
        if p.write_keys != 0u {{ keys[(m0 + r) * p.n + n0 + c] = key; }}
        count += select(0u, 1u, key < p.threshold);
    }}
    workgroupBarrier();
",
            per_lane = wn * 8,
            row = 16 * i,
        );
    }
    s += "    atomicAdd(&below[0], count);\n}\n";
    s
}

/// The same tile with both operands staged through workgroup memory, 32 deep, the next
/// slice prefetched into registers while the tensor cores work on the current one.
/// `vector`: workgroup tiles of `vec4<f16>` (8-byte stores, cooperative loads with strides in
/// vec4s); otherwise of `f16` (eight 2-byte stores per 16 bytes).
fn shader_staged(
    wm: usize,
    wn: usize,
    warps_m: usize,
    warps_n: usize,
    vector: bool,
    sub_barrier: bool,
    keys_only: bool,
) -> String {
    let warps = warps_m * warps_n;
    let threads = warps * 32;
    let tm = 16 * wm * warps_m;
    let tn = 16 * wn * warps_n;
    // Rows of 32 halves padded to 40: eight consecutive rows' 16-byte pieces fall in distinct banks.
    let row = if vector { 10 } else { 40 };
    let elem = if vector { "vec4<f16>" } else { "f16" };
    let (la, lb) = (tm * 8 / threads, tn * 8 / threads);
    assert!(la * threads == tm * 8 && lb * threads == tn * 8);
    let sync = if sub_barrier { "subgroupBarrier()" } else { "workgroupBarrier()" };
    let mut s = prologue(wm, wn, warps_m, warps_n, "vec4<f16>", Some((elem, row)));
    s += &format!("    let k4 = p.k / 4u;\n    let stride = {row}u;\n");
    // Global loads of one 32-deep slice: invocation lid takes pieces lid + threads * t, piece
    // q of a tile being row q / 8, vec4 q % 8.
    let load = |s: &mut String, k0: &str| {
        for t in 0..la {
            *s += &format!(
                "    pa{t} = a[(m0 + (lid + {o}u) / 8u) * k4 + {k0} / 4u + (lid + {o}u) % 8u];\n",
                o = t * threads
            );
        }
        for t in 0..lb {
            *s += &format!(
                "    pb{t} = b[(n0 + (lid + {o}u) / 8u) * k4 + {k0} / 4u + (lid + {o}u) % 8u];\n",
                o = t * threads
            );
        }
    };
    for t in 0..la {
        s += &format!("    var pa{t}: vec4<f16>;\n");
    }
    for t in 0..lb {
        s += &format!("    var pb{t}: vec4<f16>;\n");
    }
    load(&mut s, "0u");
    s += "    for (var k0 = 0u; k0 < p.k; k0 += 32u) {\n        workgroupBarrier();\n";
    let store = |s: &mut String, tile: &str, reg: &str, t: usize| {
        let o = t * threads;
        if vector {
            *s += &format!("        {tile}[((lid + {o}u) / 8u) * {row}u + (lid + {o}u) % 8u] = {reg}{t};\n");
        } else {
            for e in 0..4 {
                *s += &format!(
                    "        {tile}[((lid + {o}u) / 8u) * {row}u + ((lid + {o}u) % 8u) * 4u + {e}u] = {reg}{t}[{e}];\n"
                );
            }
        }
    };
    for t in 0..la {
        store(&mut s, "ta", "pa", t);
    }
    for t in 0..lb {
        store(&mut s, "tb", "pb", t);
    }
    s += "        workgroupBarrier();\n        if k0 + 32u < p.k {\n";
    load(&mut s, "(k0 + 32u)");
    s += "        }\n";
    let unit = if vector { 4 } else { 1 };
    for kk in [0usize, 16] {
        for i in 0..wm {
            s += &format!("        let ao{i}_{kk} = (wr + {}u) * stride + {}u;\n", 16 * i, kk / unit);
            s += &format!("        let a{i}_{kk} = coopLoadT<coop_mat16x16<f16, A>>(&ta[ao{i}_{kk}], stride);\n");
        }
        for j in 0..wn {
            s += &format!("        let bo{j}_{kk} = (wc + {}u) * stride + {}u;\n", 16 * j, kk / unit);
            s += &format!("        let b{j}_{kk} = coopLoad<coop_mat16x16<f16, B>>(&tb[bo{j}_{kk}], stride);\n");
        }
        multiply_add(&mut s, wm, wn, &format!("_{kk}"));
    }
    s += "    }\n";
    end_products(&mut s, wn);
    for i in 0..wm {
        store_accumulators(&mut s, i, wn);
        s += &format!("    {sync};\n");
        for e in 0..wn * 8 {
            if keys_only && e % 8 != 0 {
                continue;
            }
            // Element idx = lane + 32 e of the subgroup's strip: accumulator idx / 256, column-major.
            let jj = e / 8;
            let c_lo = (e % 8) * 2;
            s += &format!(
                "    {{
        let r = wr + {row}u + lane % 16u;
        let c = wc + {col}u + lane / 16u;
        let key = row_norm[r] + col_norm[c] - 2.0 * scratch[soff + lane + {e32}u];
        if p.write_keys != 0u {{ keys[(m0 + r) * p.n + n0 + c] = key; }}
        count += select(0u, 1u, key < p.threshold);
    }}
",
                row = 16 * i,
                col = jj * 16 + c_lo,
                e32 = 32 * e,
            );
        }
        s += &format!("    {sync};\n");
    }
    s += "    atomicAdd(&below[0], count);\n}\n";
    s
}

/// Every accumulator += its row's A fragment times its column's B fragment (`a{i}{suffix}`,
/// `b{j}{suffix}`).
fn multiply_add(s: &mut String, wm: usize, wn: usize, suffix: &str) {
    for i in 0..wm {
        for j in 0..wn {
            *s += &format!("        c{i}_{j} = coopMultiplyAdd(a{i}{suffix}, b{j}{suffix}, c{i}_{j});\n");
        }
    }
}

/// After the k loop: the key count and the subgroup's part of `scratch`.
fn end_products(s: &mut String, wn: usize) {
    *s += "    workgroupBarrier();\n    var count = 0u;\n";
    *s += &format!("    let soff = warp * {}u;\n", wn * 256);
}

/// Accumulator row `i` of the subgroup stored column-major to its part of `scratch`.
fn store_accumulators(s: &mut String, i: usize, wn: usize) {
    for j in 0..wn {
        *s += &format!("    let so{i}_{j} = soff + {}u;\n", j * 256);
        *s += &format!("    coopStore(c{i}_{j}, &scratch[so{i}_{j}], zs);\n");
    }
}

/// f16 bits of a multiple of 1/8 in [-1, 1] (exact, so no rounding is needed).
fn f16_bits(v: f32) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = ((bits >> 13) & 0x3ff) as u16;
    sign | ((exp as u16) << 10) | mant
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("integer arguments")).collect();
    let [m, n, k, wm, wn, warps_m, warps_n, form] = args[..8] else {
        panic!("M N K WM WN WARPS_M WARPS_N FORM [REPS]")
    };
    let reps = args.get(8).copied().unwrap_or(20);
    let shader = |wm, wn, warps_m, warps_n| match form & 3 {
        0 => shader_direct(wm, wn, warps_m, warps_n),
        f => shader_staged(wm, wn, warps_m, warps_n, f == 2, form & 4 != 0, form & 8 != 0),
    };
    let (tm, tn) = (16 * wm * warps_m, 16 * wn * warps_n);
    assert!(m % tm == 0 && n % tn == 0 && k % 32 == 0, "M, N multiples of the tile ({tm} x {tn}), K of 32");

    if std::env::var_os("TENSOR_PROBE_VALIDATE").is_some() {
        let module = naga::front::wgsl::parse_str(&shader(wm, wn, warps_m, warps_n)).expect("parses");
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .expect("validates");
        let words = naga::back::spv::write_vec(&module, &info, &Default::default(), None).expect("SPIR-V");
        println!("shader valid, {} SPIR-V words", words.len());
        return;
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default())).expect("an adapter");
    let need = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP
        | wgpu::Features::SUBGROUP_BARRIER;
    if !adapter.features().contains(need) {
        println!("{}: no f16 cooperative matrices; nothing to measure", adapter.get_info().name);
        return;
    }
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: None,
        required_features: need,
        required_limits: adapter.limits(),
        // SAFETY: the probe's shader is checked against float64 keys below.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .expect("device");

    let mut state = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) % 17) as f32 / 8.0 - 1.0
    };
    let av: Vec<f32> = (0..m * k).map(|_| next()).collect();
    let bv: Vec<f32> = (0..n * k).map(|_| next()).collect();
    let norm = |rows: &[f32]| -> Vec<f32> { rows.chunks(k).map(|r| r.iter().map(|x| x * x).sum()).collect() };
    let (na, nb) = (norm(&av), norm(&bv));
    let half = |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| f16_bits(x)).collect() };

    use wgpu::util::DeviceExt;
    let storage = |label: &str, bytes: &[u8]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        })
    };
    let a_buf = storage("a", bytemuck::cast_slice(&half(&av)));
    let b_buf = storage("b", bytemuck::cast_slice(&half(&bv)));
    let na_buf = storage("na", bytemuck::cast_slice(&na));
    let nb_buf = storage("nb", bytemuck::cast_slice(&nb));
    let zeros = storage("zeros", bytemuck::cast_slice(&[0f32; 256]));
    let check_rows = tm.min(m);
    let keys = storage("keys", bytemuck::cast_slice(&vec![0f32; check_rows * n]));
    let below = storage("below", bytemuck::cast_slice(&[0u32; 4]));
    let threshold = k as f32 * 0.5;

    let source = shader(wm, wn, warps_m, warps_n);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("tensor_probe"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let run = |rows: usize, write: u32, times: usize| {
        let params: [u32; 8] = [rows as u32, n as u32, k as u32, write, threshold.to_bits(), 0, 0, 0];
        let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let entries: Vec<wgpu::BindGroupEntry> = [&a_buf, &b_buf, &na_buf, &nb_buf, &keys, &below, &uniform, &zeros]
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            for _ in 0..times {
                pass.dispatch_workgroups((n / tn) as u32, (rows / tm) as u32, 1);
            }
        }
        let start = Instant::now();
        queue.submit([encoder.finish()]);
        device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
        start.elapsed().as_secs_f64()
    };

    // Check one tile row of keys against float64.
    run(check_rows, 1, 1);
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (check_rows * n * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&keys, 0, &staging, 0, (check_rows * n * 4) as u64);
    queue.submit([encoder.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
    device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    let got: Vec<f32> = bytemuck::cast_slice(&staging.slice(..).get_mapped_range().expect("mapped")).to_vec();
    let mut wrong = 0usize;
    let check_cols = n.min(2048);
    for r in 0..check_rows {
        for c in 0..check_cols {
            let dot: f64 = (0..k).map(|i| av[r * k + i] as f64 * bv[c * k + i] as f64).sum();
            let want = na[r] as f64 + nb[c] as f64 - 2.0 * dot;
            if got[r * n + c] as f64 != want {
                wrong += 1;
            }
        }
    }

    run(m, 0, 1);
    let seconds = run(m, 0, reps) / reps as f64;
    let tflops = 2.0 * (m * n * k) as f64 / seconds / 1e12;
    println!(
        "tensor_probe form {form} {m}x{n}x{k} tile {tm}x{tn} ({wm}x{wn} per subgroup, {} subgroups): {:.3} ms, {tflops:.1} TFLOP/s; check {} of {} keys wrong",
        warps_m * warps_n,
        seconds * 1e3,
        wrong,
        check_rows * check_cols
    );
}
