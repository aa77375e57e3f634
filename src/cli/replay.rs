//! `tachyon replay`: turn a binary profile (`--binary`, tachyon's or the
//! reference's) into another output, through the same collectors as live
//! sampling, with the statistics stored in the file.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;

use tachyon::binfmt::reader::BinaryReader;
use tachyon::collect::Collector;

use super::output::OutputArgs;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tachyon replay profile.bin\n  tachyon replay --collapsed -o stacks.txt profile.bin"
)]
pub struct ReplayArgs {
    #[command(flatten)]
    out: OutputArgs,
    /// Binary profile file to replay
    #[arg(value_name = "FILE")]
    input: PathBuf,
}

pub fn replay(a: ReplayArgs) -> Result<ExitCode> {
    a.out.check("replay", a.out.is_pstats());
    let shown = a.input.display().to_string();
    if !a.input.exists() {
        bail!("input file not found: {shown}");
    }
    a.out.refuse_overwriting(&[&a.input])?;
    a.out.refuse_wrong_kind()?;
    let mut reader =
        BinaryReader::open(&a.input).with_context(|| format!("cannot replay {shown}"))?;
    let info = reader.info().clone();
    tachyon::outln!("Replaying {} samples from {shown}", info.sample_count);
    tachyon::outln!("  Sample interval: {} us", info.interval_us);
    tachyon::outln!("  Compression: {}", info.compression.as_str());

    // Default names carry our own pid: the recording's process is gone.
    // Opcodes as the recording has them, named for the version it names.
    let (major, minor, _) = info.python_version;
    let opcodes = info
        .capture
        .is_some_and(|c| c.opcodes)
        .then(|| tachyon::opcodes::table(major as u32, minor as u32))
        .flatten();
    let mut collector: Box<dyn Collector> =
        a.out
            .collector(std::process::id(), info.mode, info.capture, None, opcodes)?;

    // The reference's progress bar, on a terminal only.
    let total = info.sample_count;
    let tty = std::io::stdout().is_terminal();
    let step = (total / 50).max(1);
    let progress = |n: u64| {
        if tty && total > 0 {
            let pct = n as f64 / total as f64;
            let filled = (40.0 * pct) as usize;
            tachyon::out!(
                "\r  [{}{}] {:5.1}% ({}/{})",
                "█".repeat(filled),
                "░".repeat(40 - filled),
                pct * 100.0,
                n,
                total
            );
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
    };
    let count = tachyon::session::replay(&mut reader, collector.as_mut(), |done| {
        if done.is_multiple_of(step) || done == total {
            progress(done);
        }
    })
    .with_context(|| format!("cannot replay {shown}"))?;
    tachyon::outln!();
    if info.truncated {
        // Its writer was killed (or the file cut): what it had flushed.
        let up_to = reader
            .last_timestamp_us()
            .map_or(0.0, |t| t.saturating_sub(info.start_time_us) as f64 / 1e6);
        tachyon::errln!("truncated recording: {count} samples, up to {up_to:.1} s");
    }
    collector
        .finish(reader.frames(), &reader.run_stats())
        .context("cannot write the output")?;
    tachyon::outln!("Replayed {count} samples");
    if let Some(line) = tachyon::sample::shutdown_line(&reader.run_stats()) {
        tachyon::outln!("{line}");
    }
    a.out.open_browser(std::process::id());
    Ok(ExitCode::SUCCESS)
}
