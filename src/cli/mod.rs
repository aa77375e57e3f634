//! Argument parsing (clap) and the subcommands. Flags follow CPython 3.15's
//! `python -m profiling.sampling`, so its users feel at home.

mod async_aware;
pub(crate) mod diagnose;
mod install;
mod output;
mod profile;
mod replay;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use tachyon::dump::{Dumped, SourceReader, ThreadLocals, Waited};
use tachyon::model::Sample;
use tachyon::process::linux::LinuxProcess;
use tachyon::session::dump::{self as session_dump, Unread};
use tachyon::session::snapshot::{self, Recorder, Snapshot};
use tachyon::unwind::{UnwindOptions, Unwinder};

#[derive(Parser)]
#[command(
    name = "tachyon",
    version,
    about = "A sampling profiler for CPython 3.11 to 3.15 that reads stacks from outside the process",
    after_help = "CPython 3.13+ are read through their own debug offsets table (release and debug builds). 3.11 and 3.12 (x86-64 release builds) are read through layouts tachyon carries, checked on the live process first; they have no \"waiting for GIL\" status.",
    long_about = None
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a Python program and profile it from its first line
    Run(profile::RunArgs),
    /// Profile a running Python process
    Attach(profile::AttachArgs),
    /// Print the current stack of a running Python process (or of a core
    /// file), like a traceback
    #[command(
        after_help = "Examples:\n  tachyon dump -a PID            every thread's stack\n  tachyon dump -l PID            with each frame's arguments and locals\n  tachyon dump -s PID            and every Python process below it\n  tachyon dump --json PID | jq   one JSON document (docs/formats.md)\n  tachyon dump -a --core CORE    a core file's threads (gcore, a crash)"
    )]
    Dump(DumpArgs),
    /// Replay a binary profile and convert it to another format
    Replay(replay::ReplayArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    Completions(install::CompletionsArgs),
    /// Print the manual page (roff), e.g. `tachyon man > ~/.local/share/man/man1/tachyon.1`
    Man,
}

#[derive(Args)]
struct DumpArgs {
    #[command(flatten)]
    source: DumpSource,
    /// With --core: the process's executable, when it is not where the
    /// core names it (default: the path in the core's file notes, under
    /// --sysroot)
    #[arg(long, value_name = "PATH", requires = "core")]
    exe: Option<std::path::PathBuf>,
    /// With --core: the directory holding the files of the machine (or
    /// container) the core was made on: its libpython, its sources
    #[arg(long, value_name = "DIR", requires = "core")]
    sysroot: Option<std::path::PathBuf>,
    /// Dump all threads (default: the main thread only)
    #[arg(short = 'a', long)]
    all_threads: bool,
    /// Show <native> where C code called back into Python
    #[arg(long)]
    native: bool,
    /// Show the real C, C++ and Rust frames between the Python frames,
    /// marked [native] (like py-spy's --native); =all keeps every native
    /// frame. Stops the threads while reading, as --blocking does
    #[arg(long, value_enum, value_name = "WHICH", num_args = 0..=1, require_equals = true, default_missing_value = "useful", conflicts_with_all = ["async_aware"])]
    native_frames: Option<profile::NativeFramesArg>,
    /// Do not show <GC> while the garbage collector runs
    #[arg(long)]
    no_gc: bool,
    /// Stop the process's threads while reading, for a consistent snapshot
    #[arg(long)]
    blocking: bool,
    /// Enable async-aware stack reconstruction: one stack per asyncio task,
    /// through the tasks awaiting it (Python 3.14+)
    #[arg(long)]
    async_aware: bool,
    /// Async stack mode: "running" (only the running task) or "all" (all
    /// tasks, including waiting ones; the default). Requires --async-aware
    #[arg(long, value_enum, value_name = "MODE", requires = "async_aware")]
    async_mode: Option<async_aware::AsyncModeArg>,
    /// Show the bytecode instruction each frame is at (specialised forms
    /// with their base: LOAD_ATTR_INSTANCE_VALUE (LOAD_ATTR))
    #[arg(long)]
    opcodes: bool,
    /// Also save the memory the samples read to FILE (zstd), for offline
    /// unwinding, tests and benchmarks
    #[arg(long, value_name = "FILE")]
    snapshot: Option<std::path::PathBuf>,
    /// Print one JSON document instead of text (its shape: docs/formats.md)
    #[arg(long)]
    json: bool,
    /// Show each frame's arguments and local variables (read from memory:
    /// no code runs in the target)
    #[arg(short = 'l', long)]
    locals: bool,
    /// Also dump every Python process below PID (a server's workers, a
    /// pool's children), parents first
    #[arg(short = 's', long, conflicts_with = "snapshot")]
    subprocesses: bool,
}

