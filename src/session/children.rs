//! The children of a profile (`--subprocesses`): the watcher that finds
//! every new Python process below the main one (from the tracer's
//! reports, or by scanning `/proc`), and each child's profile, on a
//! thread of its own, through its execs.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::follow::{Event, Follower};
use super::probe::{Probe, probe_image};
use super::{
    ChildReport, Children, EXEC_GRACE, SAFETY_SCAN_EVERY, SCAN_EVERY, Shared, Stopping, add_stats,
    error_chain, remaining,
};
use crate::collect::Collector;
use crate::model::RunStats;
use crate::process::linux::LinuxProcess;
use crate::process::tree::{self, ProcessTree};
use crate::runtime::Runtime;
use crate::sample::{self, SampleConfig, StopReason};
use crate::unwind::Unwinder;

/// The children's watcher, until the main profile is over. With a tracer
/// (`run --subprocesses`), each new process and exec is looked at as the
/// tracer reports it, and the descendants are scanned every
/// [`SAFETY_SCAN_EVERY`] as a safety net; without (`attach`, `--blocking`,
/// ptrace refused), they are scanned every [`SCAN_EVERY`]. Each process
/// not seen before (or that exec'd since it was last looked at) is looked
/// at on a thread of its own, which profiles it if it is Python: finding a
/// runtime takes from a few to a few hundred milliseconds (3.11 and 3.12
/// have their layout checked), and the watcher must not wait for it.
pub(super) fn watch<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    children: &'scope Children<'_>,
    shared: &'scope Shared,
    config: &'scope SampleConfig,
    stopping: Stopping,
) {
    let w = Watcher {
        scope,
        children,
        shared,
        config,
        stopping,
    };
    let mut scans = Scans {
        procs: ProcessTree::new(),
        last: None,
        round: 0,
        every: match children.tracer {
            Some(_) => SAFETY_SCAN_EVERY,
            None => SCAN_EVERY,
        },
        next: Instant::now(),
    };
    let mut put_off: Vec<PutOff> = Vec::new();
    while !shared.done.load(Ordering::SeqCst) && !sample::signals::interrupted() {
        if let Some(tracer) = children.tracer {
            w.take_reports(tracer, &mut put_off, scans.next);
            if Instant::now() < scans.next {
                continue;
            }
        } else {
            std::thread::sleep(
                SCAN_EVERY.min(scans.next.saturating_duration_since(Instant::now())),
            );
        }
        scans.next = Instant::now() + scans.every;
        if scans.due(children.tracer.is_some()) {
            w.scan(&mut scans);
        }
    }
    // Forks reported from now on are no children of this session: the
    // tracer holds none for it.
    if let Some(tracer) = children.tracer {
        tracer.stop_holding();
    }
}

/// A process reported by the tracer and put off (too many looked at at
/// once, or not readable yet), with its parent, and what the tracer found
/// at an exec (then it holds the process).
type PutOff = (i32, Option<i32>, Option<HeldExec>);

/// The watcher's scans of the descendants.
struct Scans {
    procs: ProcessTree,
    /// The newest process when the descendants were last scanned.
    last: Option<i32>,
    round: u32,
    every: Duration,
    /// When the next scan is due.
    next: Instant,
}

impl Scans {
    /// Whether to scan now. Without a tracer, and no new process since
    /// the last scan, there is nothing to look at but the execs of
    /// processes found not to be Python, looked for less often.
    fn due(&mut self, traced: bool) -> bool {
        let newest = tree::last_pid();
        self.round = self.round.wrapping_add(1);
        if !traced
            && newest.is_some()
            && newest == self.last
            && !self.round.is_multiple_of(RESCAN_EVERY)
        {
            return false;
        }
        self.last = newest;
        true
    }
}

/// A process the tracer holds at its exec into a Python, with the runtime
/// it found there.
struct HeldExec {
    runtime: Runtime,
    since: Instant,
    /// Offered to the profile of the process already running.
    offered: bool,
}

/// How long the tracer's hold of an exec'd process waits for its running
/// profile to take the new runtime (a profile that does not see the exec
/// goes on as it was).
const HOLD_FOR_PROFILE: Duration = Duration::from_secs(1);

/// What became of a process the watcher considered.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    /// Being profiled now, with the runtime its parent's (a fork).
    Profiling,
    /// Being looked at or profiled already (found by a scan first): the
    /// thread doing it lets a held fork go.
    Busy,
    /// Looked at now, or nothing to look at.
    Done,
    /// To be considered again soon.
    PutOff,
}

