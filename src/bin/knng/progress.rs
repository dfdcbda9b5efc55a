//! The progress bar: on stderr, only when stderr is a terminal and `--quiet` is not given.

use std::io::IsTerminal;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// A bar that clears itself when dropped, so an error message is not printed after a
/// half-drawn bar.
pub struct Bar {
    bar: Option<ProgressBar>,
}

impl Bar {
    pub fn new(quiet: bool, what: &str) -> Bar {
        if quiet || !std::io::stderr().is_terminal() {
            return Bar { bar: None };
        }
        let style = ProgressStyle::with_template("{msg} [{bar:32.cyan/blue}] {pos}/{len} rows  {rate}  ETA {eta}")
            .expect("the template is valid")
            .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} rows/s", state.per_sec());
            })
            .progress_chars("=> ");
        // Hidden until the first report, so that nothing is drawn while inputs are read or
        // the device is opened, and short runs that never report stay silent.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()).with_style(style);
        bar.set_message(what.to_string());
        Bar { bar: Some(bar) }
    }

    /// The callback the library reports `(done, total)` rows through.
    pub fn callback(&self) -> Option<knng::Progress> {
        let bar = self.bar.clone()?;
        Some(Arc::new(move |done, total| {
            if bar.length() != Some(total) {
                bar.set_length(total);
                if bar.is_hidden() {
                    // Rate and ETA count from the first report, not from setup.
                    bar.reset_elapsed();
                    bar.reset_eta();
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                }
            }
            bar.set_position(done);
        }))
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