/// What `dump` reads: a live process, as `PID` or `--pid PID`, or a core
/// file.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
struct DumpSource {
    /// Process ID of the Python interpreter (or --pid PID, as py-spy takes it)
    #[arg(value_name = "PID")]
    pid: Option<i32>,
    /// Process ID of the Python interpreter, given as an option (py-spy's
    /// spelling; the same as PID)
    #[arg(long = "pid", value_name = "PID")]
    pid_option: Option<i32>,
    /// Read an ELF core file (from gcore, or a crash) instead of a live
    /// process: the stacks the process had when the core was made
    #[arg(
        long,
        value_name = "CORE",
        conflicts_with_all = ["blocking", "subprocesses", "snapshot", "async_aware"]
    )]
    core: Option<std::path::PathBuf>,
}

/// The process to read: `PID`, or `--pid PID` as py-spy's users type it.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub(crate) struct PidArg {
    /// Process ID of the Python interpreter (or --pid PID, as py-spy takes it)
    #[arg(value_name = "PID")]
    pid: Option<i32>,
    /// Process ID of the Python interpreter, given as an option (py-spy's
    /// spelling; the same as PID)
    #[arg(long = "pid", value_name = "PID")]
    pid_option: Option<i32>,
}

impl PidArg {
    pub(crate) fn get(&self) -> i32 {
        // clap's group makes exactly one of the two present.
        self.pid.or(self.pid_option).unwrap_or(0)
    }
}

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => profile::run(a),
        Command::Attach(a) => profile::attach(a),
        Command::Dump(a) => dump(a),
        Command::Replay(a) => replay::replay(a),
        Command::Completions(a) => install::completions(a),
        Command::Man => install::man(),
    }
}

