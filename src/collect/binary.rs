//! The binary collector (`--binary`): every sample goes, as it comes, into
//! a file in the reference's binary format ([`crate::binfmt`]), which
//! `tachyon replay` or `python3.15 -m profiling.sampling replay` later turn
//! into any other output. The interval, mode and statistics are stored
//! when sampling ends; the samples reach the file at least every second,
//! so a killed run loses at most about the last second.

use super::atomic::AtomicFile;
use super::{Collector, Output, RunStats};
use crate::binfmt::writer::{BinaryWriter, WriterOptions};
use crate::binfmt::{CaptureConfig, Compression, EncodingStats, StoredStats};
use crate::error::{Error, Result};
use crate::model::{FrameTable, Sample};

/// What the file records besides the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BinaryOptions {
    pub compression: Compression,
    /// The profiled interpreter's version, stored in the header.
    pub python_version: Option<(u8, u8, u8)>,
    /// What was captured (`-a`, `--native`, GC frames, `--blocking`).
    pub capture: Option<CaptureConfig>,
    /// The sampling interval and mode, when known at the start: the
    /// header of a recording that is cut short keeps them (a finished one
    /// stores the run's own).
    pub interval_us: Option<u64>,
    pub mode: Option<crate::model::Mode>,
}

/// Streams samples into a binary profile; see the module documentation.
pub struct BinaryCollector {
    path: std::path::PathBuf,
    writer: Option<BinaryWriter<AtomicFile>>,
    /// Print the reference's encoding statistics before the last line.
    pub print_encoding_stats: bool,
}

impl BinaryCollector {
    /// Create the file now (so an unwritable path fails before sampling).
    /// The output must be a file: a binary profile is not for a terminal.
    pub fn new(output: Output, opts: BinaryOptions) -> Result<Self> {
        let Output::File(path) = output else {
            return Err(Error::io(
                "cannot write a binary profile to standard output",
                std::io::Error::other("give an output file with -o PATH"),
            ));
        };
        // Written in place, a block at least every second: a run that is
        // killed leaves a recording `replay` reads up to its last block
        // (see `binfmt::writer`). The price: an existing file of that name
        // is replaced from the start, not once the new one is whole.
        let writer = BinaryWriter::new(
            AtomicFile::in_place(&path)?,
            path.display().to_string(),
            WriterOptions {
                compression: opts.compression,
                python_version: opts.python_version.unwrap_or((0, 0, 0)),
                capture: opts.capture,
                interval_us: opts
                    .interval_us
                    .unwrap_or(WriterOptions::default().interval_us),
                mode: opts.mode,
                // Sample times are since the epoch: deltas from now are
                // small, and a replay gets the times back.
                start_time_us: crate::model::epoch_us(),
                ..WriterOptions::default()
            },
        )?;
        Ok(BinaryCollector {
            path,
            writer: Some(writer),
            print_encoding_stats: true,
        })
    }

    /// Per-thread stacks written so far.
    pub fn sample_count(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.sample_count())
    }
}

impl Collector for BinaryCollector {
    fn output_error(&self) -> Option<String> {
        let w = self.writer.as_ref()?;
        w.error()
            .map(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    fn collect(&mut self, sample: &Sample, frames: &FrameTable) {
        if let Some(w) = &mut self.writer {
            w.write_sample(sample, frames);
        }
    }

    fn finish(&mut self, _frames: &FrameTable, stats: &RunStats) -> Result<()> {
        let Some(mut w) = self.writer.take() else {
            return Ok(());
        };
        w.set_interval(stats.interval_us);
        w.set_mode(Some(stats.mode));
        w.set_stats(StoredStats::from_run(stats));
        let n = w.sample_count();
        let enc = w.encoding_stats();
        if let Err(e) = w.finish().and_then(|f| f.commit()) {
            return Err(self.failed(e));
        }
        if self.print_encoding_stats {
            crate::out!("{}", format_encoding_stats(&enc));
        }
        crate::outln!(
            "Binary profile written to {} ({n} samples)",
            self.path.display()
        );
        Ok(())
    }
}

impl BinaryCollector {
    /// A recording whose write failed (a full disk) is kept, compressed or
    /// not, since `replay` reads what it had flushed; the error says so.
    fn failed(&self, e: Error) -> Error {
        let regular = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_file());
        if !regular {
            return e;
        }
        match e {
            Error::Io { context, cause } => Error::Io {
                context: format!(
                    "{context} (what was recorded before is kept there: `tachyon replay` reads it)"
                ),
                cause,
            },
            e => e,
        }
    }
}

/// The reference's "Binary Encoding" block (without colours).
pub fn format_encoding_stats(e: &EncodingStats) -> String {
    let total = e.total_records();
    let pct = |n: u64| {
        if total > 0 {
            n as f64 / total as f64 * 100.0
        } else {
            0.0
        }
    };
    let frames = e.frames_written + e.frames_saved;
    let saved_pct = if frames > 0 {
        e.frames_saved as f64 / frames as f64 * 100.0
    } else {
        0.0
    };
    let b = e.bytes_written;
    let bytes = if b >= 1024 * 1024 {
        format!("{:.1} MB", b as f64 / (1024.0 * 1024.0))
    } else if b >= 1024 {
        format!("{:.1} KB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    };
    format!(
        "  Binary Encoding:\n    Records:          {}\n      RLE repeat:     {} ({:.1}%) [{} samples]\n      Full stack:     {} ({:.1}%)\n      Suffix match:   {} ({:.1}%)\n      Pop-push:       {} ({:.1}%)\n  Frame Efficiency:\n    Frames written:   {}\n    Frames saved:     {} ({saved_pct:.1}%)\n    Bytes (pre-zstd): {bytes}\n",
        thousands(total),
        thousands(e.repeat_records),
        pct(e.repeat_records),
        thousands(e.repeat_samples),
        thousands(e.full_records),
        pct(e.full_records),
        thousands(e.suffix_records),
        pct(e.suffix_records),
        thousands(e.pop_push_records),
        pct(e.pop_push_records),
        thousands(e.frames_written),
        thousands(e.frames_saved),
    )
}

/// Python's `f"{n:,}"`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_like_python() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(8180), "8,180");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn stdout_is_refused() {
        let e = BinaryCollector::new(Output::Stdout, BinaryOptions::default())
            .err()
            .unwrap();
        assert!(e.to_string().contains("-o PATH"), "{e}");
    }
}
