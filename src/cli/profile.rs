//! `tachyon run` and `tachyon attach`: sample a program into a collector.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

use tachyon::binfmt::{CaptureConfig, Compression};
use tachyon::collect::binary::{BinaryCollector, BinaryOptions};
use tachyon::collect::diff_flamegraph::DiffFlamegraphCollector;
use tachyon::collect::{Collector, Output};
use tachyon::live::{Ended, LiveCollector, LiveSession};
use tachyon::model::{FrameTable, Mode, RunStats};

use super::async_aware::{AsyncModeArg, open_error};
use super::output::OutputArgs;
use tachyon::process::linux::LinuxProcess;
use tachyon::process::ptrace::StoppedThreads;
use tachyon::runtime::Runtime;
use tachyon::sample::{self, SampleConfig, StopReason, signals};
use tachyon::session::follow::Follower;
use tachyon::session::launch;
use tachyon::session::open::Opening;
use tachyon::session::{
    self, ChildReport, ChildrenConfig, Outcome, ProfileConfig, Profiler, Stopping,
};
use tachyon::unwind::{UnwindOptions, Unwinder};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Wall-clock time: every sample counts, waiting included
    Wall,
    /// Only threads running on a CPU
    Cpu,
    /// Only the thread holding the GIL
    Gil,
    /// Only threads raising or handling an exception
    Exception,
}

/// Which native frames `--native-frames` keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NativeFramesArg {
    /// Extensions' and libraries' frames, and the interpreter's own at the
    /// leaf
    Useful,
    /// Every native frame
    All,
}

impl From<NativeFramesArg> for tachyon::native::Keep {
    fn from(a: NativeFramesArg) -> Self {
        match a {
            NativeFramesArg::Useful => tachyon::native::Keep::Useful,
            NativeFramesArg::All => tachyon::native::Keep::All,
        }
    }
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Wall => Mode::Wall,
            ModeArg::Cpu => Mode::Cpu,
            ModeArg::Gil => Mode::Gil,
            ModeArg::Exception => Mode::Exception,
        }
    }
}