fn dump(a: DumpArgs) -> Result<ExitCode> {
    if let Some(core) = &a.source.core {
        tachyon::out!("{}", dump_core(&a, core)?);
        return Ok(ExitCode::SUCCESS);
    }
    let pid = process_id(a.source.pid.or(a.source.pid_option).unwrap_or(0));
    if !a.subprocesses {
        tachyon::out!("{}", dump_one(&a, pid)?);
        return Ok(ExitCode::SUCCESS);
    }
    // The process asked for must be Python; below it, the processes that
    // are not (a shell, a helper) are passed over, and named at the end.
    let mut skipped = Vec::new();
    for (i, p) in tachyon::process::tree::descendants_and_self(pid)
        .into_iter()
        .enumerate()
    {
        match dump_one(&a, p) {
            Ok(text) if a.json => tachyon::out!("{text}"),
            Ok(text) => {
                let sep = if i > 0 { "\n" } else { "" };
                let command = tachyon::session::command_line(p as u32).unwrap_or_default();
                tachyon::out!("{sep}Process {p}: {command}\n{text}");
            }
            Err(e) if i == 0 => return Err(e),
            Err(_) => skipped.push(p.to_string()),
        }
    }
    if !skipped.is_empty() {
        tachyon::errln!(
            "tachyon: not dumped (not Python, gone, or not readable): {}",
            skipped.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What every dump reads, from the flags.
fn unwind_options(a: &DumpArgs) -> UnwindOptions {
    let native_frames = a.native_frames.is_some();
    UnwindOptions {
        all_threads: a.all_threads,
        // Native frames are merged at the eval loop's entries, which the
        // walk marks; the collector shows as its own C frames then.
        native: a.native || native_frames,
        gc: !a.no_gc && !native_frames,
        cpu_status: true,
        opcodes: a.opcodes,
        frame_cache: false,
    }
}

/// The dump of one process, as text or JSON.
fn dump_one(a: &DumpArgs, pid: i32) -> Result<String> {
    // With --snapshot, every range the samples read is kept.
    let asyncio = a.async_aware.then(|| {
        a.async_mode
            .unwrap_or(async_aware::AsyncModeArg::All)
            .into()
    });
    let mut unwinder = session_dump::open(pid, unwind_options(a), asyncio, a.snapshot.is_some())
        .map_err(async_aware::open_error)?;
    if a.locals {
        unwinder.keep_frame_places();
    }
    if a.native_frames.is_some() {
        unwinder.keep_entry_frames();
    }
    let mut sample = Sample::default();
    let (before, locals) = read_dump(a, &mut unwinder, &mut sample)?;
    session_dump::restore_cpu_states(&mut sample, &before);
    let mut src = SourceReader::new(pid);
    Ok(render(a, &unwinder, &sample, locals.as_ref(), &mut src))
}

/// `dump --core`: the dump of the process a core file holds.
fn dump_core(a: &DumpArgs, path: &std::path::Path) -> Result<String> {
    let core = tachyon::process::corefile::CoreFile::open(path)?
        .with_sysroot(a.sysroot.clone())
        .with_exe(a.exe.clone());
    let mut unwinder = session_dump::open_core(core, unwind_options(a))?;
    if a.locals {
        unwinder.keep_frame_places();
    }
    if a.native_frames.is_some() {
        unwinder.keep_entry_frames();
    }
    let mut sample = Sample::default();
    match session_dump::read_consistent(&mut unwinder, &mut sample) {
        Ok(()) => {}
        Err(Unread::Fatal(e) | Unread::Torn(e)) => {
            // gdb leaves out, as zeros, the memory it could not read.
            let hint = match a.all_threads {
                true => {
                    " (a core that gdb wrote with \"Memory read failed\" warnings lacks those threads' stacks: without -a, the main thread is read)"
                }
                false => "",
            };
            return Err(e).context(format!(
                "the core file {} holds no whole stack of process {}{hint}",
                path.display(),
                unwinder.pid()
            ));
        }
    }
    let mut locals = a.locals.then(|| read_locals(&unwinder, &sample));
    if let Some(keep) = a.native_frames {
        // The walk reads the core through its own handle.
        let core = tachyon::process::corefile::CoreFile::open(path)?
            .with_sysroot(a.sysroot.clone())
            .with_exe(a.exe.clone());
        add_native_frames(
            a,
            core,
            &mut unwinder,
            &mut sample,
            keep.into(),
            locals.as_mut(),
        );
    }
    let mut src = SourceReader::under(a.sysroot.clone());
    Ok(render(a, &unwinder, &sample, locals.as_ref(), &mut src))
}

/// The text (or JSON) of one dump read into `sample`.
fn render<M: tachyon::process::ProcessMemory>(
    a: &DumpArgs,
    unwinder: &Unwinder<M>,
    sample: &Sample,
    locals: Option<&Locals>,
    src: &mut SourceReader,
) -> String {
    let ops = a
        .opcodes
        .then(|| opcode_table(unwinder.offsets().version))
        .flatten();
    let o = unwinder.offsets();
    let d = Dumped {
        pid: unwinder.pid(),
        python: format!("{}{}", o.version, if o.free_threaded { "t" } else { "" }),
        free_threaded_gil: o.free_threaded.then(|| unwinder.has_gil().ok()),
        threads: &sample.threads,
        table: unwinder.frames(),
        leaves: unwinder.task_leaves(),
        locals: locals.map(|l| l.0.as_slice()),
        waits: locals.map(|l| l.1.as_slice()),
    };
    let text = if a.json {
        tachyon::dump::json::format_json(&d, src, ops)
    } else {
        tachyon::dump::format_text(&d, src, ops)
    };
    say_why_no_names(unwinder.names_unavailable(1));
    text
}

/// One consistent sample, with `--blocking` while the threads are
/// stopped, and what is read with it then (locals, the snapshot); the
/// threads' CPU states from before they were stopped.
type DumpRead = (Vec<(u64, Option<char>)>, Option<Locals>);

/// `--locals`: per stack, its frames' locals and the lock it waits for.
type Locals = (Vec<ThreadLocals>, Vec<Option<Waited>>);

/// `--locals`: what the dump read into `sample` holds besides its stacks.
fn read_locals<M: tachyon::process::ProcessMemory>(
    unwinder: &Unwinder<M>,
    sample: &Sample,
) -> Locals {
    (
        session_dump::read_locals(unwinder, sample),
        session_dump::read_lock_waits(unwinder, sample),
    )
}

fn read_dump(
    a: &DumpArgs,
    unwinder: &mut Unwinder<Recorder<LinuxProcess>>,
    sample: &mut Sample,
) -> Result<DumpRead> {
    let mut before = Vec::new();
    let _stopped = if a.blocking || a.native_frames.is_some() {
        let (stopped, states) = session_dump::stop(unwinder.memory().inner())?;
        before = states;
        Some(stopped)
    } else {
        None
    };
    match session_dump::read_consistent(unwinder, sample) {
        Ok(()) => {}
        Err(Unread::Fatal(e)) => return Err(e.into()),
        Err(Unread::Torn(e)) => {
            return Err(e).context(format!(
                "could not read a consistent stack of process {}",
                unwinder.pid()
            ));
        }
    }
    let mut locals = a.locals.then(|| read_locals(unwinder, sample));
    if let Some(keep) = a.native_frames {
        let proc = LinuxProcess::open(unwinder.pid())?;
        add_native_frames(a, proc, unwinder, sample, keep.into(), locals.as_mut());
    }
    if let Some(path) = &a.snapshot {
        save_snapshot(unwinder, path)?;
    }
    Ok((before, locals))
}

/// `dump --native-frames`: merge each stopped thread's native frames
/// (read from `proc`: the stopped process, or the core) into its stack,
/// and move the locals and lock waits read for its Python frames with
/// them. A thread whose native stack does not match keeps its Python stack
/// alone, and the dump says why.
fn add_native_frames<T, M>(
    a: &DumpArgs,
    proc: T,
    unwinder: &mut Unwinder<M>,
    sample: &mut Sample,
    keep: tachyon::native::Keep,
    mut locals: Option<&mut Locals>,
) where
    T: tachyon::process::Target + tachyon::native::stack::ThreadRegisters,
    M: tachyon::process::ProcessMemory,
{
    let mut native = tachyon::native::NativeStacks::new(proc, keep);
    let (table, entries) = unwinder.table_and_entries();
    let boundary = table.synthetic(tachyon::model::FrameKind::Native, "<native>");
    let mut scratch = (Vec::new(), Vec::new());
    for (i, t) in sample.threads.iter_mut().enumerate() {
        let e = entries.get(i).map_or(&[][..], Vec::as_slice);
        let moved = match native.complete_thread(t, table, e) {
            Ok(()) => native.moved(),
            Err(err) => {
                tachyon::errln!(
                    "tachyon: thread {} is shown without native frames: {err}",
                    t.tid
                );
                let (out, moved) = &mut scratch;
                let keep_markers = a.native;
                if !keep_markers {
                    tachyon::native::merge::without_boundaries(&t.frames, boundary, out, moved);
                    std::mem::swap(&mut t.frames, out);
                } else {
                    *moved = (0..t.frames.len()).map(Some).collect();
                }
                &scratch.1
            }
        };
        if let Some((frame_locals, waits)) = locals.as_deref_mut() {
            if let Some(l) = frame_locals.get_mut(i) {
                *l = l
                    .drain()
                    .filter_map(|(k, v)| Some((moved.get(k).copied().flatten()?, v)))
                    .collect();
            }
            if let Some(Some(w)) = waits.get_mut(i)
                && let Some(Some(to)) = moved.get(w.frame)
            {
                w.frame = *to;
            }
        }
    }
}

/// The opcode names of a target of `version`.
pub(crate) fn opcode_table(
    version: tachyon::offsets::PyVersion,
) -> Option<&'static tachyon::opcodes::OpTable> {
    tachyon::opcodes::table(version.major as u32, version.minor as u32)
}

/// `dump --snapshot`: record a few more samples, cold and warm, main
/// thread and all threads, then write what was read.
fn save_snapshot(
    unwinder: &Unwinder<Recorder<LinuxProcess>>,
    path: &std::path::Path,
) -> Result<()> {
    let rec = unwinder.memory();
    let (pid, rt) = (unwinder.pid(), unwinder.runtime());
    snapshot::record_passes(rec, pid, rt, 3);
    let table = Snapshot::table_source(rec.inner(), rt)?;
    let snap = Snapshot::from_recorder(rec, pid, rt, table)?;
    snap.write(path)?;
    let (ranges, bytes) = snap.size();
    tachyon::errln!(
        "tachyon: saved a snapshot of {bytes} bytes in {ranges} ranges to {}",
        path.display()
    );
    Ok(())
}

/// The process to read for a PID argument: a thread id (what `top -H` or a
/// log shows) stands for its process; say so on stderr.
pub(crate) fn process_id(pid: i32) -> i32 {
    match tachyon::process::linux::process_of_thread(pid) {
        Some(process) => {
            tachyon::errln!(
                "tachyon: {pid} is a thread of process {process}; reading process {process}"
            );
            process
        }
        None => pid,
    }
}

/// Exit as clap does for a usage error of subcommand `sub`: the message,
/// the subcommand's usage line, exit code 2.
pub(crate) fn usage_error(sub: &str, msg: &str) -> ! {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    let mut sub_cmd = cmd
        .find_subcommand(sub)
        .cloned()
        .unwrap_or_else(Cli::command);
    sub_cmd
        .error(clap::error::ErrorKind::ArgumentConflict, msg)
        .exit()
}

/// `tachyon run --flamgraph app.py`: an option tachyon does not know,
/// before the script. The script's own options come after it, so this is
/// a typo of ours: report it as clap would, with its suggestion, instead
/// of taking it for the script's name.
/// `tip`, when given, replaces clap's own tip.
pub(crate) fn unknown_option(sub: &str, token: &std::ffi::OsStr, tip: Option<&str>) -> ! {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    if let Some(sub_cmd) = cmd.find_subcommand(sub) {
        let strict = sub_cmd
            .clone()
            .mut_arg("target", |a| a.allow_hyphen_values(false));
        if let Err(e) = strict.try_get_matches_from([std::ffi::OsStr::new(sub), token]) {
            // clap's tip to pass the option "as a value" after `--` would
            // make it a command here: leave it out.
            let text = e.render().to_string();
            let mut kept: Vec<String> = text
                .lines()
                .filter(|l| !l.contains("as a value, use '--"))
                .map(str::to_owned)
                .collect();
            if let Some(tip) = tip {
                kept.retain(|l| !l.trim_start().starts_with("tip:"));
                let at = kept.iter().position(|l| l.is_empty()).map_or(1, |i| i + 1);
                kept.insert(at.min(kept.len()), format!("  tip: {tip}"));
            }
            tachyon::errln!("{}", kept.join("\n"));
            std::process::exit(2)
        }
    }
    usage_error(
        sub,
        &format!("unexpected argument '{}'", token.to_string_lossy()),
    )
}

/// Thread names fell back to the kernel's `comm` because the target's
/// `threading` could not be read: say so, once, with the reason, since the
/// names shown are then cut to 15 characters.
fn say_why_no_names(why: Option<&str>) {
    if let Some(why) = why {
        tachyon::errln!(
            "tachyon: note: thread names are the kernel's (at most 15 characters): the target's threading module could not be read ({why})"
        );
    }
}
