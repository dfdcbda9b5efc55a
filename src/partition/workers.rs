//! Jobs dealt to workers: each worker (a GPU device, or the host's cores) takes the next job
//! when it finishes its last, so that a faster device takes more of them. Finishing a job may
//! add jobs (the later rounds of rows whose lists did not prove their answer); those run
//! before the rest, so that rows are finished, and their memory freed, in order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use crate::engine::Engine;
use crate::error::{Error, Result};

/// Jobs not yet taken, and whether more may come.
struct Queue<J> {
    jobs: Mutex<(VecDeque<J>, bool)>,
    changed: Condvar,
}

impl<J> Queue<J> {
    /// The next job; `None` once the queue is closed and empty.
    fn take(&self, stop: &AtomicBool) -> Option<J> {
        let mut state = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(job) = state.0.pop_front() {
                return Some(job);
            }
            if state.1 {
                return None;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn push_front(&self, jobs: Vec<J>) {
        let mut state = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        for job in jobs.into_iter().rev() {
            state.0.push_front(job);
        }
        self.changed.notify_all();
    }

    fn close(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.changed.notify_all();
    }
}

/// Runs every job of `jobs` on one of `engines`, and hands each job's result to `on_done` on
/// the calling thread, in the order they finish. Jobs that `on_done` pushes onto its last
/// argument run next, before the jobs still queued. The first error stops the workers after
/// their current job and is returned.
pub(crate) fn run_jobs<J: Send, R: Send>(
    engines: &[&Engine],
    jobs: Vec<J>,
    execute: &(dyn Fn(&Engine, &J) -> Result<R> + Sync),
    mut on_done: impl FnMut(J, R, &mut Vec<J>) -> Result<()>,
) -> Result<()> {
    let mut outstanding = jobs.len();
    let queue = Queue { jobs: Mutex::new((jobs.into(), outstanding == 0)), changed: Condvar::new() };
    let stop = AtomicBool::new(false);
    let (sender, receiver) = mpsc::channel::<(J, Result<R>)>();
    std::thread::scope(|scope| {
        for &engine in engines {
            let sender = sender.clone();
            let (queue, stop) = (&queue, &stop);
            let spawned = std::thread::Builder::new().name("knng-worker".into()).spawn_scoped(scope, move || {
                while let Some(job) = queue.take(stop) {
                    let result = execute(engine, &job);
                    let failed = result.is_err();
                    if sender.send((job, result)).is_err() || failed {
                        break;
                    }
                }
            });
            if let Err(e) = spawned {
                stop.store(true, Ordering::Relaxed);
                queue.close();
                return Err(Error::Gpu(format!("cannot start a worker thread: {e}")));
            }
        }
        drop(sender);
        let mut first_error = None;
        let mut more = Vec::new();
        for (job, result) in receiver {
            outstanding -= 1;
            if first_error.is_none() {
                match result.and_then(|r| on_done(job, r, &mut more)) {
                    Ok(()) => {
                        outstanding += more.len();
                        queue.push_front(std::mem::take(&mut more));
                    }
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        first_error = Some(e);
                    }
                }
            }
            if outstanding == 0 || first_error.is_some() {
                queue.close();
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuEngine;

    #[test]
    fn jobs_added_by_finished_jobs_run_and_every_job_runs_once() {
        let engines = [Engine::Cpu(CpuEngine::new(false)), Engine::Cpu(CpuEngine::new(false))];
        let engines: Vec<&Engine> = engines.iter().collect();
        let mut seen = Vec::new();
        // Each job n > 0 adds the job n - 1 when it finishes: 3 + 2 + 1 + 0.
        run_jobs(&engines, vec![3u32, 2], &|_, &n| Ok(n), |n, r, more| {
            assert_eq!(n, r);
            seen.push(n);
            if n > 0 {
                more.push(n - 1);
            }
            Ok(())
        })
        .unwrap();
        seen.sort_unstable();
        assert_eq!(seen, [0, 0, 1, 1, 2, 2, 3]);
    }

    #[test]
    fn the_first_error_is_returned_and_no_job_hangs() {
        let engines = [Engine::Cpu(CpuEngine::new(false))];
        let engines: Vec<&Engine> = engines.iter().collect();
        let failing = |_: &Engine, &n: &u32| if n == 2 { Err(Error::arg("job", "two")) } else { Ok(n) };
        let err = run_jobs(&engines, (0..10).collect(), &failing, |_, _, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("two"), "{err}");
        let err = run_jobs(&engines, vec![1u32], &|_, &n| Ok(n), |_, _, more| {
            more.push(5);
            Err(Error::arg("sink", "full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("full"), "{err}");
        run_jobs(&engines, Vec::<u32>::new(), &|_, &n| Ok(n), |_, _, _| Ok(())).unwrap();
    }
}