/// Options shared by `run` and `attach`.
#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// Sampling rate: a number with an optional hz, khz (k) or mhz suffix
    /// (--rate, py-spy's spelling, is the same option)
    #[arg(short = 'r', long = "sampling-rate", visible_alias = "rate", value_name = "RATE", default_value = "1khz",
          value_parser = sample::parse_rate)]
    rate: Duration,
    /// Stop after this many seconds (fractions allowed); default: until the target exits or Ctrl-C
    #[arg(short = 'd', long, value_name = "SECONDS", value_parser = parse_seconds)]
    duration: Option<Duration>,
    /// Sample every thread, not only the main thread
    #[arg(short = 'a', long)]
    all_threads: bool,
    /// Print the achieved sampling rate once a second while sampling
    #[arg(long)]
    realtime_stats: bool,
    /// Show the profile as it grows in a full-screen, top-like view (h
    /// lists the keys, q quits); with -o or a format the file is written too
    #[arg(long, conflicts_with = "realtime_stats")]
    live: bool,
    /// Stop the target's threads during each sample, for consistent stacks
    /// (slows the target down; use rates of 1 kHz or less)
    #[arg(long)]
    blocking: bool,
    /// Show <native> where C code called back into Python
    #[arg(long)]
    native: bool,
    /// Show the real C, C++ and Rust frames (extensions, libraries, the
    /// interpreter's own C at the leaf) between the Python frames, like
    /// py-spy's --native; =all keeps every native frame, the interpreter's
    /// call machinery and the thread's start included. Stops the threads
    /// for each sample, as --blocking does
    #[arg(long, value_enum, value_name = "WHICH", num_args = 0..=1, require_equals = true, default_missing_value = "useful")]
    native_frames: Option<NativeFramesArg>,
    /// Do not show <GC> while the garbage collector runs
    #[arg(long)]
    no_gc: bool,
    /// Record the bytecode instruction each frame is at, specialised forms
    /// included (with --flamegraph, --diff-flamegraph, --gecko, --heatmap,
    /// --binary or --live)
    #[arg(long)]
    opcodes: bool,
    /// Python 3.15+: read a steady stack as its newest frame alone, the
    /// frames below vouched for by the interpreter's frame-cache mark;
    /// writes one pointer a thread into the target's thread states (the
    /// default for run; attach writes nothing unless given this)
    #[arg(long)]
    frame_cache: bool,
    /// Never write into the program: read every stack whole (turns off
    /// run's default --frame-cache)
    #[arg(long, conflicts_with = "frame_cache")]
    no_frame_cache: bool,
    /// Set by `run`: tachyon started the program, so the frame cache is on
    /// unless --no-frame-cache.
    #[arg(skip)]
    owns_target: bool,
    /// What to measure
    #[arg(long, value_enum, default_value = "wall")]
    mode: ModeArg,
    /// Also profile every Python process the target starts (multiprocessing
    /// workers, subprocess, forked servers), each into its own file:
    /// <output>_<pid><ext>, else profile_<pid>.pstats or <format>_<pid>.<ext>
    /// (with --merge, all into the one output)
    #[arg(long, conflicts_with = "live")]
    subprocesses: bool,
    /// With --subprocesses: one output for every process instead of a file
    /// per child, each process a section of its own: a root per process in
    /// the flame graph and collapsed stacks, the pid on gecko threads and
    /// JSON-lines records, a profile per process and thread in speedscope, a
    /// pid label in pprof; pstats, heatmap and pprof merge all processes
    /// into one table
    #[arg(long)]
    merge: bool,
    /// Enable async-aware profiling (uses task-based stack reconstruction):
    /// one stack per asyncio task, through the tasks awaiting it, with
    /// <task> frames named after the tasks (Python 3.14+)
    #[arg(long)]
    async_aware: bool,
    /// Async profiling mode: "running" (only the running task; the
    /// default) or "all" (all tasks, including waiting ones). Requires
    /// --async-aware
    #[arg(long, value_enum, value_name = "MODE", requires = "async_aware")]
    async_mode: Option<AsyncModeArg>,
    #[command(flatten)]
    out: OutputArgs,
    /// Record every sample in the binary format, for `tachyon replay` (and
    /// the reference's replay) to turn into any output later
    #[arg(long, conflicts_with_all = ["pstats", "collapsed", "flamegraph", "diff_flamegraph", "jsonl", "gecko", "speedscope", "pprof"])]
    binary: bool,
    /// Binary output: compress with zstd (auto, the default) or not
    #[arg(long, value_enum, value_name = "HOW", requires = "binary")]
    compression: Option<CompressionArg>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    /// zstd (always available in tachyon)
    Auto,
    Zstd,
    None,
}

/// The longest `-d`: ten years, far past any real run, far from where
/// time arithmetic overflows.
const MAX_DURATION_S: f64 = 10.0 * 365.0 * 86400.0;

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: give seconds, e.g. 30 or 0.5"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("invalid duration {s:?}: it must be positive"));
    }
    if v > MAX_DURATION_S {
        return Err(format!(
            "invalid duration {s:?}: at most {MAX_DURATION_S} seconds (10 years); leave -d out to profile until the target exits"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    #[command(flatten)]
    sample: SampleArgs,
    #[command(flatten)]
    pid: super::PidArg,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tachyon run app.py --port 8000\n  tachyon run -m pytest tests/\n  tachyon run -- uv run app.py\n\n\
When sampling ends first (-d, Ctrl-C), tachyon ends the program and every process it started (SIGTERM, then SIGKILL after 2 s).\n\
Exit status: the program's own; 0 when tachyon ended it because the -d duration was over."
)]
pub struct RunArgs {
    #[command(flatten)]
    sample: SampleArgs,
    /// Run TARGET as a module (like python -m)
    #[arg(short = 'm', long = "module")]
    module: bool,
    /// The Python interpreter to start (default: python3 from PATH)
    #[arg(long, value_name = "EXE", default_value = "python3")]
    python: OsString,
    /// Script (or module, with -m) and its arguments; or, after `--`, any
    /// command (uv run, a shell script, chroot ...), whose first Python
    /// process is profiled
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "TARGET"
    )]
    target: Vec<OsString>,
}

