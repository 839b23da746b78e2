//! The progress of the main job and of `fblayout step` on stderr.
//!
//! One bar over the run's stages, drawn only once the run has taken [`QUIET`] (a run that ends
//! sooner draws nothing) and only where stderr is a terminal. Where it is not (a pipe, a file,
//! a test), nothing is drawn and a stage that took longer than [`QUIET`] says so in one plain
//! line when it ends. Everything printed to stdout while the bar may be drawn goes through
//! [`Progress::println`], which takes the bar off the screen meanwhile.

use std::io::IsTerminal;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long the run goes before the bar is drawn, and how long a stage takes before it is
/// reported where stderr is not a terminal.
const QUIET: Duration = Duration::from_secs(2);

/// The run's bar (see the module docs).
pub(crate) struct Progress {
    bar: ProgressBar,
    /// Whether stderr is a terminal.
    terminal: bool,
    /// The stage running, and when it began.
    stage: Option<(String, Instant)>,
    /// Told to stop when the run ends, the thread that draws the bar after [`QUIET`].
    stop: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Progress {
    /// A bar over `stages` stages.
    pub(crate) fn new(stages: u64) -> Self {
        let bar = ProgressBar::with_draw_target(Some(stages), ProgressDrawTarget::hidden());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} {elapsed:>4} [{bar:24}] {pos}/{len} {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        let terminal = std::io::stderr().is_terminal();
        let stop = terminal.then(|| {
            let (tx, rx) = mpsc::channel::<()>();
            let shown = bar.clone();
            let thread = std::thread::spawn(move || {
                if rx.recv_timeout(QUIET) == Err(mpsc::RecvTimeoutError::Timeout) {
                    shown.set_draw_target(ProgressDrawTarget::stderr());
                    shown.enable_steady_tick(Duration::from_millis(120));
                }
            });
            (tx, thread)
        });
        Self {
            bar,
            terminal,
            stage: None,
            stop,
        }
    }

    /// Ends the stage running (if any) and starts `what`.
    pub(crate) fn stage(&mut self, what: impl Into<String>) {
        self.end_stage();
        let what = what.into();
        self.bar.set_message(what.clone());
        self.stage = Some((what, Instant::now()));
    }

    /// Ends the stage running: the bar moves on; off a terminal, a slow stage says how long it
    /// took.
    fn end_stage(&mut self) {
        if let Some((what, began)) = self.stage.take() {
            self.bar.inc(1);
            let took = began.elapsed();
            if !self.terminal && took > QUIET {
                eprintln!("fblayout: {what}: {:.1} s", took.as_secs_f64());
            }
        }
    }

    /// Prints `line` to stdout with the bar off the screen.
    pub(crate) fn println(&self, line: impl AsRef<str>) {
        self.bar.suspend(|| println!("{}", line.as_ref()));
    }

    /// Ends the run: the bar is cleared.
    pub(crate) fn finish(mut self) {
        self.end_stage();
        self.stop_drawing();
    }

    fn stop_drawing(&mut self) {
        if let Some((tx, thread)) = self.stop.take() {
            let _ = tx.send(());
            let _ = thread.join();
        }
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    /// A run that fails clears the bar before its error is printed.
    fn drop(&mut self) {
        self.stop_drawing();
    }
}