/// What the watcher needs to look at a process.
struct Watcher<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    children: &'scope Children<'scope>,
    shared: &'scope Shared,
    config: &'scope SampleConfig,
    stopping: Stopping,
}

impl<'scope, 'env> Watcher<'scope, 'env> {
    /// Wait for the tracer's reports until the next scan is due (or a
    /// little, with processes put off), handle them, and consider the
    /// processes put off again.
    fn take_reports(&self, tracer: &Follower, put_off: &mut Vec<PutOff>, next_scan: Instant) {
        let until_scan = next_scan.saturating_duration_since(Instant::now());
        let mut wait = match put_off.is_empty() {
            true => until_scan,
            false => until_scan.min(SCAN_EVERY),
        };
        while let Some(event) = tracer.next_event(wait) {
            wait = Duration::ZERO;
            self.reported(tracer, event, put_off);
        }
        put_off.retain_mut(|(pid, parent, held)| match held {
            Some(held) => self.held_exec(tracer, *pid, held),
            None => self.consider(*pid, *parent, false, None) == Look::PutOff,
        });
    }

    /// One report of the tracer: a new process is considered now, an
    /// exec'd one once the reports are handled.
    fn reported(&self, tracer: &Follower, event: Event, put_off: &mut Vec<PutOff>) {
        match event {
            // Looked at once it execs (its exec is reported).
            Event::Forked {
                shares_memory: true,
                ..
            } => {}
            Event::Forked {
                pid, parent, held, ..
            } => {
                let look = self.consider(pid, Some(parent), false, None);
                // A held fork waits for its profile to begin; any
                // other outcome lets it go now.
                if held && !matches!(look, Look::Profiling | Look::Busy) {
                    tracer.release(pid);
                }
                if look == Look::PutOff {
                    put_off.push((pid, Some(parent), None));
                }
            }
            Event::Exec { pid, runtime } => {
                let held = runtime.map(|rt| HeldExec {
                    runtime: *rt,
                    since: Instant::now(),
                    offered: false,
                });
                put_off.push((pid, None, held));
            }
        }
    }

    /// Consider every descendant of the main process (or of the root); a
    /// process put off makes the next scan happen at once.
    fn scan(&self, scans: &mut Scans) {
        scans.procs.scan();
        let below = self
            .children
            .root
            .unwrap_or_else(|| self.shared.main.load(Ordering::SeqCst));
        let mut deferred = false;
        for pid in scans.procs.descendants(below) {
            if self.shared.done.load(Ordering::SeqCst) {
                break;
            }
            let parent = scans.procs.parent(pid);
            // A vfork child shares its parent's memory until it execs: it
            // is looked at once it has.
            let in_vfork = parent.is_some_and(tree::in_vfork);
            if self.consider(pid, parent, in_vfork, None) == Look::PutOff {
                deferred = true;
            }
        }
        if deferred {
            scans.last = None;
        }
    }
    /// The tracer holds `pid`, which exec'd into a Python whose runtime
    /// is ready: profile it from there. A child whose profile runs
    /// already is offered the runtime, and lets it go once it took it;
    /// one being looked at is considered again. Whether to look again.
    fn held_exec(&self, tracer: &Follower, pid: i32, held: &mut HeldExec) -> bool {
        let shared = self.shared;
        let look = self.consider(pid, None, false, Some(held.runtime.clone()));
        let taken =
            || held.offered && !shared.exec_found.lock().is_ok_and(|m| m.contains_key(&pid));
        let withdraw = || {
            if let Ok(mut m) = shared.exec_found.lock() {
                m.remove(&pid);
            }
        };
        match look {
            // Its profile lets it go once it began.
            Look::Profiling => {
                withdraw();
                false
            }
            Look::PutOff => true,
            Look::Busy if taken() => false,
            Look::Busy
                if pid != shared.main.load(Ordering::SeqCst)
                    && held.since.elapsed() < HOLD_FOR_PROFILE =>
            {
                if !held.offered
                    && let Some(image) = tree::image(pid)
                    && let Ok(mut m) = shared.exec_found.lock()
                {
                    m.insert(pid, (image, held.runtime.clone()));
                    held.offered = true;
                }
                true
            }
            _ => {
                withdraw();
                tracer.release(pid);
                false
            }
        }
    }