/// Was the target given after a bare `--` (`run -- COMMAND`)? clap
/// consumes the `--` itself, so look at the raw arguments: the command
/// form is when the token just before the first target token is `--`.
fn command_form(target: &[OsString]) -> bool {
    let Some(first) = target.first() else {
        return false;
    };
    let raw: Vec<OsString> = std::env::args_os().collect();
    raw.windows(2).any(|w| w[0] == "--" && &w[1] == first)
}

impl SampleArgs {
    /// Combinations clap cannot express; reported as usage errors.
    fn check(&self, sub: &str) {
        if self.merge && !self.subprocesses {
            super::usage_error(
                sub,
                "--merge puts the processes of --subprocesses in one output: use it with --subprocesses",
            );
        }
        if self.merge && self.binary {
            super::usage_error(
                sub,
                "--merge cannot be combined with --binary: a recording holds one process (its format has no pid, and replay, also the reference's, would mix the processes' threads); record each process with --subprocesses --binary instead",
            );
        }
        if self.out.gecko && self.mode != ModeArg::Wall {
            super::usage_error(
                sub,
                "--gecko records every thread's GIL, CPU and exception state on its timeline; it takes no --mode",
            );
        }
        if self.async_aware && self.mode != ModeArg::Wall {
            super::usage_error(
                sub,
                "--async-aware takes no --mode other than wall: a task's stack spans the tasks awaiting it, which have no CPU, GIL or exception state of their own to select by",
            );
        }
        if self.blocking && self.mode == ModeArg::Cpu {
            super::usage_error(
                sub,
                "--blocking cannot be combined with --mode cpu: a thread stopped for the sample is on no CPU",
            );
        }
        if self.native_frames.is_some() && self.mode == ModeArg::Cpu {
            super::usage_error(
                sub,
                "--native-frames cannot be combined with --mode cpu: it stops the threads for each sample, and a stopped thread is on no CPU",
            );
        }
        if self.native_frames.is_some() && self.async_aware {
            super::usage_error(
                sub,
                "--native-frames cannot be combined with --async-aware: task stacks span tasks that run on no thread, so no native stack belongs to them",
            );
        }
        if self.opcodes
            && !(self.live
                || self.binary
                || self.out.gecko
                || self.out.flamegraph
                || self.out.diff_flamegraph.is_some()
                || self.out.heatmap)
        {
            super::usage_error(
                sub,
                "--opcodes is only compatible with --live, --gecko, --flamegraph, --diff-flamegraph, --heatmap, --binary",
            );
        }
        self.out.check(sub, self.is_pstats());
    }

    /// Fail before sampling, not after, when the output cannot be
    /// written: a profile must not be collected only to be lost.
    fn check_output(&self) -> Result<()> {
        self.out.refuse_overwriting(&[])?;
        self.out.refuse_wrong_kind()?;
        // A baseline that cannot serve fails now, not after the run.
        if let Some(baseline) = &self.out.diff_flamegraph {
            DiffFlamegraphCollector::new(baseline, Output::Stdout)?
                .check(self.mode.into(), Some(self.capture()))?;
        }
        // Try it: permission bits say nothing to root, nor about read-only
        // or special filesystems. Whatever the probe creates is removed.
        let probe = |p: &std::path::Path| -> std::io::Result<()> {
            let existed = p.exists();
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(p)?;
            if !existed {
                std::fs::remove_file(p)?;
            }
            Ok(())
        };
        let target = match &self.out.output {
            None if self.is_pstats() => return Ok(()),
            None => PathBuf::from(format!(".tachyon-probe-{}", std::process::id())),
            Some(p) if p.is_dir() => p.join(format!(".tachyon-probe-{}", std::process::id())),
            Some(p) => p.clone(),
        };
        probe(&target).with_context(|| {
            let shown = match &self.out.output {
                Some(p) => p.display().to_string(),
                None => "the current directory".into(),
            };
            format!("cannot write the output to {shown}")
        })
    }

    /// What this run captures, as binary profiles record it.
    fn capture(&self) -> CaptureConfig {
        CaptureConfig {
            all_threads: self.all_threads,
            native: self.native,
            gc: !self.no_gc,
            opcodes: self.opcodes,
            blocking: self.stopping().stops(),
        }
    }

