//! `demo` and `bench`: seeded synthetic data, timed.

use std::time::Instant;

use knng::io;

use crate::commands::{blocks_summary, seconds, Places};
use crate::progress::Bar;
use crate::synth::{self, Rng};
use crate::{say, BenchArgs, DemoArgs, Failure, Outcome, What};

pub fn demo(a: DemoArgs) -> Outcome {
    if let Some(out) = &a.output {
        io::check_output_path(out)?;
    }
    let bar = Bar::new(a.engine.quiet, "graph");
    let start = Instant::now();
    let knn = a.engine.open(false, &bar)?;
    let init = start.elapsed().as_secs_f64();
    say(format!("backend: {} (ready in {})", knn.description(), seconds(init)));

    let n = a.n.unwrap_or(if knn.is_gpu() { 100_000 } else { 20_000 }) as usize;
    let (d, k, metric) = (a.d as usize, a.k as usize, a.metric);
    if k >= n {
        return Err(Failure(format!("-k {k} is too large for --n {n}: at most n - 1 = {} neighbours", n - 1)));
    }
    let start = Instant::now();
    let syn = synth::clustered(n, d, a.seed);
    say(format!(
        "data: {n} points in {d} dimensions, {} clusters on a curved manifold of dimension {}, seed {} ({})",
        syn.clusters,
        syn.latent,
        a.seed,
        seconds(start.elapsed().as_secs_f64())
    ));

    let start = Instant::now();
    let nb = knn.graph(syn.data.view(), k, metric)?;
    let t = start.elapsed().as_secs_f64();
    drop(bar);
    let flops = 2.0 * n as f64 * n as f64 * d as f64;
    say(format!(
        "graph: k = {k}, {metric}: {} ({:.0} rows/s, {:.1} GFLOP/s of brute-force distance work)",
        seconds(t),
        n as f64 / t,
        flops / t / 1e9
    ));
    let stats = knn.last_run();
    if stats.rows_widened > 0 || stats.rows_brute_forced > 0 {
        say(format!(
            "       {} rows needed more candidates, {} were finished by float64 brute force",
            stats.rows_widened, stats.rows_brute_forced
        ));
    }

    let same_cluster = (0..n)
        .map(|i| nb.indices_of(i).iter().filter(|&&j| syn.labels[j as usize] == syn.labels[i]).count())
        .sum::<usize>();
    say(format!("neighbours in the same cluster: {:.1}%", 100.0 * same_cluster as f64 / (n * k) as f64));

    let start = Instant::now();
    let mut rng = Rng::new(a.seed ^ 0x5eed);
    let rows: Vec<usize> = (0..a.check.min(n)).map(|_| (rng.next_u64() % n as u64) as usize).collect();
    let failures: Vec<String> = {
        use rayon::prelude::*;
        rows.par_iter().filter_map(|&i| synth::check_row(&syn.data, &nb, i, metric, false).err()).collect()
    };
    say(format!(
        "check: {} random rows against a float64 brute force: {} exact ({})",
        rows.len(),
        rows.len() - failures.len(),
        seconds(start.elapsed().as_secs_f64())
    ));
    if let Some(out) = &a.output {
        io::write_neighbors(out, &nb, n)?;
        say(format!("wrote {}", out.display()));
    }
    match failures.first() {
        None => Ok(()),
        Some(first) => Err(Failure(format!(
            "{} of {} checked rows differ from the float64 brute force; first: {first}",
            failures.len(),
            rows.len()
        ))),
    }
}

