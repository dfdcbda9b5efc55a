//! Submission: a compute pass of jobs, timed when profiling, and waiting for its completion.

use super::engine::GpuEngine;
use super::kernels::Job;
use super::transfer::read_back;
use crate::error::Result;

impl GpuEngine {
    /// Records `jobs` in one compute pass (each timed when profiling) and submits them. Work
    /// runs in submission order and the host goes on: it waits only where it reads results
    /// (mapping a staging buffer) or, when profiling, here, to read the timestamps.
    pub(super) fn submit(&self, mut encoder: wgpu::CommandEncoder, jobs: &[Job<'_>]) -> Result<Submitted> {
        let recording = std::time::Instant::now();
        let timed = self.profiler.as_ref().map(|p| (p, (jobs.len() as u32).min(p.capacity / 2)));
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for (i, job) in jobs.iter().enumerate() {
                let pipeline = self.kernels.pipeline(job.step);
                let stamp = timed.filter(|&(_, n)| (i as u32) < n).map(|(p, _)| p);
                if let Some(p) = stamp {
                    pass.write_timestamp(&p.queries, 2 * i as u32);
                }
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, job.bind, &[job.offset]);
                pass.dispatch_workgroups(job.groups.0, job.groups.1, 1);
                if let Some(p) = stamp {
                    pass.write_timestamp(&p.queries, 2 * i as u32 + 1);
                }
            }
        }
        let timed = timed.filter(|&(_, n)| n > 0);
        if let Some((p, n)) = timed {
            encoder.resolve_query_set(&p.queries, 0..2 * n, &p.resolved, 0);
        }
        let started = std::time::Instant::now();
        let index = self.ctx.queue.submit([encoder.finish()]);
        let returned = std::time::Instant::now();
        let Some((p, n)) = timed else {
            return Ok(Submitted { index, completed: None });
        };
        self.ctx.wait_for(index.clone())?;
        let completed = std::time::Instant::now();
        let waited = (completed - started).as_secs_f64();
        {
            let stamps: Vec<u64> = read_back(self, &p.resolved, Some(16 * n as usize))?;
            let period = self.ctx.queue.get_timestamp_period() as f64 * 1e-9;
            let mut times = p.times.lock().unwrap_or_else(|e| e.into_inner());
            for (i, job) in jobs.iter().take(n as usize).enumerate() {
                times.add(job.step, stamps[2 * i + 1].saturating_sub(stamps[2 * i]) as f64 * period);
            }
            times.span += stamps[2 * n as usize - 1].saturating_sub(stamps[0]) as f64 * period;
            times.submitted += waited;
            times.recording += (started - recording).as_secs_f64();
            times.submit_calls += (returned - started).as_secs_f64();
        }
        Ok(Submitted { index, completed: Some(completed) })
    }

    /// When a submission's work completed: waits for it unless profiling already did.
    pub(super) fn completion(&self, submitted: Submitted) -> Result<std::time::Instant> {
        match submitted.completed {
            Some(at) => Ok(at),
            None => {
                self.ctx.wait_for(submitted.index)?;
                Ok(std::time::Instant::now())
            }
        }
    }
}

/// Work handed to the GPU by [`GpuEngine::submit`].
pub(super) struct Submitted {
    pub(super) index: wgpu::SubmissionIndex,
    /// When it completed, if the host waited for it (profiling).
    completed: Option<std::time::Instant>,
}
