//! Progress bars for push and pull: drawn on stderr when it is a terminal,
//! absent otherwise (scripts and logs get no escape sequences).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte-counting progress bar, hidden unless stderr is a terminal.
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar labelled `label` (e.g. `push disk.qcow2`).
    pub fn new(label: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(ProgressBar::hidden());
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("valid progress template")
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(label.to_string());
        Self(bar)
    }

    /// The callback to hand to the client: `(done, total)` in bytes.
    pub fn callback(&self) -> impl Fn(u64, u64) + Send + Sync + '_ {
        move |done, total| {
            self.0.set_length(total);
            self.0.set_position(done);
        }
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}