    fn is_pstats(&self) -> bool {
        self.out.is_pstats() && !self.binary
    }

    /// With `--live`, is a file (or the pstats table) asked for too? The
    /// view is the table, so only `-o`, a format, `--pstats` or one of the
    /// table's own options asks for one.
    fn live_with_output(&self) -> bool {
        let table = &self.out;
        !self.is_pstats()
            || table.output.is_some()
            || table.pstats
            || table.sort.is_some()
            || table.limit.is_some()
            || table.no_summary
    }

    /// How every process of the profile is opened: with `--async-aware`,
    /// sampling asyncio tasks (mode `running` unless told otherwise).
    fn opening(&self) -> Opening {
        Opening {
            unwind: self.unwind_options(),
            asyncio: self
                .async_aware
                .then(|| self.async_mode.unwrap_or(AsyncModeArg::Running).into()),
            needs_gil: self.mode == ModeArg::Gil,
        }
    }

    /// Whether the threads are stopped for each sample, and what is read
    /// while they are.
    fn stopping(&self) -> Stopping {
        Stopping {
            blocking: self.blocking,
            native_frames: self.native_frames.map(Into::into),
        }
    }

    fn unwind_options(&self) -> UnwindOptions {
        let native_frames = self.native_frames.is_some();
        UnwindOptions {
            all_threads: self.all_threads,
            // Native frames are merged at the eval loop's entries, which
            // the walk marks; `<GC>` is the collector's own C frames then.
            native: self.native || native_frames,
            gc: !self.no_gc && !native_frames,
            // The gecko timeline shows CPU state: read it (the reference's
            // mode ALL).
            cpu_status: self.mode == ModeArg::Cpu || self.out.gecko,
            opcodes: self.opcodes,
            frame_cache: self.frame_cache || (self.owns_target && !self.no_frame_cache),
        }
    }

    fn collector(
        &self,
        pid: i32,
        version: tachyon::offsets::PyVersion,
    ) -> Result<(Box<dyn Collector>, Mode)> {
        let mode: Mode = self.mode.into();
        let c: Box<dyn Collector> = if self.binary {
            let compression = match self.compression {
                Some(CompressionArg::None) => Compression::None,
                _ => Compression::Zstd,
            };
            Box::new(BinaryCollector::new(
                self.out.file("binary", "bin", pid as u32),
                BinaryOptions {
                    compression,
                    python_version: Some((version.major, version.minor, version.micro)),
                    capture: Some(self.capture()),
                    interval_us: Some(self.rate.as_micros() as u64),
                    mode: Some(mode),
                },
            )?)
        } else {
            self.out.collector(
                pid as u32,
                Some(mode),
                Some(self.capture()),
                Some(pid as u32),
                self.opcodes.then(|| super::opcode_table(version)).flatten(),
            )?
        };
        Ok((c, mode))
    }

    /// The collector of child `pid`'s own profile (`--subprocesses`): the
    /// same format, in the reference's file for that child.
    fn child_collector(&self, pid: i32, rt: &Runtime) -> Result<Box<dyn Collector>> {
        let child = SampleArgs {
            out: self.out.for_child(pid as u32, self.binary),
            ..self.clone()
        };
        Ok(child.collector(pid, rt.offsets.version)?.0)
    }

    fn config(&self) -> SampleConfig {
        SampleConfig {
            interval: self.rate,
            duration: self.duration,
            mode: if self.out.gecko {
                Mode::All
            } else {
                self.mode.into()
            },
            realtime_stats: self.realtime_stats,
            cancel: None,
        }
    }

    /// The profile these options ask for. `command_root`: the root
    /// process of `run -- COMMAND`, whose Python processes the profile
    /// follows in turn (and with `--subprocesses` looks below, every one
    /// in a profile of its own).
    fn profile_config(&self, command_root: Option<i32>) -> ProfileConfig {
        ProfileConfig {
            sample: self.config(),
            stopping: self.stopping(),
            opening: self.opening(),
            children: self.subprocesses.then_some(ChildrenConfig {
                max: session::MAX_CHILDREN,
                merge: self.merge,
            }),
            command_root,
        }
    }

