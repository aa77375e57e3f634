//! `tachyon replay`: turn a binary profile (`--binary`, tachyon's or the
//! reference's) into another output, through the same collectors as live
//! sampling, with the statistics stored in the file.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{ArgGroup, Args};

use tachyon::binfmt::reader::BinaryReader;
use tachyon::collect::collapsed::CollapsedCollector;
use tachyon::collect::diff_flamegraph::DiffFlamegraphCollector;
use tachyon::collect::flamegraph::FlamegraphCollector;
use tachyon::collect::gecko::GeckoCollector;
use tachyon::collect::jsonl::JsonlCollector;
use tachyon::collect::pstats::{PstatsCollector, PstatsOptions, SortKey};
use tachyon::collect::{Collector, Output};

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("format").args(["pstats", "collapsed", "flamegraph", "jsonl", "gecko", "diff_flamegraph"])))]
#[command(
    after_help = "Examples:\n  tachyon replay profile.bin\n  tachyon replay --collapsed -o stacks.txt profile.bin"
)]
pub struct ReplayArgs {
    /// Print a table of functions by samples (the default), or with -o write a pstats file
    #[arg(long)]
    pstats: bool,
    /// Write collapsed stacks (flamegraph.pl, inferno, speedscope)
    #[arg(long)]
    collapsed: bool,
    /// Write an interactive flame graph (one self-contained HTML file)
    #[arg(long)]
    flamegraph: bool,
    /// Write a differential flame graph of FILE against a baseline
    /// recording: red grew, blue shrank
    #[arg(long, value_name = "BASELINE.bin")]
    diff_flamegraph: Option<PathBuf>,
    /// Write JSON lines: string and frame tables, per-frame sample counts
    #[arg(long)]
    jsonl: bool,
    /// Write a Firefox Profiler profile: a timeline per thread with GIL, CPU,
    /// exception and GC markers (open it at https://profiler.firefox.com)
    #[arg(long)]
    gecko: bool,
    /// Where to write the output (default: the table on stdout for pstats, collapsed_<pid>.txt otherwise)
    #[arg(short = 'o', long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// pstats: sort the table by this key
    #[arg(long, value_name = "KEY")]
    sort: Option<SortKey>,
    /// pstats: how many rows to print
    #[arg(short = 'l', long, value_name = "N")]
    limit: Option<usize>,
    /// pstats: leave out the summary of interesting functions
    #[arg(long)]
    no_summary: bool,
    /// Binary profile file to replay
    #[arg(value_name = "FILE")]
    input: PathBuf,
}

/// Frames of files with this name are the reference profiler's own.
const INTERNAL_FRAME_SUFFIX: &str = "_sync_coordinator.py";

pub fn replay(a: ReplayArgs) -> Result<ExitCode> {
    if (a.collapsed || a.flamegraph || a.jsonl)
        && (a.sort.is_some() || a.limit.is_some() || a.no_summary)
    {
        use clap::CommandFactory;
        let mut cmd = super::Cli::command();
        cmd.build();
        if let Some(sub) = cmd.find_subcommand_mut("replay") {
            sub.error(
                clap::error::ErrorKind::ArgumentConflict,
                "--sort, --limit and --no-summary only apply to the pstats output",
            )
            .exit();
        }
    }
    let shown = a.input.display().to_string();
    if !a.input.exists() {
        bail!("input file not found: {shown}");
    }
    let mut reader =
        BinaryReader::open(&a.input).with_context(|| format!("cannot replay {shown}"))?;
    let info = reader.info().clone();
    println!("Replaying {} samples from {shown}", info.sample_count);
    println!("  Sample interval: {} us", info.interval_us);
    println!("  Compression: {}", info.compression.as_str());

    let mut collector: Box<dyn Collector> = if a.collapsed {
        let path = a
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("collapsed_{}.txt", std::process::id())));
        Box::new(CollapsedCollector::new(Output::File(path)))
    } else if let Some(baseline) = &a.diff_flamegraph {
        let path = a.output.clone().unwrap_or_else(|| {
            PathBuf::from(format!("diff_flamegraph_{}.html", std::process::id()))
        });
        let c = DiffFlamegraphCollector::new(baseline, Output::File(path))?;
        if let Some(mode) = info.mode {
            c.check(mode, info.capture)?;
        }
        Box::new(c)
    } else if a.gecko {
        let path = a
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("gecko_{}.json", std::process::id())));
        Box::new(GeckoCollector::new(Output::File(path)))
    } else if a.jsonl {
        let path = a
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("jsonl_{}.jsonl", std::process::id())));
        Box::new(JsonlCollector::new(Output::File(path)))
    } else if a.flamegraph {
        let path = a
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("flamegraph_{}.html", std::process::id())));
        Box::new(FlamegraphCollector::new(Output::File(path)))
    } else {
        let output = match &a.output {
            Some(p) => Output::File(p.clone()),
            None => Output::Stdout,
        };
        Box::new(PstatsCollector::new(
            output,
            PstatsOptions {
                sort: a.sort.unwrap_or_default(),
                limit: Some(a.limit.unwrap_or(15)),
                show_summary: !a.no_summary,
            },
        ))
    };

    // The reference's progress bar, on a terminal only.
    let total = info.sample_count;
    let tty = std::io::stdout().is_terminal();
    let step = (total / 50).max(1);
    let mut done: u64 = 0;
    let progress = |n: u64| {
        if tty && total > 0 {
            let pct = n as f64 / total as f64;
            let filled = (40.0 * pct) as usize;
            print!(
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
    // The reference's collectors drop the frames of its own launcher
    // (`_sync_coordinator.py`, at the bottom of every stack of a
    // `profiling.sampling run`); so does its replay, and so does this one.
    let internal: Vec<bool> = reader
        .frames()
        .frames()
        .iter()
        .map(|f| reader.frames().str(f.file).ends_with(INTERNAL_FRAME_SUFFIX))
        .collect();
    let mut filtered = tachyon::model::Sample::default();
    let count = reader
        .replay(|s, table| {
            let has_internal = s
                .threads
                .iter()
                .any(|t| t.frames.iter().any(|&f| internal[f as usize]));
            if has_internal {
                filtered.clone_from(s);
                for t in &mut filtered.threads {
                    t.frames.retain(|&f| !internal[f as usize]);
                }
                collector.collect(&filtered, table);
            } else {
                collector.collect(s, table);
            }
            done += 1;
            if done.is_multiple_of(step) || done == total {
                progress(done);
            }
        })
        .with_context(|| format!("cannot replay {shown}"))?;
    println!();
    collector
        .finish(reader.frames(), &reader.run_stats())
        .context("cannot write the output")?;
    println!("Replayed {count} samples");
    Ok(ExitCode::SUCCESS)
}