pub fn bench(a: BenchArgs) -> Outcome {
    if a.what == What::Select {
        return bench_select(a);
    }
    if a.what == What::Distance {
        return bench_distance(a);
    }
    if a.what == What::Sort {
        return bench_sort(a);
    }
    let (n, d, k, metric) = (a.n as usize, a.d as usize, a.k as usize, a.metric);
    let nq = if a.what == What::Graph { n } else { a.queries as usize };
    let max = if a.what == What::Graph { n - 1 } else { n };
    if k > max {
        return Err(Failure(format!("-k {k} is too large for --n {n}: at most {max}")));
    }
    let corpus = synth::clustered(n, d, a.seed).data;
    let queries = (a.what == What::Search).then(|| synth::clustered(nq, d, a.seed.wrapping_add(0x9e37)).data);

    let bar = Bar::new(a.engine.quiet || a.json, "bench");
    let start = Instant::now();
    let knn = a.engine.open_with(false, a.profile, Places::default(), &bar)?;
    let init = start.elapsed().as_secs_f64();
    // Repeats write into the first run's answer arrays, as a caller of `graph_into` does: the
    // first run also pays for the pages of its answers (524 MB at n=65536 k=1000).
    let mut result = knng::Neighbors::default();
    let (mut first, mut best) = (None, f64::INFINITY);
    for _ in 0..a.repeat {
        if a.fresh_answers {
            // Freeing the answer (hundreds of MB at large k) is the caller's time, not the run's.
            result = knng::Neighbors::default();
        }
        let start = Instant::now();
        match &queries {
            None => knn.graph_into(corpus.view(), k, metric, &mut result)?,
            Some(q) => knn.search_into(corpus.view(), q.view(), k, metric, &mut result)?,
        };
        let took = start.elapsed().as_secs_f64();
        first.get_or_insert(took);
        best = best.min(took);
    }
    let first = first.unwrap_or(best);
    drop(bar);
    let stats = knn.last_run();
    let what = if a.what == What::Graph { "graph" } else { "search" };
    let gflops = 2.0 * nq as f64 * n as f64 * d as f64 / best / 1e9;
    if a.json {
        say(format!(
            "{{\"what\":\"{what}\",\"n\":{n},\"queries\":{nq},\"d\":{d},\"k\":{k},\"metric\":\"{metric}\",\
             \"algorithm\":\"{}\",\"backend\":{},\"init_s\":{init:.6},\"seconds\":{best:.6},\"first_s\":{first:.6},\"fresh_answers\":{},\"repeat\":{},\"rows_per_s\":{:.1},\
             \"gflops\":{gflops:.3},\"rounds\":{},\"rows_widened\":{},\"rows_brute_forced\":{},\
             \"rows_in_symmetric_blocks\":{},\"rows_in_bounded_sweeps\":{},\"rows_overflowed\":{},\"blocks\":{},\"pair_blocks_once\":{},\"pair_blocks_one_way\":{},\"tile_buffer_allocations\":{},\"prepare_s\":{:.6},\"candidates_s\":{:.6},\"refine_s\":{:.6},\"gpu\":{}}}",
            stats.algorithm,
            json_string(&knn.description()),
            a.fresh_answers,
            a.repeat,
            nq as f64 / best,
            stats.rounds,
            stats.rows_widened,
            stats.rows_brute_forced,
            stats.rows_in_symmetric_blocks,
            stats.rows_in_bounded_sweeps,
            stats.rows_overflowed,
            stats.blocks,
            stats.pair_blocks_once,
            stats.pair_blocks_one_way,
            stats.tile_buffer_allocations,
            stats.prepare_seconds,
            stats.candidate_seconds,
            stats.refine_seconds,
            gpu_json(stats.gpu)
        ));
    } else {
        say(format!(
            "{what} n={n} queries={nq} d={d} k={k} {metric} | {} | {} | init {} | {} (first of {}: {}) | {:.0} rows/s \
             | {gflops:.1} GFLOP/s | prepare {} candidates {} refine {} (last run)",
            stats.algorithm,
            knn.description(),
            seconds(init),
            seconds(best),
            a.repeat,
            seconds(first),
            nq as f64 / best,
            seconds(stats.prepare_seconds),
            seconds(stats.candidate_seconds),
            seconds(stats.refine_seconds)
        ));
        if stats.blocks > 0 {
            say(format!("  {}", blocks_summary(&stats)));
        }
        if let Some(g) = stats.gpu {
            // A graph in symmetric blocks computes about half of the n x n products.
            let computed = if stats.rows_in_symmetric_blocks + stats.rows_in_bounded_sweeps > 0 { 0.5 } else { 1.0 };
            say(format!(
                "  gpu kernels: prepare rows {} | distance {} ({:.1} TFLOP/s{}) | select {} | merge {}{} | exact keys {} | ranking {} | transfers {}",
                seconds(g.prepare_rows),
                seconds(g.distance),
                computed * 2.0 * nq as f64 * n as f64 * d as f64 / g.distance.max(1e-12) / 1e12,
                if computed < 1.0 { ", half the products" } else { "" },
                seconds(g.select),
                seconds(g.merge),
                if g.filter + g.lists > 0.0 {
                    format!(" | filter {} | lists {}", seconds(g.filter), seconds(g.lists))
                } else {
                    String::new()
                },
                seconds(g.refine),
                seconds(g.certify),
                seconds(g.transfers)
            ));
            say(format!(
                "  gpu span {} (kernels and the gaps between them) | submission to completion {} | allocation {}",
                seconds(g.span),
                seconds(g.submitted),
                seconds(g.allocation)
            ));
        }
    }
    Ok(())
}