    /// Look at process `pid` (child of `parent`) on a thread of its own,
    /// unless it is being looked at or profiled already, or runs what it
    /// ran when it was found not to be Python. `found`: its runtime, found
    /// by the tracer at its exec.
    fn consider(
        &self,
        pid: i32,
        parent: Option<i32>,
        in_vfork: bool,
        found: Option<Runtime>,
    ) -> Look {
        let shared = self.shared;
        let last = {
            let known = shared.known.lock().unwrap_or_else(|e| e.into_inner());
            match known.get(&pid) {
                // Being looked at or profiled.
                Some(None) => return Look::Busy,
                Some(Some(last)) => Some(last.clone()),
                None => None,
            }
        };
        let Some(image) = tree::image(pid) else {
            // Gone, or not readable yet.
            return match tree::parent_pid(pid) {
                Some(_) => Look::PutOff,
                None => Look::Done,
            };
        };
        if found.is_none() && last.as_ref() == Some(&image) {
            return Look::Done;
        }
        if shared.probing.load(Ordering::SeqCst) >= MAX_PROBING || in_vfork {
            return Look::PutOff;
        }
        let inherited = found.or_else(|| shared.inherited_runtime(parent, &image));
        // The main profile may have taken it since (a command's next
        // Python process).
        if !claim(shared, pid) {
            return Look::Busy;
        }
        shared.probing.fetch_add(1, Ordering::SeqCst);
        let (children, config, stopping) = (self.children, self.config, self.stopping);
        let look = match inherited {
            Some(_) => Look::Profiling,
            None => Look::Done,
        };
        self.scope.spawn(move || {
            // Not a fork of a profiled process: looking may take a while,
            // a held fork does not wait for it.
            if inherited.is_none()
                && let Some(tracer) = children.tracer
            {
                tracer.release(pid);
            }
            let report = look_at_child(pid, inherited, image, children, shared, config, stopping);
            // A held fork is let go once its profile began (or if it has
            // none): this is a no-op for the first.
            if let Some(tracer) = children.tracer {
                tracer.release(pid);
            }
            mark(shared, pid, Some(tree::image(pid).unwrap_or_default()));
            if let Some(report) = report
                && let Ok(mut r) = shared.reports.lock()
            {
                r.push(report);
            }
        });
        look
    }
}

/// A child that execs something other than Python this soon after it was
/// found (in seconds) never ran Python of its own: no profile is written.
const SHORT_FORK_S: f64 = 0.1;

/// Every this many scans, the descendants are looked at even when no
/// process started (to see execs: 20 × 5 ms, the reference's 100 ms).
const RESCAN_EVERY: u32 = 20;

/// Processes looked at at once (most turn out not to be Python at once;
/// an interpreter still loading is waited for up to [`EXEC_GRACE`]).
const MAX_PROBING: usize = 32;

/// Is the new process `pid` Python (waiting a little for an interpreter
/// still loading its runtime)? Then profile it, if the bound allows.
fn look_at_child(
    pid: i32,
    inherited: Option<Runtime>,
    image: String,
    children: &Children<'_>,
    shared: &Shared,
    config: &SampleConfig,
    stopping: Stopping,
) -> Option<ChildReport> {
    let deadline = Instant::now() + EXEC_GRACE;
    let found = if let Some(rt) = inherited {
        // The parent's runtime, for the image the child had when it was
        // found: if it execs meanwhile, the profile sees the change.
        Some((rt, image))
    } else {
        loop {
            let Some((probe, image)) = probe_image(pid) else {
                break None;
            };
            match probe {
                Probe::Python(rt) => break Some((*rt, image)),
                Probe::Refused(e) => {
                    crate::errln!("tachyon: not profiling child process {pid}: {e}");
                    break None;
                }
                Probe::NotPython(_) => break None,
                Probe::NotYet(_) | Probe::Unready(_)
                    if Instant::now() < deadline && !shared.cancel.load(Ordering::SeqCst) =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Probe::Unready(e) => {
                    crate::errln!("tachyon: not profiling child process {pid}: {e}");
                    break None;
                }
                Probe::NotYet(_) => break None,
            }
        }
    };
    shared.probing.fetch_sub(1, Ordering::SeqCst);
    let (rt, image) = found?;
    // Counted before the check: two children found at once cannot both
    // take the last place.
    if shared.active.fetch_add(1, Ordering::SeqCst) >= children.max {
        shared.active.fetch_sub(1, Ordering::SeqCst);
        crate::errln!(
            "tachyon: warning: already profiling {} child processes (the most at once); not profiling process {pid}",
            children.max
        );
        return None;
    }
    crate::errln!("tachyon: profiling child process {pid}");
    shared.remember_runtime_of(pid, &image, &rt);
    let report = profile_child(pid, rt, image, children, shared, config, stopping);
    shared.active.fetch_sub(1, Ordering::SeqCst);
    Some(report)
}

