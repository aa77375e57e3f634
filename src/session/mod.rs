//! A profiling session: what `run`, `attach`, `dump` and `replay`
//! configure and the command line only starts, and the ways into a Python
//! process they share: [`probe`] (is this process Python yet?), [`open`]
//! (a ready unwinder), [`verify`] (a carried layout checked), [`launch`]
//! (start a program so that no sample of it is lost), [`follow`] (trace
//! the processes of `run --subprocesses` as they are created), [`dump`]
//! (one consistent read) and [`snapshot`] (a process's memory on disk).
//! This file is the profiler itself; `children` watches for and profiles
//! the children, `replay` feeds a recording to the collectors.
//!
//! A [`Profiler`] is built from a [`ProfileConfig`], the plain value the
//! command line makes of its options, and the [`Outputs`] it implements.
//! It owns the processes of one profile: the main process, the
//! next Python process of a command when the main one exits (`run --
//! COMMAND`, found by [`launch::next_python`]), and with `--subprocesses`
//! every Python process that appears below it, each sampled on its own
//! thread into its own collector (the reference's one profile per child,
//! made by [`Outputs::child`]), or with `--merge` each through a
//! [`merge::Front`] into the main profile (the main process's samples
//! too, and the collector on a thread of its own). It sums the statistics of a profile
//! that went through several processes, and it ends every child's profile
//! cleanly when the session ends. [`replay`] feeds a recording through the
//! same collectors, without the reference's launcher frames, and
//! [`exit_code`] maps how the program ended to tachyon's exit status.

mod children;
pub mod dump;
pub mod follow;
pub mod launch;
pub mod open;
pub mod probe;
mod replay;
pub mod snapshot;
pub mod verify;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::collect::Collector;
use crate::collect::merge::{self, Feed};
use crate::collect::tee::Tee;
use crate::error::Result;
use crate::model::{FrameTable, RunStats};
use crate::process::linux::{ExitWatch, LinuxProcess};
use crate::process::ptrace::StoppedThreads;
use crate::process::tree;
use crate::runtime::Runtime;
use crate::sample::{self, SampleConfig, StopReason};
use crate::unwind::Unwinder;
use children::{claim, mark, watch};
use follow::Follower;
use open::{Opening, error_chain};
pub use replay::replay;

/// Locate and validate the runtime of `proc`: [`crate::runtime::locate`]
/// with a layout not proven on a real interpreter checked by
/// [`verify::layout`].
pub fn locate(proc: &LinuxProcess) -> Result<Runtime> {
    crate::runtime::locate(proc, &verify::layout)
}

/// Check a runtime's layout against the live process, as [`locate`] does
/// before trusting one carried for 3.11/3.12 or a free-threaded 3.14+
/// table: `Ok`, or [`crate::Error::LayoutMismatch`] for a process that
/// does not fit.
pub fn check_layout(proc: &LinuxProcess, rt: &Runtime) -> Result<()> {
    verify::layout(proc, rt)
}

/// [`check_layout`]'s check of a free-threaded 3.14+ table, applied to any
/// 3.13+ runtime: every frame of a sample of every thread sits on an
/// instruction of its bytecode and has a line (see
/// [`verify::bytecode_copies`]).
pub fn check_bytecode(proc: &LinuxProcess, rt: &Runtime) -> Result<()> {
    verify::bytecode_copies(proc, rt)
}

/// A profile as `run` and `attach` configure it: plain values, no
/// parser's types, from which a [`Profiler`] is built.
#[derive(Debug, Clone)]
pub struct ProfileConfig {
    /// The schedule (rate, duration), the mode, the realtime statistics.
    pub sample: SampleConfig,
    /// Whether the target is stopped for each sample, and what is read
    /// while it is.
    pub stopping: Stopping,
    /// How every process of the profile is opened: the first by the
    /// caller, every one followed after it (the next one, the children)
    /// by the session.
    pub opening: Opening,
    /// `--subprocesses`: profile every Python process that appears below
    /// the main one.
    pub children: Option<ChildrenConfig>,
    /// `run -- COMMAND`: the command's root process. When the main process
    /// exits, the profile goes on into the command's next Python process
    /// ([`launch::next_python`]), while the root runs; with `children`,
    /// they are looked for below the root rather than below the main
    /// process, so every Python process of the command (the main one, the
    /// first, and the rest) has its own profile.
    pub command_root: Option<i32>,
}

