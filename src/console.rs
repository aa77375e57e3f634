//! Standard output and standard error that never panic.
//!
//! A profiler's output is often piped into `head`, sent to a terminal that
//! an ssh session dropped, or redirected to a full disk. `println!` panics
//! on any of those and loses the profile with it. Every line tachyon
//! prints goes through [`outln!`](crate::outln) and [`errln!`](crate::errln)
//! instead:
//! - a closed pipe (EPIPE) ends standard output quietly, as `head`-friendly
//!   tools do: later lines are dropped, nothing else changes;
//! - any other failure (ENOSPC on `> /dev/full`, EIO on a hung-up terminal)
//!   is remembered, later lines are dropped, and [`stdout_error`] tells the
//!   command line, which says so once on standard error at exit;
//! - standard error that cannot be written is simply not written.

use std::io::{ErrorKind, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output can no longer be written (closed or failed).
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
/// The first failure other than a closed pipe, for the exit message.
static STDOUT_ERROR: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Write `bytes` to standard output, flushed. Never panics; a closed pipe
/// is not an error, any other failure is remembered (see [`stdout_error`])
/// and returned.
pub fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) => {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            if e.kind() == ErrorKind::BrokenPipe {
                return Ok(());
            }
            let copy = std::io::Error::new(e.kind(), e.to_string());
            if let Ok(mut first) = STDOUT_ERROR.lock() {
                first.get_or_insert(copy);
            }
            Err(e)
        }
    }
}

/// Formatted text to standard output (what [`outln!`](crate::outln) and
/// [`out!`](crate::out) call).
pub fn print_out(args: std::fmt::Arguments<'_>) {
    let _ = write_stdout(args.to_string().as_bytes());
}

/// Formatted text to standard error; dropped when it cannot be written.
pub fn print_err(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.flush());
}

/// A status line that takes the place of the one before it (the
/// `--realtime-stats` rate): on a terminal rewritten in place (`\r` and
/// erase-line), anywhere else (a file, a pipe, a CI log) a whole line of
/// its own, so that the program's output cannot glue onto it and no escape
/// codes land in a log. Returns whether it was written in place, that is
/// whether a newline must end the last one.
pub fn status_line(text: &str) -> bool {
    use std::io::IsTerminal;
    let in_place = std::io::stderr().is_terminal();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(status_bytes(text, in_place).as_bytes());
    let _ = err.flush();
    in_place
}

/// What [`status_line`] writes, on a terminal (`in_place`) or not.
fn status_bytes(text: &str, in_place: bool) -> String {
    if in_place {
        format!("\r\x1b[K{text}")
    } else {
        format!("{text}\n")
    }
}

/// Did standard output fail for a reason other than a closed pipe? The
/// first such error, taken (so it is reported once).
pub fn stdout_error() -> Option<std::io::Error> {
    STDOUT_ERROR.lock().ok().and_then(|mut e| e.take())
}

/// Has standard output been closed by its reader (or failed)?
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}

/// `println!` that never panics: see the module documentation.
#[macro_export]
macro_rules! outln {
    () => { $crate::console::print_out(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::console::print_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that never panics.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::print_out(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! errln {
    () => { $crate::console::print_err(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::console::print_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_line_is_a_whole_line_off_a_terminal() {
        assert_eq!(status_bytes("Stats: 1Hz", false), "Stats: 1Hz\n");
        assert_eq!(status_bytes("Stats: 1Hz", true), "\r\x1b[KStats: 1Hz");
    }
}