/// Take `pid` into the main profile unless a child's profile has it (or
/// is looking at it): one check, under the lock the watcher marks under.
pub(super) fn claim(shared: &Shared, pid: i32) -> bool {
    let Ok(mut known) = shared.known.lock() else {
        return false;
    };
    if matches!(known.get(&pid), Some(None)) {
        return false;
    }
    known.insert(pid, None);
    true
}

pub(super) fn mark(shared: &Shared, pid: i32, state: Option<String>) {
    if let Ok(mut known) = shared.known.lock() {
        known.insert(pid, state);
    }
}

/// One child's whole profile, on its own thread: sampled on the session's
/// schedule until it exits (followed through an exec into another Python),
/// the duration is over, or the session ends it; then written.
fn profile_child(
    pid: i32,
    rt: Runtime,
    image: String,
    children: &Children<'_>,
    shared: &Shared,
    config: &SampleConfig,
    stopping: Stopping,
) -> ChildReport {
    let child = ChildRun {
        pid,
        children,
        shared,
        config,
        stopping,
    };
    let mut report = ChildReport {
        pid,
        stats: RunStats::default(),
        reason: StopReason::TargetExited,
        samples: 0,
        error: None,
        not_python: false,
    };
    let (mut collector, unwinder) = match child.open(rt) {
        Ok(opened) => opened,
        Err(e) => {
            report.error = Some(e);
            return report;
        }
    };
    let (unwinder, became) = child.follow(&mut report, unwinder, collector.as_mut(), image);
    finish_child(report, became, collector.as_mut(), &unwinder)
}

/// One child's profile: who it is and what the session gives it.
struct ChildRun<'a, 'c> {
    pid: i32,
    children: &'a Children<'c>,
    shared: &'a Shared,
    config: &'a SampleConfig,
    stopping: Stopping,
}

impl ChildRun<'_, '_> {
    /// Its collector and its unwinder on `rt`, ready: then its profile
    /// begins. `Err`: why it cannot be profiled.
    fn open(&self, rt: Runtime) -> std::result::Result<(Box<dyn Collector>, Child), String> {
        let (pid, shared) = (self.pid, self.shared);
        // Merged, the child's samples are held until they span the time a
        // fork that execs another program at once would: such a child's
        // samples are its parent's stack, and stay out of the profile.
        let collector = match &shared.merge {
            Some(feed) => feed
                .front(pid as u32, Duration::from_secs_f64(SHORT_FORK_S))
                .map(|f| Box::new(f) as Box<dyn Collector>)
                .ok_or_else(|| "the profile is over".to_string()),
            None => self.children.outputs.child(pid, &rt),
        }?;
        let proc = LinuxProcess::open(pid).map_err(|e| e.to_string())?;
        let mut unwinder = Unwinder::new(proc, pid, rt, shared.opening.unwind);
        self.ready(&mut unwinder)?;
        Ok((collector, unwinder))
    }

    /// Make `unwinder` ready (asyncio, when asked for); then a fork or
    /// exec the tracer holds for this profile goes on.
    fn ready(&self, unwinder: &mut Child) -> std::result::Result<(), String> {
        self.shared
            .opening
            .ready(unwinder)
            .map_err(|e| error_chain(&e))?;
        if let Some(tracer) = self.children.tracer {
            tracer.release(self.pid);
        }
        Ok(())
    }

    /// The schedule left for this child. One line a second from every
    /// child would garble the terminal: no realtime stats.
    fn schedule(&self) -> SampleConfig {
        let shared = self.shared;
        let mut cfg = remaining(self.config, shared.started, Some(shared.cancel.clone()));
        cfg.realtime_stats = false;
        cfg
    }