/// Whether the target is stopped for each sample, and what is read while
/// it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stopping {
    /// Stop the target's threads during each sample (`--blocking`).
    pub blocking: bool,
    /// `--native-frames`: read each thread's native frames while it is
    /// stopped (so the threads are stopped, with or without `blocking`).
    pub native_frames: Option<crate::native::Keep>,
}

impl Stopping {
    /// The threads are stopped for each sample.
    pub fn stops(&self) -> bool {
        self.blocking || self.native_frames.is_some()
    }
}

/// Run the sampling loop on `unwinder`'s process, stopping its threads
/// for each sample as `stopping` says.
pub(crate) fn run_loop(
    unwinder: &mut Unwinder<LinuxProcess>,
    collector: &mut dyn Collector,
    cfg: &SampleConfig,
    alive: &dyn Fn() -> bool,
    stopping: Stopping,
) -> Result<(RunStats, StopReason)> {
    let pid = unwinder.pid();
    let stopper = LinuxProcess::open(pid)?;
    let pause =
        || -> Result<Box<dyn std::any::Any>> { Ok(Box::new(StoppedThreads::stop(&stopper)?)) };
    let mut native = match stopping.native_frames {
        Some(keep) => {
            unwinder.keep_entry_frames();
            Some(crate::native::NativeStacks::new(
                LinuxProcess::open(pid)?,
                keep,
            ))
        }
        None => None,
    };
    let blocking = stopping.stops().then(|| sample::Blocking {
        pause: &pause,
        also: native.as_mut().map(|n| n as &mut dyn sample::WhileStopped),
    });
    Ok(sample::run(unwinder, collector, cfg, alive, blocking))
}

/// `--subprocesses`: how children are profiled.
#[derive(Debug, Clone, Copy)]
pub struct ChildrenConfig {
    /// The most child profiles at once ([`MAX_CHILDREN`], the reference's).
    pub max: usize,
    /// `--merge`: every process in the main profile (see
    /// [`Profiler::profile`]), not each child in its own.
    pub merge: bool,
}

/// The outputs a profile writes, as the command line makes them.
pub trait Outputs: Sync {
    /// The collector of child `pid`'s own profile (its own file), running
    /// `rt`: called on the child's sampling thread. The error is shown to
    /// the user as it is.
    fn child(&self, pid: i32, rt: &Runtime) -> std::result::Result<Box<dyn Collector>, String>;
}

/// The reference's bound on child profiles at once.
pub const MAX_CHILDREN: usize = 100;

/// How often the descendants are looked for when no tracer reports new
/// processes (`attach`, `--blocking`, ptrace refused). The reference polls
/// every 100 ms; a pool worker or a forked request handler can live less.
pub const SCAN_EVERY: Duration = Duration::from_millis(5);

/// How often the descendants are scanned when a tracer reports every new
/// process as it starts: only a safety net then.
pub const SAFETY_SCAN_EVERY: Duration = Duration::from_millis(100);

/// How long child profiles may go on after the main process exited (the
/// reference waits as long for its child profilers), before they are ended.
pub const CHILDREN_GRACE: Duration = Duration::from_secs(30);

/// How long a child that exec'd something python-like has to map its
/// runtime (a shared build loading `libpython`) before it is let go. On a
/// loaded machine finding a 3.11/3.12 runtime alone can take a second.
const EXEC_GRACE: Duration = Duration::from_secs(10);