    /// What is checked before anything starts: the combinations clap
    /// cannot express (usage errors), a terminal for `--live`, an output
    /// that can be written.
    fn preflight(&self, sub: &str) -> Result<()> {
        self.check(sub);
        if self.live {
            tachyon::live::require_terminal()?;
        }
        self.check_output()
    }
}

/// Each child's profile in its own file (`--subprocesses`).
impl session::Outputs for SampleArgs {
    fn child(&self, pid: i32, rt: &Runtime) -> std::result::Result<Box<dyn Collector>, String> {
        self.child_collector(pid, rt).map_err(|e| format!("{e:#}"))
    }
}

/// An unnamed file for the program's standard error while the live view
/// has the terminal.
fn program_errors_file() -> Result<std::fs::File> {
    tachyon::live::stderr::unnamed_file("program-stderr").with_context(|| {
        format!(
            "cannot create a file in {} for the program's errors",
            std::env::temp_dir().display()
        )
    })
}

/// Show what the program wrote to standard error under the live view
/// (its end: a traceback, a crash message).
fn show_program_errors(mut file: std::fs::File) {
    use tachyon::live::stderr::{KEEP, tail};
    if let Some((text, cut)) = tail(&mut file, KEEP) {
        tachyon::errln!(
            "tachyon: the program's standard error:\n{}{}",
            if cut { "[...]\n" } else { "" },
            String::from_utf8_lossy(&text).trim_end()
        );
    }
}

/// Sampling stopped because the user quit the live view (`q`, or Ctrl-C
/// as a key), not on a signal: a plain end of the profile.
fn user_quit() -> bool {
    signals::quit_requested() && signals::received().is_none()
}

/// Sample until done; print the statistics; write the output. With a
/// command's root in `config`, when the process exits the profile goes on
/// into the next one the command starts (same collector, same frame
/// table), until there is none. With `--subprocesses`, every Python
/// process below gets a profile of its own.
fn profile(
    first: Unwinder<LinuxProcess>,
    args: &SampleArgs,
    config: ProfileConfig,
    tracer: Option<&Follower>,
    attached: bool,
) -> Result<StopReason> {
    let first_pid = first.pid();
    let mut outputs = MainOutputs::open(args, first_pid, first.offsets())?;
    if args.stopping().stops() && args.rate < Duration::from_micros(100) {
        tachyon::errln!(
            "tachyon: warning: --blocking and --native-frames at intervals under 100 us stop the target most of the time"
        );
    }
    let outcome = Profiler::new(config, args, tracer).profile(first, outputs.sinks())?;
    if let Some(live) = outputs.live.take() {
        end_live(
            live,
            outcome.unwinder.frames(),
            &outcome.stats,
            outcome.reason,
        )?;
    }
    print_summary(&outcome, first_pid, attached, args.merge);
    // A failed write leaves no partial file (outputs are written under a
    // temporary name and renamed only when complete), except a zstd
    // recording, which keeps what it had flushed and says so.
    if let Some(c) = &mut outputs.file {
        c.finish(outcome.frames(), &outcome.stats)
            .context("cannot write the profile")?;
    }
    args.out.open_browser(first_pid as u32);
    Ok(outcome.reason)
}

/// The main profile's outputs: the file (or the table on stdout), unless
/// `--live` alone, and the live view.
struct MainOutputs {
    file: Option<Box<dyn Collector>>,
    live: Option<(LiveSession, LiveCollector)>,
}

impl MainOutputs {
    /// The outputs of the profile of `pid`, which runs the Python these
    /// `offsets` describe.
    fn open(args: &SampleArgs, pid: i32, offsets: &tachyon::offsets::Offsets) -> Result<Self> {
        let file = if !args.live || args.live_with_output() {
            Some(args.collector(pid, offsets.version)?.0)
        } else {
            None
        };
        let live = start_live(args, pid, offsets)?;
        Ok(MainOutputs { file, live })
    }

    /// What the samples go into: the view first, then the file.
    fn sinks(&mut self) -> Vec<&mut dyn Collector> {
        let mut sinks: Vec<&mut dyn Collector> = Vec::new();
        if let Some((_, view)) = &mut self.live {
            sinks.push(view);
        }
        if let Some(c) = &mut self.file {
            sinks.push(c.as_mut());
        }
        sinks
    }
}