fn gpu_json(g: Option<knng::GpuTimes>) -> String {
    match g {
        None => "null".into(),
        Some(g) => format!(
            "{{\"prepare_rows_s\":{:.6},\"distance_s\":{:.6},\"select_s\":{:.6},\"merge_s\":{:.6},\"filter_s\":{:.6},\"lists_s\":{:.6},\"refine_s\":{:.6},\"certify_s\":{:.6},\"transfers_s\":{:.6},\"span_s\":{:.6},\"submitted_s\":{:.6},\"recording_s\":{:.6},\"submit_calls_s\":{:.6},\"allocation_s\":{:.6}}}",
            g.prepare_rows,
            g.distance,
            g.select,
            g.merge,
            g.filter,
            g.lists,
            g.refine,
            g.certify,
            g.transfers,
            g.span,
            g.submitted,
            g.recording,
            g.submit_calls,
            g.allocation
        ),
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The fastest of `repeat` runs of a single-kernel benchmark: (wall seconds, its GPU times).
fn fastest(
    repeat: u64,
    mut run: impl FnMut() -> knng::Result<(f64, Option<knng::GpuTimes>)>,
) -> knng::Result<(f64, Option<knng::GpuTimes>)> {
    let mut best = (f64::INFINITY, None);
    for _ in 0..repeat {
        let (wall, gpu) = run()?;
        if wall < best.0 {
            best = (wall, gpu);
        }
    }
    Ok(best)
}

/// `knng bench --what select`: the selection kernel alone, against what torch.topk does on a
/// matrix of the same shape.
fn bench_select(a: BenchArgs) -> Outcome {
    let (rows, cols, k) = (a.rows as usize, a.cols as usize, a.k as usize);
    let bar = Bar::new(true, "bench");
    let knn = a.engine.open_with(false, a.profile, Places::default(), &bar)?;
    let (wall, gpu) = fastest(a.repeat, || knn.bench_select(rows, cols, k))?;
    let gbps = |s: f64| rows as f64 * cols as f64 * 4.0 / s / 1e9;
    if a.json {
        say(format!(
            "{{\"what\":\"select\",\"rows\":{rows},\"cols\":{cols},\"k\":{k},\"backend\":{},\"seconds\":{wall:.6},\
             \"gpu_s\":{},\"span_s\":{},\"submitted_s\":{},\"recording_s\":{},\"submit_calls_s\":{},\"repeat\":{}}}",
            json_string(&knn.description()),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.select)),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.span)),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.submitted)),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.recording)),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.submit_calls)),
            a.repeat
        ));
    } else {
        let gpu_text = gpu.map_or(String::new(), |g| {
            format!(
                " | kernel {} ({:.0} GB/s of keys), submission to completion {}",
                seconds(g.select),
                gbps(g.select),
                seconds(g.submitted)
            )
        });
        say(format!(
            "select {rows} x {cols} k={k} | {} | {} ({:.0} GB/s of keys){gpu_text}",
            knn.description(),
            seconds(wall),
            gbps(wall)
        ));
    }
    Ok(())
}

/// `knng bench --what sort`: the radix sort alone, against what torch.sort does on as many
/// (float key, index) pairs.
fn bench_sort(a: BenchArgs) -> Outcome {
    let n = a.n as usize;
    let bar = Bar::new(true, "bench");
    let knn = a.engine.open_with(false, a.profile, Places::default(), &bar)?;
    let (wall, gpu) = fastest(a.repeat, || knn.bench_sort(n))?;
    let rate = |s: f64| n as f64 / s / 1e6;
    if a.json {
        say(format!(
            "{{\"what\":\"sort\",\"n\":{n},\"backend\":{},\"seconds\":{wall:.6},\"gpu_s\":{},\"repeat\":{}}}",
            json_string(&knn.description()),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.sort)),
            a.repeat
        ));
    } else {
        let gpu_text =
            gpu.map_or(String::new(), |g| format!(" | kernels {} ({:.0} M pairs/s)", seconds(g.sort), rate(g.sort)));
        say(format!(
            "sort {n} pairs (f32 key, u32 value) | {} | {} ({:.0} M pairs/s){gpu_text}",
            knn.description(),
            seconds(wall),
            rate(wall)
        ));
    }
    Ok(())
}

/// `knng bench --what distance`: the distance kernel alone, against what a cuBLAS SGEMM of
/// the same flops does.
fn bench_distance(a: BenchArgs) -> Outcome {
    let (rows, cols, d) = (a.rows as usize, a.cols as usize, a.d as usize);
    let bar = Bar::new(true, "bench");
    let knn = a.engine.open_with(false, a.profile, Places::default(), &bar)?;
    let (wall, gpu) = fastest(a.repeat, || knn.bench_distance(rows, cols, d))?;
    let tflops = |s: f64| 2.0 * rows as f64 * cols as f64 * d as f64 / s / 1e12;
    if a.json {
        say(format!(
            "{{\"what\":\"distance\",\"rows\":{rows},\"cols\":{cols},\"d\":{d},\"backend\":{},\
             \"seconds\":{wall:.6},\"gpu_s\":{},\"tflops\":{:.3},\"repeat\":{}}}",
            json_string(&knn.description()),
            gpu.map_or("null".to_string(), |g| format!("{:.6}", g.distance)),
            tflops(gpu.map_or(wall, |g| g.distance)),
            a.repeat
        ));
    } else {
        let gpu_text = gpu.map_or(String::new(), |g| {
            format!(" | kernel {} ({:.1} TFLOP/s)", seconds(g.distance), tflops(g.distance))
        });
        say(format!(
            "distance {rows} x {cols} d={d} | {} | {} ({:.1} TFLOP/s){gpu_text}",
            knn.description(),
            seconds(wall),
            tflops(wall)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(super::json_string("a \"b\"\\\n"), "\"a \\\"b\\\"\\\\\\u000a\"");
    }
}