/// `--subprocesses`: the children's configuration, with what the session
/// was given to profile them.
struct Children<'a> {
    outputs: &'a dyn Outputs,
    max: usize,
    root: Option<i32>,
    /// The tracer of the program's processes (`run`), which reports each
    /// new one as it starts; without one, `/proc` is scanned often.
    tracer: Option<&'a Follower>,
}

/// How one child's profile went.
#[derive(Debug)]
pub struct ChildReport {
    pub pid: i32,
    pub stats: RunStats,
    pub reason: StopReason,
    /// Samples taken (attempts less failures).
    pub samples: u64,
    /// What went wrong with this child's profile (nothing written), if
    /// anything did.
    pub error: Option<String>,
    /// It turned out to be no Python process of its own (a fork that
    /// exec'd another program at once): nothing written, nothing to say.
    pub not_python: bool,
}

/// How a session ended.
pub struct Outcome {
    /// The whole profile's statistics (over every process followed).
    pub stats: RunStats,
    pub reason: StopReason,
    /// The last process's unwinder: its frame table holds every frame the
    /// main profile's samples name.
    pub unwinder: Unwinder<LinuxProcess>,
    /// The children profiled, in the order they were found.
    pub children: Vec<ChildReport>,
    /// `--merge`: the one table of every process's frames, which the
    /// merged profile's samples name (in place of the unwinder's).
    pub merged: Option<FrameTable>,
}

impl Outcome {
    /// The frame table the main profile's samples name: the one to finish
    /// its collectors with.
    pub fn frames(&self) -> &FrameTable {
        self.merged
            .as_ref()
            .unwrap_or_else(|| self.unwinder.frames())
    }
}

/// A profiling session; see the module documentation.
pub struct Profiler<'a> {
    config: ProfileConfig,
    children: Option<Children<'a>>,
}

/// What the children's watcher and the main loop share.
struct Shared {
    /// The main process being profiled now (children are looked for below it).
    main: AtomicI32,
    /// The main profile is over: look for no more children.
    done: AtomicBool,
    /// End every child's profile now.
    cancel: Arc<AtomicBool>,
    /// Children's profiles running.
    active: AtomicUsize,
    /// New processes being looked at.
    probing: AtomicUsize,
    /// Every descendant looked at: `None` while its profile runs, else what
    /// it ran when last found not to be profiled (looked at again once that
    /// changes, e.g. after an exec).
    known: Mutex<HashMap<i32, Option<String>>>,
    reports: Mutex<Vec<ChildReport>>,
    /// The runtime of every Python process profiled, with what it ran
    /// then: a fork that still runs the same has the same runtime at the
    /// same address, and is profiled at once, without looking for it.
    runtimes: Mutex<HashMap<i32, (String, Runtime)>>,
    /// Runtimes the tracer found at the exec of a child whose profile
    /// runs, for that profile to take (the tracer holds the child until
    /// it does), with the image they belong to.
    exec_found: Mutex<HashMap<i32, (String, Runtime)>>,
    started: Instant,
    /// `--merge`: every child's samples go through a front of this feed
    /// into the main profile, not into a collector of its own.
    merge: Option<Feed>,
    /// How each child is opened.
    opening: Opening,
}

impl Shared {
    fn remember_runtime(&self, pid: i32, rt: &Runtime) {
        if let Some(image) = tree::image(pid) {
            self.remember_runtime_of(pid, &image, rt);
        }
    }

    /// `rt` is the runtime of `pid` while it runs `image` (as found
    /// together: an image read later may be another program's already).
    fn remember_runtime_of(&self, pid: i32, image: &str, rt: &Runtime) {
        if let Ok(mut m) = self.runtimes.lock() {
            m.insert(pid, (image.to_string(), rt.clone()));
        }
    }

