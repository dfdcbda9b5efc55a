//! Jobs dealt to workers: each worker (a GPU device, or the host's cores) takes the next job
//! when it finishes its last, so that a faster device takes more of them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// Runs every job of `jobs` on one of `engines`, and hands each
/// result to `on_done` on the calling thread, in the order they finish. The first error
/// stops the workers after their current job and is returned.
pub(crate) fn run_jobs<J: Copy + Sync, R: Send>(
    engines: &[&Engine],
    jobs: &[J],
    execute: &(dyn Fn(&Engine, J) -> Result<R> + Sync),
    mut on_done: impl FnMut(usize, R) -> Result<()>,
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (sender, receiver) = mpsc::channel::<(usize, Result<R>)>();
    std::thread::scope(|scope| {
        for &engine in engines {
            let sender = sender.clone();
            let (next, stop) = (&next, &stop);
            std::thread::Builder::new()
                .name("knng-worker".into())
                .spawn_scoped(scope, move || {
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&job) = jobs.get(i) else { break };
                        let result = execute(engine, job);
                        let failed = result.is_err();
                        if sender.send((i, result)).is_err() || failed {
                            break;
                        }
                    }
                })
                .map_err(|e| Error::Gpu(format!("cannot start a worker thread: {e}")))?;
        }
        drop(sender);
        let mut first_error = None;
        for (i, result) in receiver {
            if first_error.is_some() {
                continue;
            }
            if let Err(e) = result.and_then(|r| on_done(i, r)) {
                stop.store(true, Ordering::Relaxed);
                first_error = Some(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}
