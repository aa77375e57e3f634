//! `--live`: a full-screen, top-like view of the profile as it grows.
//!
//! Three parts, so the sampling loop never waits on the screen:
//! - [`collector::LiveCollector`], a [`Collector`](crate::collect::Collector)
//!   on the sampling thread, counts each sample into a batch and hands the
//!   batch over only when the view's lock is free ([`aggregate`]);
//! - [`view`] turns the counts into one screen's rows and numbers, on the
//!   view's thread;
//! - [`ui`] owns the terminal (always given back), reads keys and draws;
//!   [`stderr`] keeps tachyon's messages meanwhile, shown afterwards.
//!
//! [`LiveSession`] starts the view's thread and ends it.

pub mod aggregate;
pub mod collector;
pub mod stderr;
pub mod ui;
pub mod view;

use std::io::IsTerminal;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::opcodes::OpTable;

pub use aggregate::Ended;
pub use collector::{LiveCollector, Shared};

/// Refuse `--live` where there is no terminal to draw on.
pub fn require_terminal() -> Result<()> {
    if std::io::stdout().is_terminal() {
        return Ok(());
    }
    Err(Error::io(
        "--live draws a full-screen view and needs a terminal",
        std::io::Error::other(
            "standard output is not one (run it in a terminal, or leave --live out and write a file with -o)",
        ),
    ))
}

/// Whether [`waiting_for_python`] left its line on the terminal.
static WAITING_SHOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Say on the terminal, until the view takes it, that the program is
/// started and its interpreter not ready yet (`run --live`): the screen is
/// not left blank while a slow wrapper or interpreter starts.
pub fn waiting_for_python() {
    use std::io::Write;
    let mut out = std::io::stdout();
    if out.is_terminal() && write!(out, "tachyon: waiting for Python to start\r").is_ok() {
        let _ = out.flush();
        WAITING_SHOWN.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Take back the line of [`waiting_for_python`], so that it is not left on
/// the screen the view gives back.
fn clear_waiting() {
    use std::io::Write;
    if WAITING_SHOWN.swap(false, std::sync::atomic::Ordering::Relaxed) {
        let mut out = std::io::stdout();
        let _ = write!(out, "\x1b[2K\r");
        let _ = out.flush();
    }
}

/// The view's thread, from the first sample to the last key.
pub struct LiveSession {
    shared: Arc<Shared>,
    ui: Option<JoinHandle<std::io::Result<()>>>,
}

/// Asks the sampling loop to stop when the view ends by a panic.
struct StopOnPanic;

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            crate::sample::signals::request_stop();
        }
    }
}

/// Lower this thread's scheduling priority (nice 10): on a busy machine
/// the sampler, not the view, gets the CPU first. Best effort.
fn yield_to_the_sampler() {
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority only reads its integer arguments; on Linux a
    // thread id as the "process" sets that thread's nice value alone.
    let _ = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid as nix::libc::id_t, 10) };
}

impl LiveSession {
    /// Take the terminal and start drawing the profile of `pid`, sampled
    /// every `interval`; the collector returned feeds it. With `opcodes`
    /// (`--opcodes`: the target's instruction names) a row of the table can
    /// be selected and its instructions are shown under it. With `tasks`
    /// (`--async-aware`) the samples are asyncio tasks, which carry no
    /// thread state.
    pub fn start(
        pid: i32,
        interval: Duration,
        opcodes: Option<&'static OpTable>,
        tasks: bool,
    ) -> Result<(LiveSession, LiveCollector)> {
        require_terminal()?;
        clear_waiting();
        let shared = Shared::new(pid, interval.as_micros() as u64, opcodes, tasks);
        let for_ui = shared.clone();
        let ui = std::thread::Builder::new()
            .name("tachyon-live".into())
            .spawn(move || {
                let _stop = StopOnPanic;
                yield_to_the_sampler();
                let r = ui::run(for_ui, &crate::sample::signals::request_stop);
                if r.is_err() {
                    crate::sample::signals::request_stop();
                }
                r
            })
            .map_err(|e| Error::io("cannot start the live view", e))?;
        let collector = LiveCollector::new(shared.clone());
        Ok((
            LiveSession {
                shared,
                ui: Some(ui),
            },
            collector,
        ))
    }

    /// Sampling ended: how. After the target's exit or the duration the
    /// final view stays until the user quits; otherwise it closes.
    pub fn end(&mut self, how: Ended) {
        self.shared
            .lock()
            .ended
            .get_or_insert((Instant::now(), how));
    }

    /// Wait for the view to close; the terminal is restored by then. A
    /// view that failed (the terminal went away) is reported, not fatal:
    /// the profile is still written.
    pub fn close(mut self) -> Result<()> {
        let Some(h) = self.ui.take() else {
            return Ok(());
        };
        let r = h.join();
        ui::restore_terminal();
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::io("the live view failed", e)),
            Err(_) => Err(Error::io(
                "the live view failed",
                std::io::Error::other("it panicked"),
            )),
        }
    }
}

impl Drop for LiveSession {
    /// Leaving early (an error): close the view at once.
    fn drop(&mut self) {
        if let Some(h) = self.ui.take() {
            self.end(Ended::Stopped);
            let _ = h.join();
            ui::restore_terminal();
        }
    }
}