    /// Take the runtime the tracer found for `pid` at its exec into
    /// `image`, offered to its running profile.
    fn take_exec_runtime(&self, pid: i32, image: &str) -> Option<Runtime> {
        let mut m = self.exec_found.lock().ok()?;
        if m.get(&pid)?.0 != image {
            return None;
        }
        m.remove(&pid).map(|(_, rt)| rt)
    }

    /// The runtime `pid` inherited from its parent, if it is a fork of a
    /// profiled Python process that has not exec'd.
    fn inherited_runtime(&self, parent: Option<i32>, image: &str) -> Option<Runtime> {
        let m = self.runtimes.lock().ok()?;
        let (parent_image, rt) = m.get(&parent?)?;
        (parent_image == image).then(|| rt.clone())
    }
}

impl<'a> Profiler<'a> {
    /// The session `config` describes, writing its children's profiles
    /// into `outputs`' collectors. `tracer`: the tracer of the program's
    /// processes (`run --subprocesses`), which reports each new one as it
    /// starts; without one, `/proc` is scanned often.
    pub fn new(
        config: ProfileConfig,
        outputs: &'a dyn Outputs,
        tracer: Option<&'a Follower>,
    ) -> Self {
        let children = config.children.map(|c| Children {
            outputs,
            max: c.max,
            root: config.command_root,
            tracer,
        });
        Profiler { config, children }
    }

    /// Sample `first` (and the processes after it) into `sinks` until the
    /// duration is over, the last process exits, or a signal; the children
    /// are sampled meanwhile. Returns once every child's profile is over
    /// and written. `sinks` are told of each change of process; finishing
    /// them (with [`Outcome::frames`]) is the caller's. With `--merge`,
    /// every process is in the one profile (`profile_merged`).
    pub fn profile(
        &self,
        first: Unwinder<LinuxProcess>,
        sinks: Vec<&mut dyn Collector>,
    ) -> Result<Outcome> {
        if self.config.children.is_some_and(|c| c.merge) {
            return self.profile_merged(first, &mut Tee(sinks));
        }
        self.profile_with(first, sinks, None)
    }

    /// [`Profiler::profile`] into one profile of every process
    /// (`--subprocesses --merge`): the main process's samples and every
    /// child's reach `sink` on a thread of its own, each sample with its
    /// process's pid, their frames in one table (the outcome's `merged`,
    /// to finish `sink` with). The outcome's statistics are every
    /// process's together.
    fn profile_merged(
        &self,
        first: Unwinder<LinuxProcess>,
        sink: &mut dyn Collector,
    ) -> Result<Outcome> {
        let (feed, merger) = merge::channel_with(command_line);
        let Some(mut front) = feed.front(first.pid() as u32, Duration::ZERO) else {
            unreachable!("a feed is open until closed");
        };
        std::thread::scope(|scope| {
            let merged = scope.spawn(move || merger.run(sink));
            let outcome = self.profile_with(first, vec![&mut front], Some(feed.clone()));
            // Every child's profile is over: no more fronts, and the
            // merger ends once the main one is finished and gone.
            feed.close();
            if let Ok(o) = &outcome {
                let _ = front.finish(o.unwinder.frames(), &o.stats);
            }
            drop(front);
            let table = merged
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            let mut outcome = outcome?;
            outcome.stats = merged_stats(&outcome.stats, &outcome.children);
            outcome.merged = Some(table);
            Ok(outcome)
        })
    }

