//! Collectors: what samples become. Live sampling and (later) `replay` feed
//! the same collectors, so every format works both ways.
//!
//! A collector sees each successful [`Sample`] (threads already filtered by
//! mode), is told of each failed one, and writes its output once at the
//! end, with the run's statistics.

pub mod atomic;
pub mod binary;
pub mod collapsed;
pub mod diff_flamegraph;
pub mod flamegraph;
pub mod gecko;
pub mod heatmap;
pub mod jsonl;
pub mod merge;
pub mod pprof;
pub mod pstats;
#[cfg(test)]
pub(crate) mod scenarios;
pub mod speedscope;
pub mod stacks;
pub mod tee;
pub(crate) mod tree;

use std::path::PathBuf;

use crate::error::Result;
use crate::model::{FrameTable, RunStats, Sample};

/// Where a collector writes: a file, or standard output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout,
    File(PathBuf),
}

impl Output {
    /// Write a finished output: to standard output, or to the file followed
    /// by the line `announce` and the file's name (the reference's words
    /// for each format; none when `announce` is empty).
    pub fn write(&self, bytes: &[u8], announce: &str) -> Result<()> {
        match self {
            Output::Stdout => write_stdout(bytes),
            Output::File(path) => {
                atomic::write_file(path, bytes)?;
                if !announce.is_empty() {
                    crate::outln!("{announce}{}", path.display());
                }
                Ok(())
            }
        }
    }
}

/// Write a whole output to standard output; a closed pipe (`| head`) is
/// not an error.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<()> {
    crate::console::write_stdout(bytes)
        .map_err(|e| crate::error::Error::io("cannot write to standard output", e))
}

pub trait Collector: Send {
    /// One sample; `frames` resolves its frame ids.
    fn collect(&mut self, sample: &Sample, frames: &FrameTable);

    /// One sample that failed.
    fn collect_failed(&mut self) {}

    /// A collector that writes as it goes (the binary recording) and whose
    /// output failed (a full disk): what went wrong. Sampling stops then,
    /// since every further sample would be lost.
    fn output_error(&self) -> Option<String> {
        None
    }

    /// The samples that follow come from process `pid` (a command's next
    /// Python process, once the first has exited).
    fn target_changed(&mut self, _pid: i32) {}

    /// The samples that follow come from a process running the Python
    /// these `offsets` describe (told after [`Collector::target_changed`]):
    /// the live view names its instructions with that version's opcode
    /// table, and knows whether its threads can wait for a GIL.
    fn target_python(&mut self, _offsets: &crate::offsets::Offsets) {}

    /// In a merged profile (`--subprocesses --merge`), the samples with
    /// `pid` come from the process that runs `command` (its command line,
    /// e.g. `python3 script.py`). Told once per process, before its first
    /// sample; formats with a section per process name it so.
    fn process_named(&mut self, _pid: u32, _command: &str) {}

    /// Write the result. Called once, also after Ctrl-C or the target's exit.
    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()>;
}