/// After the profile, on standard output and error: how it ended, the
/// statistics, why thread names could not be read, each child's profile.
fn print_summary(outcome: &Outcome, first_pid: i32, attached: bool, merged: bool) {
    let total = &outcome.stats;
    say_how_it_ended(first_pid, attached, outcome.reason, total.duration_s);
    sample::print_summary(total);
    let o = outcome.unwinder.offsets();
    if o.free_threaded {
        // Read at the end: the GIL may have been turned on meanwhile.
        let gil = outcome.unwinder.has_gil().ok();
        tachyon::outln!(
            "{}",
            tachyon::dump::free_threaded_line(&format!("{}t", o.version), gil)
        );
    }
    // A profile reads names every second: a few failures, none read,
    // is a program whose threading cannot be read, not a passing moment.
    super::say_why_no_names(outcome.unwinder.names_unavailable(3));
    report_children(&outcome.children, merged);
}

/// The live view and its collector (`--live`), told what it reads of the
/// first target's Python: its instructions' names, whether it reports
/// threads waiting for the GIL.
fn start_live(
    args: &SampleArgs,
    pid: i32,
    offsets: &tachyon::offsets::Offsets,
) -> Result<Option<(LiveSession, LiveCollector)>> {
    let version = offsets.version;
    if !args.live {
        return Ok(None);
    }
    let (session, mut view) = LiveSession::start(
        pid,
        args.rate,
        args.opcodes.then(|| super::opcode_table(version)).flatten(),
        args.async_aware,
    )?;
    view.target_python(offsets);
    Ok(Some((session, view)))
}

/// The view's final numbers, then (after the target's exit or the
/// duration) the final view until the user quits; the summary and the
/// file come after, on the terminal given back.
fn end_live(
    (mut session, mut view): (LiveSession, LiveCollector),
    frames: &FrameTable,
    total: &RunStats,
    reason: StopReason,
) -> Result<()> {
    view.finish(frames, total)?;
    session.end(match reason {
        StopReason::TargetExited => Ended::TargetExited,
        StopReason::Duration => Ended::Duration,
        _ => Ended::Stopped,
    });
    if let Err(e) = session.close() {
        tachyon::errln!("tachyon: {e}");
    }
    Ok(())
}

/// Say why the profile ended, when it was not the duration: the attached
/// target's exit, or an interrupt (a hangup named as one).
fn say_how_it_ended(pid: i32, attached: bool, reason: StopReason, seconds: f64) {
    if attached && reason == StopReason::TargetExited {
        say_target_exited(pid, seconds);
    }
    if reason == StopReason::Interrupted && !user_quit() {
        if signals::received() == Some(nix::sys::signal::Signal::SIGHUP) {
            tachyon::errln!(
                "tachyon: hangup (SIGHUP, the terminal or ssh session closed): writing the profile and stopping"
            );
        }
        tachyon::outln!("Interrupted by user.");
    }
}

/// `attach`: the target ended the profile by exiting; say so, with how it
/// ended when that can still be known (see [`zombie_status`]).
fn say_target_exited(pid: i32, seconds: f64) {
    match zombie_status(pid) {
        Some(status) => tachyon::errln!(
            "tachyon: target process {pid} exited ({}) after {seconds:.1} s",
            describe_status(status)
        ),
        None => tachyon::errln!("tachyon: target process {pid} exited after {seconds:.1} s"),
    }
}

/// `run`: a program killed by a signal says nothing itself; say it (its
/// exit status, 128 + the signal, is passed on).
fn say_if_killed(status: std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let name = signal_name(sig)
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        let core = if status.core_dumped() {
            ", core dumped"
        } else {
            ""
        };
        tachyon::errln!("tachyon: the program was killed by signal {sig}{name}{core}");
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    nix::sys::signal::Signal::try_from(sig)
        .ok()
        .map(|s| s.as_str())
}

/// "exit status 3", "killed by SIGKILL".
fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => match signal_name(sig) {
            Some(name) => format!("killed by {name}"),
            None => format!("killed by signal {sig}"),
        },
        _ => "status unknown".into(),
    }
}