    /// Sample the child, through its execs into another Python, until it
    /// ends or the profile does. Returns the unwinder last used, and what
    /// the process became when it left Python, if it did.
    fn follow(
        &self,
        report: &mut ChildReport,
        mut unwinder: Child,
        collector: &mut dyn Collector,
        image: String,
    ) -> (Child, Option<String>) {
        let (pid, shared) = (self.pid, self.shared);
        let exec_seen = std::cell::Cell::new(false);
        let mut cfg = self.schedule();
        // The image the runtime belongs to: the process may have exec'd
        // since, and then every sample would read another program's memory.
        let mut image = Some(image);
        while let Some((stats, reason)) =
            self.sample_image(&mut unwinder, collector, &cfg, &image, &exec_seen)
        {
            add_stats(&mut report.stats, &stats);
            report.reason = reason;
            if reason != StopReason::TargetExited {
                break;
            }
            // Gone, or exec'd: then it may be Python again (a fork of Python
            // that execs an interpreter, as `subprocess` and `multiprocessing`'s
            // spawn do). The profile goes on into it, one profile a process.
            let Some((rt, new_image)) = runtime_after_exec(pid, shared) else {
                return (unwinder, left_python(pid, exec_seen.get()));
            };
            let Ok(proc) = LinuxProcess::open(pid) else {
                break;
            };
            shared.remember_runtime_of(pid, &new_image, &rt);
            image = Some(new_image);
            let opts = unwinder.opts;
            let table = unwinder.into_frames();
            unwinder = Unwinder::with_frames(proc, pid, rt, opts, table);
            // Its profile goes on now: the tracer's hold at its exec ends.
            if let Err(e) = self.ready(&mut unwinder) {
                report.error = Some(e);
                break;
            }
            cfg = self.schedule();
        }
        (unwinder, None)
    }

    /// Sample the child while it runs `image`. `None`: it cannot be
    /// opened any more.
    fn sample_image(
        &self,
        unwinder: &mut Child,
        collector: &mut dyn Collector,
        cfg: &SampleConfig,
        image: &Option<String>,
        exec_seen: &std::cell::Cell<bool>,
    ) -> Option<(RunStats, StopReason)> {
        let pid = self.pid;
        let alive = || {
            let now = tree::image(pid);
            if now.is_some() && now != *image {
                exec_seen.set(true);
            }
            image.is_some() && now == *image
        };
        super::run_loop(unwinder, collector, cfg, &alive, self.stopping).ok()
    }
}

/// A child's unwinder.
type Child = Unwinder<LinuxProcess>;

/// What a child that exec'd (seen, or still there with another image),
/// and not into Python, became. One already gone may have exec'd unseen.
fn left_python(pid: i32, exec_seen: bool) -> Option<String> {
    match tree::image(pid) {
        Some(other) => Some(other),
        None if exec_seen => Some("another program".into()),
        None => None,
    }
}

/// The end of a child's profile: written, unless it took no samples or
/// never ran Python of its own.
fn finish_child(
    mut report: ChildReport,
    became: Option<String>,
    collector: &mut dyn Collector,
    unwinder: &Child,
) -> ChildReport {
    report.samples = report.stats.attempts - report.stats.failures.min(report.stats.attempts);
    if report.samples == 0 {
        report.error = Some("no samples taken".into());
        return report;
    }
    // A fork caught just before it exec'd a program that is not Python
    // (`subprocess.run(["ls"])`; with vfork it even shares its parent's
    // memory): its samples are its parent's stack, no profile of its own.
    if let Some(other) = became
        && report.stats.duration_s < SHORT_FORK_S
    {
        let exe = other.split('|').next().unwrap_or_default().to_string();
        report.error = Some(format!("it became {exe} (not Python) at once"));
        report.not_python = true;
        return report;
    }
    if let Err(e) = collector.finish(unwinder.frames(), &report.stats) {
        report.error = Some(format!("cannot write its profile: {e}"));
    }
    report
}

/// A child's process changed image (or is gone): its new runtime, once an
/// interpreter has mapped it; `None` when it is gone or runs something
/// else.
fn runtime_after_exec(pid: i32, shared: &Shared) -> Option<(Runtime, String)> {
    let deadline = Instant::now() + EXEC_GRACE;
    let cancel = &shared.cancel;
    while Instant::now() < deadline && !cancel.load(Ordering::SeqCst) {
        // Found by the tracer, which holds the process at its exec.
        if let Some(image) = tree::image(pid)
            && let Some(rt) = shared.take_exec_runtime(pid, &image)
        {
            return Some((rt, image));
        }
        let (probe, image) = probe_image(pid)?;
        match probe {
            Probe::Python(rt) => return Some((*rt, image)),
            Probe::NotYet(_) | Probe::Unready(_) => std::thread::sleep(Duration::from_millis(1)),
            Probe::NotPython(_) | Probe::Refused(_) => return None,
        }
    }
    None
}