    fn profile_with(
        &self,
        first: Unwinder<LinuxProcess>,
        sinks: Vec<&mut dyn Collector>,
        merge: Option<Feed>,
    ) -> Result<Outcome> {
        let shared = Shared {
            main: AtomicI32::new(first.pid()),
            done: AtomicBool::new(false),
            cancel: Arc::new(AtomicBool::new(false)),
            active: AtomicUsize::new(0),
            probing: AtomicUsize::new(0),
            known: Mutex::new(HashMap::new()),
            reports: Mutex::new(Vec::new()),
            runtimes: Mutex::new(HashMap::new()),
            exec_found: Mutex::new(HashMap::new()),
            started: Instant::now(),
            merge,
            opening: self.config.opening,
        };
        if self.children.is_some() {
            shared.remember_runtime(first.pid(), first.runtime());
            // The main process is no child of its own.
            mark(&shared, first.pid(), None);
        }
        let mut sink = Tee(sinks);
        let main = std::thread::scope(|scope| {
            if let Some(children) = &self.children {
                let (shared, config, stopping) =
                    (&shared, &self.config.sample, self.config.stopping);
                scope.spawn(move || watch(scope, children, shared, config, stopping));
            }
            let main = self.follow_main(first, &mut sink, &shared);
            shared.done.store(true, Ordering::SeqCst);
            self.end_children(&shared, main.as_ref().map(|m| m.1).ok());
            main
        });
        let (stats, reason, unwinder) = main?;
        let children = shared.reports.into_inner().unwrap_or_default();
        Ok(Outcome {
            stats,
            reason,
            unwinder,
            children,
            merged: None,
        })
    }

    /// The main profile: one process, then the next the command starts.
    fn follow_main(
        &self,
        first: Unwinder<LinuxProcess>,
        sink: &mut Tee<'_>,
        shared: &Shared,
    ) -> Result<(RunStats, StopReason, Unwinder<LinuxProcess>)> {
        let command = self
            .config
            .command_root
            .map(|root| (root, ExitWatch::new(root)));
        let mut unwinder = first;
        let mut seen = vec![unwinder.pid()];
        let mut total = RunStats::default();
        let reason = loop {
            let (stats, reason) = self.sample_main(&mut unwinder, sink, shared)?;
            add_stats(&mut total, &stats);
            let following = match (reason, &command) {
                (StopReason::TargetExited, Some((root, root_watch))) => {
                    let not = not_next(&seen, shared);
                    launch::next_python(*root, &not, &|| root_watch.alive())
                }
                _ => None,
            };
            let Some((pid, rt)) = following else {
                break reason;
            };
            // The watcher may have found it meanwhile: then it is a child's
            // profile, and this one is over.
            if self.children.is_some() && !claim(shared, pid) {
                break reason;
            }
            // A fork the tracer holds for the watcher's profile is this
            // one's now: let it run.
            if let Some(tracer) = self.children.as_ref().and_then(|c| c.tracer) {
                tracer.release(pid);
            }
            crate::errln!(
                "tachyon: process {} exited; following Python process {pid}",
                seen[seen.len() - 1]
            );
            seen.push(pid);
            if self.children.is_some() {
                shared.remember_runtime(pid, &rt);
            }
            shared.main.store(pid, Ordering::SeqCst);
            sink.target_changed(pid);
            sink.target_python(&rt.offsets);
            let opts = unwinder.opts;
            let table = unwinder.into_frames();
            unwinder = Unwinder::with_frames(LinuxProcess::open(pid)?, pid, rt, opts, table);
            if let Err(e) = self.config.opening.ready(&mut unwinder) {
                crate::errln!("tachyon: not following process {pid}: {}", error_chain(&e));
                break StopReason::TargetExited;
            }
        };
        Ok((total, reason, unwinder))
    }

    /// Sample the main process until it exits, or the profile is over.
    fn sample_main(
        &self,
        unwinder: &mut Unwinder<LinuxProcess>,
        sink: &mut Tee<'_>,
        shared: &Shared,
    ) -> Result<(RunStats, StopReason)> {
        let pid = unwinder.pid();
        let cfg = self.remaining(shared.started, None);
        let watch = ExitWatch::new(pid);
        let alive = || watch.alive();
        run_loop(unwinder, sink, &cfg, &alive, self.config.stopping)
    }

    /// This session's sampling configuration for a profile starting now:
    /// what is left of the duration, and `cancel` to end it early.
    fn remaining(&self, started: Instant, cancel: Option<Arc<AtomicBool>>) -> SampleConfig {
        remaining(&self.config.sample, started, cancel)
    }

