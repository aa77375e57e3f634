//! Output formats shared by `run`, `attach` and `replay`: the flags, the
//! default file names (the reference's `<format>_<pid>.<ext>`, inside `-o`
//! when it names a directory) and the collector each format builds.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::{ArgGroup, Args};

use tachyon::binfmt::CaptureConfig;
use tachyon::collect::collapsed::CollapsedCollector;
use tachyon::collect::diff_flamegraph::DiffFlamegraphCollector;
use tachyon::collect::flamegraph::FlamegraphCollector;
use tachyon::collect::gecko::GeckoCollector;
use tachyon::collect::jsonl::JsonlCollector;
use tachyon::collect::pprof::PprofCollector;
use tachyon::collect::pstats::{PstatsCollector, PstatsOptions, SortKey};
use tachyon::collect::speedscope::SpeedscopeCollector;
use tachyon::collect::{Collector, Output};
use tachyon::model::Mode;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("format").args(["pstats", "collapsed", "flamegraph", "diff_flamegraph", "jsonl", "gecko", "speedscope", "pprof"])))]
pub struct OutputArgs {
    /// Print a table of functions by samples (the default), or with -o write a pstats file
    #[arg(long)]
    pub pstats: bool,
    /// Write collapsed stacks (flamegraph.pl, inferno, speedscope)
    #[arg(long)]
    pub collapsed: bool,
    /// Write an interactive flame graph (one self-contained HTML file)
    #[arg(long)]
    pub flamegraph: bool,
    /// Write a differential flame graph against a baseline recorded with
    /// --binary: red grew, blue shrank
    #[arg(long, value_name = "BASELINE.bin")]
    pub diff_flamegraph: Option<PathBuf>,
    /// Write JSON lines: string and frame tables, per-frame sample counts
    #[arg(long)]
    pub jsonl: bool,
    /// Write a Firefox Profiler profile: a timeline per thread with GIL, CPU,
    /// exception and GC markers (open it at https://profiler.firefox.com)
    #[arg(long)]
    pub gecko: bool,
    /// Write a speedscope profile: per thread, the stacks in time order,
    /// weighed in microseconds (open it at https://www.speedscope.app)
    #[arg(long)]
    pub speedscope: bool,
    /// Write a pprof profile (gzipped profile.proto): samples and time per
    /// stack, with a thread label, for `go tool pprof`, Pyroscope or Parca
    #[arg(long)]
    pub pprof: bool,
    /// Where to write the output (default: the table on stdout for pstats, <format>_<pid>.<ext> otherwise)
    #[arg(short = 'o', long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// pstats: sort the table by this key
    #[arg(long, value_name = "KEY")]
    pub sort: Option<SortKey>,
    /// pstats: how many rows to print
    #[arg(short = 'l', long, value_name = "N")]
    pub limit: Option<usize>,
    /// pstats: leave out the summary of interesting functions
    #[arg(long)]
    pub no_summary: bool,
}

impl OutputArgs {
    /// No other format was asked for (pstats is the default).
    pub fn is_pstats(&self) -> bool {
        !(self.collapsed
            || self.flamegraph
            || self.diff_flamegraph.is_some()
            || self.jsonl
            || self.gecko
            || self.speedscope
            || self.pprof)
    }

    /// The pstats-only options with another format: a usage error of `sub`.
    pub fn check(&self, sub: &str, pstats: bool) {
        if !pstats && (self.sort.is_some() || self.limit.is_some() || self.no_summary) {
            super::usage_error(
                sub,
                "--sort, --limit and --no-summary only apply to the pstats output",
            );
        }
    }

    /// Refuse an `-o` that names one of the files this command reads (the
    /// recording being replayed, the baseline of a differential flame
    /// graph): writing it would destroy the input.
    pub fn refuse_overwriting(&self, inputs: &[&Path]) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let Some(out) = &self.output else {
            return Ok(());
        };
        let Ok(o) = std::fs::metadata(out) else {
            return Ok(());
        };
        let baseline = self.diff_flamegraph.as_deref();
        for input in inputs.iter().copied().chain(baseline) {
            if let Ok(i) = std::fs::metadata(input)
                && (i.dev(), i.ino()) == (o.dev(), o.ino())
            {
                bail!(
                    "-o {} is the input file {}: writing it would destroy the input; give another output path",
                    out.display(),
                    input.display()
                );
            }
        }
        Ok(())
    }

    /// Where a `stem` output for process `id` goes.
    pub fn file(&self, stem: &str, ext: &str, id: u32) -> Output {
        let name = format!("{stem}_{id}.{ext}");
        match &self.output {
            Some(p) if p.is_dir() => Output::File(p.join(name)),
            Some(p) => Output::File(p.clone()),
            None => Output::File(PathBuf::from(name)),
        }
    }

    /// The collector for the chosen format. `id` names default files (the
    /// profiled process); `mode` and `capture` describe the samples, for the
    /// differential flame graph's baseline check; `target_pid` labels gecko
    /// threads.
    pub fn collector(
        &self,
        id: u32,
        mode: Option<Mode>,
        capture: Option<CaptureConfig>,
        target_pid: Option<u32>,
    ) -> Result<Box<dyn Collector>> {
        Ok(if self.collapsed {
            Box::new(CollapsedCollector::new(self.file("collapsed", "txt", id)))
        } else if self.flamegraph {
            Box::new(FlamegraphCollector::new(self.file(
                "flamegraph",
                "html",
                id,
            )))
        } else if let Some(baseline) = &self.diff_flamegraph {
            let c =
                DiffFlamegraphCollector::new(baseline, self.file("diff_flamegraph", "html", id))?;
            if let Some(mode) = mode {
                c.check(mode, capture)?;
            }
            Box::new(c)
        } else if self.gecko {
            let c = GeckoCollector::new(self.file("gecko", "json", id));
            Box::new(match target_pid {
                Some(pid) => c.with_pid(pid),
                None => c,
            })
        } else if self.speedscope {
            Box::new(SpeedscopeCollector::new(self.file(
                "speedscope",
                "json",
                id,
            )))
        } else if self.pprof {
            Box::new(PprofCollector::new(self.file("pprof", "pb.gz", id)))
        } else if self.jsonl {
            Box::new(JsonlCollector::new(self.file("jsonl", "jsonl", id)))
        } else {
            let output = match &self.output {
                None => Output::Stdout,
                Some(_) => self.file("pstats", "pstats", id),
            };
            Box::new(PstatsCollector::new(
                output,
                PstatsOptions {
                    sort: self.sort.unwrap_or_default(),
                    limit: Some(self.limit.unwrap_or(15)),
                    show_summary: !self.no_summary,
                },
            ))
        })
    }
}