/// How process `pid`, not our child, ended: known only while it is a
/// zombie its parent has not reaped, from the `exit_code` field (the 52nd)
/// of `/proc/PID/stat`. `None` once it is gone: the status is then its
/// parent's to know, and is not guessed.
fn zombie_status(pid: i32) -> Option<std::process::ExitStatus> {
    // Sampling may see the exit (its memory gone) a moment before the
    // kernel makes the process a zombie: give it that moment.
    let deadline = std::time::Instant::now() + Duration::from_millis(300);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        if let Some(status) = parse_zombie_status(&stat) {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn parse_zombie_status(stat: &str) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    // Fields after the command name, which may hold spaces and ')': the
    // state is field 3, exit_code field 52.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    if !matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    let raw: i32 = fields.get(52 - 3)?.parse().ok()?;
    Some(std::process::ExitStatus::from_raw(raw))
}

/// One line per child profile on standard error: its samples, or why it
/// has none.
fn report_children(children: &[ChildReport], merged: bool) {
    let into = if merged { " (merged)" } else { "" };
    for c in children.iter().filter(|c| !c.not_python) {
        match &c.error {
            None => tachyon::errln!(
                "tachyon: child process {}{into}: {} samples in {:.2} seconds, error rate {:.2}%",
                c.pid,
                c.samples,
                c.stats.duration_s,
                c.stats.error_rate_pct()
            ),
            Some(e) => tachyon::errln!("tachyon: child process {}: no profile: {e}", c.pid),
        }
    }
}

pub fn attach(a: AttachArgs) -> Result<ExitCode> {
    let args = &a.sample;
    args.preflight("attach")?;
    signals::install();
    let config = args.profile_config(None);
    let unwinder = config
        .opening
        .open(super::process_id(a.pid.get()))
        .map_err(open_error)?;
    // A target that --blocking cannot stop fails now, in one line, rather
    // than as an empty profile.
    if args.stopping().stops() {
        drop(StoppedThreads::stop(unwinder.memory())?);
    }
    profile(unwinder, args, config, None, true)?;
    Ok(ExitCode::SUCCESS)
}

/// What `run` starts: the command as given (`-- COMMAND`), or the
/// interpreter with the script (or `-m MODULE`) and its arguments. A usage
/// error exits as clap's do.
fn program_argv(a: &RunArgs, command: bool) -> Result<Vec<OsString>> {
    if command {
        if a.module {
            super::usage_error(
                "run",
                "-m runs a module with python; with `-- COMMAND` give the whole command instead",
            );
        }
        return Ok(a.target.clone());
    }
    let Some((first, rest)) = a.target.split_first() else {
        super::usage_error(
            "run",
            "nothing to run: give a script, -m MODULE, or -- COMMAND",
        );
    };
    // Options after the script are the script's; one before it is ours.
    if first.to_string_lossy().starts_with('-') && first != "-" {
        let tip = python_option_tip(&a.python, &a.target);
        super::unknown_option("run", first, tip.as_deref());
    }
    let mut argv = vec![a.python.clone()];
    if a.module {
        argv.push("-m".into());
    } else if !std::path::Path::new(first).exists() {
        bail!("script not found: {}", first.to_string_lossy());
    }
    argv.push(first.clone());
    argv.extend(rest.iter().cloned());
    Ok(argv)
}

/// Options of python itself, which `tachyon run` does not take before the
/// script: `run -c CODE` is meant as `run -- python3 -c CODE`.
const PYTHON_OPTIONS: &[&str] = &[
    "-c", "-X", "-W", "-O", "-OO", "-u", "-I", "-B", "-E", "-s", "-S", "-P", "-q", "-b", "-bb",
    "-d", "-i", "-v", "-x",
];

/// The tip for `run -c pass`: the whole command after `--`.
fn python_option_tip(python: &std::ffi::OsStr, target: &[OsString]) -> Option<String> {
    let first = target.first()?.to_str()?;
    let known = PYTHON_OPTIONS.contains(&first)
        || ["-c", "-X", "-W"]
            .iter()
            .any(|o| first.starts_with(o) && first.len() > 2);
    if !known {
        return None;
    }
    let quote = |w: &str| -> String {
        let plain = !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
        if plain {
            w.to_string()
        } else {
            format!("'{}'", w.replace('\'', "'\\''"))
        }
    };
    let words: Vec<String> = std::iter::once(python.to_string_lossy().into_owned())
        .chain(target.iter().map(|w| w.to_string_lossy().into_owned()))
        .map(|w| quote(&w))
        .collect();
    Some(format!(
        "{first} is an option of python: give the whole command after --: tachyon run -- {}",
        words.join(" ")
    ))
}

pub fn run(mut a: RunArgs) -> Result<ExitCode> {
    a.sample.owns_target = true;
    let args = &a.sample;
    args.preflight("run")?;
    let command = command_form(&a.target);
    let (io, program_errors) = program_io(args.live)?;
    // With --subprocesses (and not --blocking, whose own ptrace would
    // clash), a tracer follows every process the program starts.
    let follow = args.subprocesses && !args.stopping().stops();
    if args.live {
        tachyon::live::waiting_for_python();
    }
    let argv = program_argv(&a, command)?;
    let (launched, tracer) = launch::start(&argv, command, follow, &io)?;
    signals::install();
    let (mut child, python_pid, runtime) = (launched.child, launched.python_pid, launched.runtime);
    // A command (a wrapper, a script running several programs) may start
    // more interpreters after the first: the profile follows them in turn,
    // and with --subprocesses profiles every Python process of it.
    let config = args.profile_config(command.then_some(child.id() as i32));
    let mut unwinder = Unwinder::new(
        LinuxProcess::open(python_pid)?,
        python_pid,
        runtime,
        config.opening.unwind,
    );
    if let Err(e) = config.opening.ready(&mut unwinder) {
        // Refused (a Python before 3.14): the program must not outlive us.
        launch::abandon(&mut child, tracer.as_ref());
        return Err(open_error(e));
    }
    let reason = profile(unwinder, args, config, tracer.as_ref(), false);
    end_program(&mut child, tracer.as_ref(), reason, program_errors)
}

/// The program's standard streams. The live view owns the terminal: the
/// program gets no input, its output is dropped and its errors are kept
/// (in the file returned) to be shown afterwards.
fn program_io(live: bool) -> Result<(launch::ChildIo, Option<std::fs::File>)> {
    if !live {
        return Ok((launch::ChildIo::Inherit, None));
    }
    let file = program_errors_file()?;
    Ok((launch::ChildIo::Quiet(file.try_clone()?), Some(file)))
}

/// The program after its profile (which ended for `reason`): ended if it
/// outlived sampling, and reaped; what it wrote under the live view shown;
/// tachyon's exit status, the program's own.
fn end_program(
    child: &mut std::process::Child,
    tracer: Option<&Follower>,
    reason: Result<StopReason>,
    program_errors: Option<std::fs::File>,
) -> Result<ExitCode> {
    let target_exited = matches!(reason, Ok(StopReason::TargetExited));
    let (status, ended_by_us) =
        launch::end(child, tracer, target_exited).context("waiting for the profiled program")?;
    if let Some(file) = program_errors {
        show_program_errors(file);
    }
    if !ended_by_us {
        say_if_killed(status);
    }
    let reason = reason?;
    // The duration was over (or the user quit the live view) and tachyon
    // ended the program: a complete profile, a success (as the reference).
    let complete = reason == StopReason::Duration || user_quit();
    Ok(ExitCode::from(session::exit_code(
        status,
        ended_by_us,
        complete,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_tells_how_it_ended() {
        let tail = |state: &str, code: i32| {
            let mut f = vec![state.to_string()];
            f.extend((4..52).map(|_| "0".to_string()));
            f.push(code.to_string());
            format!("42 (a) b) {}", f.join(" "))
        };
        let killed = parse_zombie_status(&tail("Z", 9)).unwrap();
        assert_eq!(describe_status(killed), "killed by SIGKILL");
        let exited = parse_zombie_status(&tail("Z", 3 << 8)).unwrap();
        assert_eq!(describe_status(exited), "exit status 3");
        assert!(parse_zombie_status(&tail("S", 9)).is_none());
        assert!(parse_zombie_status("42 (short) Z 1").is_none());
    }
}