    /// The main profile is over: once the main process exited, its
    /// children may still be working (their results are the point), so
    /// their profiles go on a while; otherwise (duration, signal, error)
    /// they end now.
    fn end_children(&self, shared: &Shared, reason: Option<StopReason>) {
        if self.children.is_none() {
            return;
        }
        if reason == Some(StopReason::TargetExited) {
            let deadline = Instant::now() + CHILDREN_GRACE;
            let mut said = false;
            let busy =
                || shared.active.load(Ordering::SeqCst) + shared.probing.load(Ordering::SeqCst) > 0;
            while busy() && Instant::now() < deadline && !sample::signals::interrupted() {
                if !said {
                    crate::errln!(
                        "tachyon: waiting for {} child process profile(s) to complete...",
                        shared.active.load(Ordering::SeqCst)
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        shared.cancel.store(true, Ordering::SeqCst);
    }
}

/// The processes a command's next Python process cannot be: those the
/// main profile went through (`seen`), the children profiled, and those
/// the watcher is looking at (about to be children): a process is in one
/// profile only.
fn not_next(seen: &[i32], shared: &Shared) -> Vec<i32> {
    let mut not: Vec<i32> = seen.to_vec();
    if let Ok(profiled) = shared.runtimes.lock() {
        not.extend(profiled.keys());
    }
    if let Ok(known) = shared.known.lock() {
        not.extend(known.iter().filter(|(_, s)| s.is_none()).map(|(p, _)| p));
    }
    not
}

fn remaining(
    config: &SampleConfig,
    started: Instant,
    cancel: Option<Arc<AtomicBool>>,
) -> SampleConfig {
    let mut cfg = config.clone();
    if let Some(d) = cfg.duration {
        // Zero when the session's time is up: the loop then stops at once.
        cfg.duration = Some(d.saturating_sub(started.elapsed()));
    }
    if cancel.is_some() {
        cfg.cancel = cancel;
    }
    cfg
}

/// Add one process's statistics to a profile's: samples add up, time adds
/// up, the rate and mode are the session's, and the last part says whether
/// the whole was interrupted.
pub fn add_stats(total: &mut RunStats, part: &RunStats) {
    total.interval_us = part.interval_us;
    total.mode = part.mode;
    total.attempts += part.attempts;
    total.failures += part.failures;
    total.shutdown_samples += part.shutdown_samples;
    total.pooled_thread_samples += part.pooled_thread_samples;
    total.frame_cache.add(&part.frame_cache);
    total.duration_s += part.duration_s;
    total.interrupted = part.interrupted;
}

/// The statistics of a merged profile: every process's samples and
/// failures; the processes ran at once, so its duration is the longest.
fn merged_stats(main: &RunStats, children: &[ChildReport]) -> RunStats {
    let mut total = main.clone();
    total.processes = 1;
    total.process_seconds = main.duration_s;
    for c in children.iter().filter(|c| c.error.is_none()) {
        total.attempts += c.stats.attempts;
        total.failures += c.stats.failures;
        total.shutdown_samples += c.stats.shutdown_samples;
        total.pooled_thread_samples += c.stats.pooled_thread_samples;
        total.duration_s = total.duration_s.max(c.stats.duration_s);
        total.processes += 1;
        total.process_seconds += c.stats.duration_s;
    }
    total
}

/// What a process runs, for a merged profile's sections and `dump
/// --subprocesses`' headings: its command line
/// (the program's base name, then its arguments), else its executable's
/// name; at most [`COMMAND_CHARS`] characters. `None` when it is gone.
pub fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut words = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned());
    let mut line = match words.next() {
        Some(exe) => exe.rsplit('/').next().unwrap_or_default().to_string(),
        None => std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim_end()
            .to_string(),
    };
    for w in words {
        line.push(' ');
        line.push_str(&w);
    }
    let line: String = line.chars().filter(|c| !c.is_control()).collect();
    Some(match line.char_indices().nth(COMMAND_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    })
}

/// The longest command line a merged profile shows for a process.
const COMMAND_CHARS: usize = 80;

/// tachyon's exit status for `run`: the program's own, except that a
/// program tachyon ended because the profile was complete (the duration
/// was over, the user quit the live view) makes a success, as the
/// reference. A program killed by a signal is 128 + the signal, as a shell
/// says.
pub fn exit_code(status: std::process::ExitStatus, ended_by_us: bool, complete: bool) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        _ if ended_by_us && complete => 0,
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    code.clamp(0, 255) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn stats_of_several_processes_add_up() {
        let mut total = RunStats::default();
        let part = RunStats {
            interval_us: 1000,
            duration_s: 1.5,
            attempts: 10,
            failures: 2,
            ..RunStats::default()
        };
        add_stats(&mut total, &part);
        add_stats(
            &mut total,
            &RunStats {
                interrupted: true,
                ..part.clone()
            },
        );
        assert_eq!((total.attempts, total.failures), (20, 4));
        assert!((total.duration_s - 3.0).abs() < 1e-9);
        assert!(total.interrupted);
        assert_eq!(total.interval_us, 1000);
    }

    #[test]
    fn a_process_is_named_by_its_command_line() {
        let me = command_line(std::process::id()).unwrap();
        let exe = std::env::args().next().unwrap();
        assert!(me.starts_with(exe.rsplit('/').next().unwrap()), "{me}");
        assert!(me.chars().count() <= COMMAND_CHARS + 3);
        assert_eq!(command_line(u32::MAX), None);
    }

    #[test]
    fn merged_stats_add_samples_and_keep_the_longest_duration() {
        let part = |attempts, duration_s| RunStats {
            interval_us: 1000,
            attempts,
            failures: 1,
            duration_s,
            ..RunStats::default()
        };
        let child = |stats, error: Option<&str>| ChildReport {
            pid: 1,
            stats,
            reason: StopReason::TargetExited,
            samples: 0,
            error: error.map(Into::into),
            not_python: false,
        };
        let total = merged_stats(
            &part(10, 1.0),
            &[
                child(part(20, 2.0), None),
                child(part(5, 9.0), Some("no samples taken")),
            ],
        );
        assert_eq!((total.attempts, total.failures), (30, 2));
        assert!((total.duration_s - 2.0).abs() < 1e-9);
        // Two processes sampled, for 3 s between them: 10 per second each.
        assert_eq!(total.processes, 2);
        assert!((total.rate() - 10.0).abs() < 1e-9);
        assert_eq!(total.expected(), 3000);
    }

    #[test]
    fn exit_status_maps_like_a_shell() {
        let exited = |c: i32| std::process::ExitStatus::from_raw(c << 8);
        let killed = |s: i32| std::process::ExitStatus::from_raw(s);
        assert_eq!(exit_code(exited(3), false, false), 3);
        assert_eq!(exit_code(killed(9), false, false), 137);
        assert_eq!(exit_code(killed(15), true, true), 0);
        assert_eq!(exit_code(killed(15), true, false), 143);
        assert_eq!(exit_code(exited(0), false, true), 0);
    }

    #[test]
    fn remaining_duration_shrinks_to_zero() {
        let cfg = SampleConfig {
            interval: Duration::from_millis(1),
            duration: Some(Duration::from_millis(1)),
            mode: crate::model::Mode::Wall,
            realtime_stats: false,
            cancel: None,
        };
        let started = Instant::now() - Duration::from_secs(1);
        let flag = Arc::new(AtomicBool::new(false));
        let r = remaining(&cfg, started, Some(flag));
        assert_eq!(r.duration, Some(Duration::ZERO));
        assert!(r.cancel.is_some());
    }
}
