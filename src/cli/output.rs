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
use tachyon::collect::heatmap::HeatmapCollector;
use tachyon::collect::jsonl::JsonlCollector;
use tachyon::collect::pprof::PprofCollector;
use tachyon::collect::pstats::{PstatsCollector, PstatsOptions, SortKey};
use tachyon::collect::speedscope::SpeedscopeCollector;
use tachyon::collect::{Collector, Output};
use tachyon::dump::SourceReader;
use tachyon::model::Mode;
use tachyon::opcodes::OpTable;

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("format").args(["pstats", "collapsed", "flamegraph", "diff_flamegraph", "jsonl", "gecko", "speedscope", "pprof", "heatmap"])))]
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
    /// Write a heatmap: a directory (index.html and a page per source file)
    /// with each line's self and total samples painted on its source
    #[arg(long)]
    pub heatmap: bool,
    /// Where to write the output (default: the table on stdout for pstats, heatmap_<pid>/ for the heatmap, <format>_<pid>.<ext> otherwise)
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
    /// Open the HTML output (--flamegraph, --diff-flamegraph, --heatmap) in a browser
    /// once written: $BROWSER, else xdg-open
    #[arg(long)]
    pub browser: bool,
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
            || self.pprof
            || self.heatmap)
    }

    /// The pstats-only options with another format: a usage error of `sub`.
    pub fn check(&self, sub: &str, pstats: bool) {
        if !pstats && (self.sort.is_some() || self.limit.is_some() || self.no_summary) {
            super::usage_error(
                sub,
                "--sort, --limit and --no-summary only apply to the pstats output",
            );
        }
        if self.browser && !(self.flamegraph || self.diff_flamegraph.is_some() || self.heatmap) {
            super::usage_error(
                sub,
                "--browser opens an HTML output: use it with --flamegraph, --diff-flamegraph or --heatmap",
            );
        }
    }

    /// Refuse an `-o` that cannot hold the output's shape: the heatmap is a
    /// directory, so an existing file there is refused before sampling
    /// rather than failing once the profile is taken.
    pub fn refuse_wrong_kind(&self) -> Result<()> {
        if let Some(p) = &self.output
            && self.heatmap
            && p.exists()
            && !p.is_dir()
        {
            bail!(
                "-o {} is a file, and --heatmap writes a directory (index.html and a page per source file): give a directory",
                p.display()
            );
        }
        Ok(())
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

    /// The HTML file this command writes, if it writes one.
    pub fn html_file(&self, id: u32) -> Option<PathBuf> {
        let out = if self.flamegraph {
            self.file("flamegraph", "html", id)
        } else if self.diff_flamegraph.is_some() {
            self.file("diff_flamegraph", "html", id)
        } else if self.heatmap {
            return Some(HeatmapCollector::index_path(&self.heatmap_dir(id)));
        } else {
            return None;
        };
        match out {
            Output::File(p) => Some(p),
            Output::Stdout => None,
        }
    }

    /// `--browser`: open the HTML output just written for process `id`.
    pub fn open_browser(&self, id: u32) {
        if let Some(page) = self.html_file(id).filter(|p| self.browser && p.exists()) {
            open_in_browser(&page);
        }
    }

    /// The heatmap's directory for process `id`: `-o` names it, else
    /// `heatmap_<pid>` (the reference's name).
    pub fn heatmap_dir(&self, id: u32) -> PathBuf {
        self.output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("heatmap_{id}")))
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

    /// The outputs of child process `pid` (`--subprocesses`), named as the
    /// reference names them: `-o base.ext` becomes `base_<pid>.ext` (`-o
    /// name` without an extension `name_<pid>`), a directory holds the
    /// default names (but the heatmap's `-o DIR` is its directory: the
    /// child's is `DIR_<pid>`), and the default is `<format>_<pid>.<ext>`, with the
    /// pstats table, which has no file by default, in
    /// `profile_<pid>.pstats`. `binary`: the output is `--binary`.
    pub fn for_child(&self, pid: u32, binary: bool) -> OutputArgs {
        let output = match &self.output {
            // The heatmap's -o is its own directory: the child's is beside it.
            Some(p) if p.is_dir() && !self.heatmap => Some(p.clone()),
            Some(p) => Some(child_path(p, pid)),
            None if self.is_pstats() && !binary => {
                Some(PathBuf::from(format!("profile_{pid}.pstats")))
            }
            None => None,
        };
        OutputArgs {
            output,
            browser: false,
            ..self.clone()
        }
    }

    /// The collector for the chosen format. `id` names default files (the
    /// profiled process); `mode` and `capture` describe the samples, for the
    /// differential flame graph's baseline check; `target_pid` labels gecko
    /// threads and is where the heatmap reads source (else this file system).
    /// `opcodes` names the frames' opcodes (`--opcodes`, or a recording
    /// that has them) in the formats that show them.
    pub fn collector(
        &self,
        id: u32,
        mode: Option<Mode>,
        capture: Option<CaptureConfig>,
        target_pid: Option<u32>,
        opcodes: Option<&'static OpTable>,
    ) -> Result<Box<dyn Collector>> {
        Ok(if self.collapsed {
            Box::new(CollapsedCollector::new(self.file("collapsed", "txt", id)))
        } else if self.flamegraph {
            Box::new(
                FlamegraphCollector::new(self.file("flamegraph", "html", id)).with_opcodes(opcodes),
            )
        } else if let Some(baseline) = &self.diff_flamegraph {
            let c =
                DiffFlamegraphCollector::new(baseline, self.file("diff_flamegraph", "html", id))?
                    .with_opcodes(opcodes);
            if let Some(mode) = mode {
                c.check(mode, capture)?;
            }
            Box::new(c)
        } else if self.gecko {
            let c = GeckoCollector::new(self.file("gecko", "json", id)).with_opcodes(opcodes);
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
        } else if self.heatmap {
            let source = match target_pid {
                Some(pid) => SourceReader::new(pid as i32),
                None => SourceReader::local(),
            };
            Box::new(HeatmapCollector::new(self.heatmap_dir(id), source).with_opcodes(opcodes))
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

/// `base.ext` → `base_<pid>.ext`; `name` → `name_<pid>` (the reference's
/// names for a child's output).
fn child_path(p: &Path, pid: u32) -> PathBuf {
    // Rust splits a name as Python's os.path.splitext does: `.rc` has no
    // extension, `a.tar.gz` has `gz`.
    let stem = p.file_stem().unwrap_or_default().to_string_lossy();
    let new = match p.extension() {
        Some(ext) => format!("{stem}_{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}_{pid}"),
    };
    p.with_file_name(new)
}

/// Open `page` in the user's browser: each command of `$BROWSER` (a
/// `:`-separated list, `%s` standing for the page, else the page appended)
/// in turn, else `xdg-open`. The browser is left running, in its own
/// process group; an opener that exits at once with a failure (`xdg-open`
/// finding no browser exits 3) counts as none. When none opens the page,
/// say so in one line with the page's path: the file is written either way.
fn open_in_browser(page: &Path) {
    let page_str = page.to_string_lossy();
    let mut commands: Vec<Vec<String>> = Vec::new();
    if let Ok(list) = std::env::var("BROWSER") {
        for entry in list.split(':').filter(|e| !e.trim().is_empty()) {
            let mut words: Vec<String> = entry.split_whitespace().map(str::to_owned).collect();
            if words.iter().any(|w| w.contains("%s")) {
                for w in &mut words {
                    *w = w.replace("%s", &page_str);
                }
            } else {
                words.push(page_str.to_string());
            }
            commands.push(words);
        }
    }
    // (`open` is macOS's; on Linux it is xdg-open or openvt.)
    commands.push(vec!["xdg-open".to_string(), page_str.to_string()]);
    let mut failed: Option<String> = None;
    for words in &commands {
        match try_opener(words) {
            Opened::Yes => return,
            Opened::NotFound => {}
            Opened::Failed(why) => {
                failed.get_or_insert(why);
            }
        }
    }
    match failed {
        Some(why) => tachyon::errln!(
            "tachyon: could not open a browser ({why}); the file is written: open {} yourself, or set $BROWSER",
            page.display()
        ),
        None => tachyon::errln!(
            "tachyon: no browser to open {}: set $BROWSER or install xdg-open (the file is written)",
            page.display()
        ),
    }
}

enum Opened {
    Yes,
    NotFound,
    /// It ran and failed: why, for the message.
    Failed(String),
}

/// How long an opener may take to fail. One still running then is taken
/// for a browser that started (xdg-open can wait for the browser).
const OPENER_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Start one opener command and see whether it fails at once.
fn try_opener(words: &[String]) -> Opened {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    // In a process group of its own: a signal to tachyon's job (a
    // `timeout` around it, the shell's job control) is not the browser's.
    let started = std::process::Command::new(&words[0])
        .args(&words[1..])
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = started else {
        return Opened::NotFound;
    };
    let deadline = std::time::Instant::now() + OPENER_GRACE;
    while std::time::Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Opened::Yes,
            Ok(Some(status)) => {
                let how = match (status.code(), status.signal()) {
                    (Some(3), _) if words[0] == "xdg-open" => {
                        "xdg-open found no method to open it: exit status 3".to_string()
                    }
                    (Some(code), _) => format!("{} exited with status {code}", words[0]),
                    (None, Some(sig)) => format!("{} was killed by signal {sig}", words[0]),
                    _ => format!("{} failed", words[0]),
                };
                return Opened::Failed(how);
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(_) => return Opened::Yes,
        }
    }
    Opened::Yes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_files_are_named_as_the_reference_names_them() {
        let n = |s: &str| child_path(Path::new(s), 42).display().to_string();
        assert_eq!(n("out.html"), "out_42.html");
        assert_eq!(n("dir/prof.tar.gz"), "dir/prof.tar_42.gz");
        assert_eq!(n("heat"), "heat_42");
        assert_eq!(n(".hidden"), ".hidden_42");
    }
}
