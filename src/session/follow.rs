//! Following the processes a program started by `run --subprocesses`
//! creates, as they are created, with ptrace fork events: no child is
//! missed because it started and ended between two looks at `/proc`.
//!
//! One tracer thread owns the traced tree. It starts the program (stopped
//! before its first instruction, as [`super::launch`] does for a
//! command), seizes it with fork, vfork, clone and exec followed, and from
//! then on is the only thread that waits for any process of the tree: a
//! second waiter would take statuses meant for the tracer, and ptrace
//! requests must come from the thread that attached. It:
//! - reports every new process (a thread is no new process) and every exec
//!   to the session at once ([`Event`]), and lets the parent go on. A fork
//!   (a copy of its parent, which may be profiled at once with its
//!   parent's runtime) is held at its first instruction until the session
//!   has begun its profile ([`Follower::release`]): however late tachyon's
//!   threads run on a loaded machine, a short child is not over before its
//!   profile starts. Other new processes (vfork, `posix_spawn`) go on at
//!   once: they are looked at when they exec;
//! - holds a process that execs an interpreter until its runtime is
//!   ready (stepped from system call to system call, or on 3.11/3.12 run
//!   until it sets its ready flag, as [`super::launch`] waits for the
//!   program's first interpreter), then reports the exec with the runtime
//!   found and holds it at that stop until the session has begun its
//!   profile: a short `subprocess.run([sys.executable, ...])` is profiled
//!   from its start, as a fork is. An exec into anything else is reported
//!   and goes on at once;
//! - delivers every signal unchanged and keeps stop signals' group stops
//!   (`PTRACE_LISTEN`), so SIGSTOP and SIGCONT behave as without tachyon;
//! - reaps the processes that exit, keeping the program's exit status;
//! - when the session ends ([`Follower::finish`]), detaches from every
//!   process, so none is left traced.
//!
//! `PTRACE_O_EXITKILL` is not set: if tachyon dies, the kernel detaches the
//! tree and the program goes on, as it would without a profiler; a crash of
//! the profiler must not take a long job down with it.
//!
//! Where ptrace is refused (the program already traced, as under
//! `strace -f`; Yama's `ptrace_scope`), the program is started untraced and
//! [`launch()`] says so; the session then scans `/proc` instead.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace::{self, Event as PtEvent, Options};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::process::linux::LinuxProcess;
use crate::runtime::{Runtime, Startup};
use crate::session::launch::{self, ChildIo, Launched, SyscallWatch, Traced, watchpoint};

/// What the tracer saw happen in the traced tree.
#[derive(Debug, Clone)]
pub enum Event {
    /// A new process `pid` (not a thread), made by process `parent`.
    /// `shares_memory`: it runs in its parent's memory until it execs
    /// (vfork, or `posix_spawn`'s `CLONE_VM`). `held`: it waits at its
    /// first instruction for [`Follower::release`].
    Forked {
        pid: i32,
        parent: i32,
        shares_memory: bool,
        held: bool,
    },
    /// Process `pid` exec'd a new program. `runtime`: it is a Python whose
    /// runtime is ready, found while the tracer held it; it waits at that
    /// stop for [`Follower::release`]. `None`: any other program (or a
    /// Python that did not get ready in time), which goes on.
    Exec {
        pid: i32,
        runtime: Option<Box<Runtime>>,
    },
}

/// The tracer thread of one `run --subprocesses`, and what it reports.
pub struct Follower {
    events: Mutex<Receiver<Event>>,
    control: Arc<Control>,
    thread: Mutex<Option<JoinHandle<Option<ExitStatus>>>>,
}

/// What the session asks of the tracer thread (which is woken to see it).
#[derive(Default)]
struct Control {
    /// The tracer thread's id, to wake it from its wait.
    tid: AtomicI32,
    /// Let every process go and end.
    stop: AtomicBool,
    /// Hold no more forks (the session looks for no more children).
    no_holding: AtomicBool,
    /// Held processes to let go.
    release: Mutex<Vec<i32>>,
    /// Requests made (release, stop holding), and the last the tracer has
    /// acted on: a wake signal that comes just before the tracer blocks in
    /// its wait is lost, so the asker wakes it until it has acted.
    asked: AtomicU64,
    seen: AtomicU64,
    /// The tracer thread has ended.
    over: AtomicBool,
}

/// Every traced process is released within this long of the session's
/// end; one that does not stop by then (stuck in the kernel) is released
/// by the kernel when the tracer thread ends.
const RELEASE_WITHIN: Duration = Duration::from_secs(2);

/// The signal that wakes the tracer from its wait (no-op handler, no
/// `SA_RESTART`: the wait returns `EINTR`).
fn wake_signal() -> i32 {
    nix::libc::SIGRTMIN() + 3
}

extern "C" fn on_wake(_: nix::libc::c_int) {}

fn install_wake_handler() {
    // SAFETY: a handler that does nothing is async-signal-safe; the
    // sigaction struct is fully initialised.
    unsafe {
        let mut act: nix::libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_wake as *const () as usize;
        act.sa_flags = 0;
        nix::libc::sigemptyset(&mut act.sa_mask);
        nix::libc::sigaction(wake_signal(), &act, std::ptr::null_mut());
    }
}

/// How long an exec'd process that looks like an interpreter is held for
/// its runtime to be ready, before it is let go unprofiled.
const AWAIT_AT_MOST: Duration = Duration::from_secs(10);

/// A process that exec'd something python-like, held (stepped, or run
/// to a watchpoint) until its runtime is ready.
struct Awaiting {
    startup: Startup,
    /// The ready flag a hardware watchpoint is on: then it runs to its
    /// next stop rather than from system call to system call.
    watching: Option<u64>,
    since: Instant,
}

/// What the tracer thread tells `launch` once the program runs.
enum Started {
    Traced(Box<Launched>),
    /// ptrace was refused: the program runs untraced (why, and the child).
    Refused(Errno, std::process::Child),
}

/// Start `argv` (an interpreter and its script, or any command) traced by
/// a new tracer thread, and wait for its first Python process (for a
/// command, the first of its processes that is Python). `None` for the follower when ptrace is refused (one line of
/// warning is printed): the program then runs untraced.
pub fn launch(
    argv: &[OsString],
    timeout: Duration,
    io: &ChildIo,
) -> Result<(Launched, Option<Follower>)> {
    let (program, _) = argv.split_first().expect("argv is never empty");
    let me = std::env::current_exe()
        .map_err(|e| Error::io("cannot find tachyon's own executable", e))?;
    // As launch_command: tachyon in helper mode stops itself, is seized
    // before the command's first instruction, then execs it.
    let mut cmd = Command::new(me);
    cmd.arg(launch::HELPER_FLAG).args(argv);
    io.apply(&mut cmd)
        .map_err(|e| launch::spawn_error(program, e))?;
    install_wake_handler();
    launch::adopt_orphans();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<Result<Started>>();
    let (events_tx, events_rx) = std::sync::mpsc::channel::<Event>();
    let control = Arc::new(Control::default());
    let program = program.clone();
    let thread = {
        let control = control.clone();
        std::thread::Builder::new()
            .name("tracer".into())
            .spawn(move || {
                control
                    .tid
                    .store(nix::unistd::gettid().as_raw(), Ordering::SeqCst);
                let status = tracer_main(cmd, &program, started_tx, events_tx, &control);
                control.over.store(true, Ordering::SeqCst);
                status
            })
            .map_err(|e| Error::io("cannot start the tracer thread", e))?
    };
    let started = started_rx.recv().unwrap_or_else(|_| {
        Err(Error::io(
            "following the program",
            std::io::Error::other("the tracer thread ended"),
        ))
    });
    match started {
        Ok(Started::Traced(launched)) => Ok((
            *launched,
            Some(Follower {
                events: Mutex::new(events_rx),
                control,
                thread: Mutex::new(Some(thread)),
            }),
        )),
        Ok(Started::Refused(why, child)) => {
            let _ = thread.join();
            crate::errln!(
                "tachyon: warning: cannot trace the program ({}); child processes are looked for every few milliseconds instead, and one that lives less may be missed",
                why.desc()
            );
            Ok((launch::poll_for_python(child, timeout)?, None))
        }
        Err(e) => {
            let _ = thread.join();
            Err(e)
        }
    }
}

/// The tracer thread: start the program, find its Python, then follow.
/// Returns the program's exit status if it was reaped here.
fn tracer_main(
    mut cmd: Command,
    program: &OsString,
    started: Sender<Result<Started>>,
    events: Sender<Event>,
    control: &Control,
) -> Option<ExitStatus> {
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = started.send(Err(launch::spawn_error(program, e)));
            return None;
        }
    };
    let root = Pid::from_raw(child.id() as i32);
    match waitpid(root, Some(WaitPidFlag::WUNTRACED)) {
        Ok(WaitStatus::Stopped(_, Signal::SIGSTOP)) => {}
        other => {
            let _ = started.send(Err(launch::did_not_start(&mut child, program, other)));
            return None;
        }
    }
    let opts = Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACESYSGOOD;
    if let Err(e) = ptrace::seize(root, opts) {
        let _ = kill(root, Signal::SIGCONT);
        let _ = started.send(Ok(Started::Refused(e, child)));
        return None;
    }
    let _ = kill(root, Signal::SIGCONT);
    let (python, runtime, tracees) = match launch::follow_until_python(root, true) {
        Ok(found) => found,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = started.send(Err(e));
            return None;
        }
    };
    let launched = Launched {
        child,
        python_pid: python.as_raw(),
        runtime,
    };
    if started
        .send(Ok(Started::Traced(Box::new(launched))))
        .is_err()
    {
        // Nobody to report to: let everything go.
        let mut t = Tracer::new(root, tracees);
        t.release();
        return t.root_status;
    }
    let mut t = Tracer::new(root, tracees);
    t.follow(&events, control);
    t.release();
    t.root_status
}

/// The traced tree, as the tracer thread knows it.
struct Tracer {
    root: Pid,
    /// Every traced task (threads too).
    tracees: HashSet<Pid>,
    root_status: Option<ExitStatus>,
    /// New tasks at their first stop, their creation not reported yet.
    early: HashSet<Pid>,
    /// Forks to hold at their first stop, which has not come yet.
    to_hold: HashSet<Pid>,
    /// Forks held at their first stop.
    held: HashSet<Pid>,
    /// Hold new forks (until the session looks for no more children).
    holding: bool,
    /// Exec'd processes held until their runtime is ready.
    awaiting: HashMap<Pid, Awaiting>,
    syscalls: SyscallWatch,
}

impl Tracer {
    fn new(root: Pid, tracees: Vec<Pid>) -> Self {
        Tracer {
            root,
            tracees: tracees.into_iter().collect(),
            root_status: None,
            early: HashSet::new(),
            to_hold: HashSet::new(),
            held: HashSet::new(),
            holding: true,
            awaiting: HashMap::new(),
            syscalls: SyscallWatch::default(),
        }
    }

    /// Let `pid` run on from its stop: stepped to its next system call
    /// while it is awaited without a watchpoint.
    fn resume(&self, pid: Pid, sig: Option<Signal>) {
        let _ = match self.awaiting.get(&pid) {
            Some(a) if a.watching.is_none() => ptrace::syscall(pid, sig),
            _ => ptrace::cont(pid, sig),
        };
    }

    /// Process `pid` exec'd (it is at its exec stop): await its runtime if
    /// it looks like an interpreter, else report it and let it go on.
    fn exec(&mut self, pid: Pid, events: &Sender<Event>) {
        // A new program has no watchpoint: the kernel drops them at exec.
        self.awaiting.remove(&pid);
        self.syscalls.forget(pid);
        if !self.holding {
            let _ = events.send(Event::Exec {
                pid: pid.as_raw(),
                runtime: None,
            });
            let _ = ptrace::cont(pid, None);
            return;
        }
        let mut startup = Startup::default();
        startup.exec();
        let awaiting = Awaiting {
            startup,
            watching: None,
            since: Instant::now(),
        };
        self.look(pid, awaiting, events);
    }

    /// Look at awaited process `pid`, at a stop: report it once it is
    /// Python (held, while forks are) or cannot be; else run it to its
    /// next look.
    fn look(&mut self, pid: Pid, mut a: Awaiting, events: &Sender<Event>) {
        let runtime = match launch::look_traced(pid, &mut a.startup) {
            Traced::Python(rt) => Some(rt),
            Traced::Maybe if a.since.elapsed() < AWAIT_AT_MOST => {
                if let Ok(proc) = LinuxProcess::open(pid.as_raw()) {
                    a.watching = launch::watch_ready_flag(&proc, &a.startup, a.watching);
                }
                self.awaiting.insert(pid, a);
                self.resume(pid, None);
                return;
            }
            _ => None,
        };
        if a.watching.is_some() {
            watchpoint::clear(pid);
        }
        let hold = runtime.is_some() && self.holding;
        if hold {
            self.held.insert(pid);
        } else {
            let _ = ptrace::cont(pid, None);
        }
        let _ = events.send(Event::Exec {
            pid: pid.as_raw(),
            runtime,
        });
    }

    /// An awaited process's system-call stop, or a trap of its
    /// watchpoint: look again if it may be ready now.
    fn awaited_stop(&mut self, pid: Pid, events: &Sender<Event>) {
        let Some(a) = self.awaiting.remove(&pid) else {
            return;
        };
        let trap = a.watching.is_some();
        if trap || self.syscalls.worth_a_look(pid, &a.startup) {
            self.look(pid, a, events);
        } else {
            self.awaiting.insert(pid, a);
            self.resume(pid, None);
        }
    }

    /// Let go of every awaited process: each is interrupted, its
    /// watchpoint cleared at its stop, and detached there.
    fn release_awaited(&mut self) {
        for (pid, a) in std::mem::take(&mut self.awaiting) {
            self.tracees.remove(&pid);
            if ptrace::interrupt(pid).is_err() {
                continue;
            }
            let deadline = Instant::now() + RELEASE_WITHIN;
            while Instant::now() < deadline {
                let status = match waitpid(pid, Some(WaitPidFlag::__WALL)) {
                    Ok(s) => s,
                    Err(Errno::EINTR) => continue,
                    Err(_) => break,
                };
                let sig = match status {
                    WaitStatus::Stopped(_, sig) => Some(sig),
                    WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_) => None,
                    WaitStatus::Exited(_, code) => {
                        self.gone(pid, exited(code));
                        break;
                    }
                    WaitStatus::Signaled(_, s, core) => {
                        self.gone(pid, killed(s, core));
                        break;
                    }
                    _ => continue,
                };
                if a.watching.is_some() {
                    watchpoint::clear(pid);
                }
                let _ = ptrace::detach(pid, sig);
                break;
            }
        }
    }

    /// Wait for every stop of the tree and handle it, until told to stop
    /// or nothing is left to trace.
    fn follow(&mut self, events: &Sender<Event>, control: &Control) {
        while !control.stop.load(Ordering::SeqCst) {
            self.let_go(control);
            match waitpid(None, Some(WaitPidFlag::__WALL)) {
                Ok(status) => self.handle(status, events),
                Err(Errno::EINTR) => {}
                // Nothing left: every process of the tree is gone.
                Err(_) => {
                    self.tracees.clear();
                    return;
                }
            }
        }
    }

    /// Let go of the held forks the session is done with (all of them
    /// once it holds no more).
    fn let_go(&mut self, control: &Control) {
        let request = control.asked.load(Ordering::SeqCst);
        let asked: Vec<i32> =
            std::mem::take(&mut *control.release.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in asked.into_iter().map(Pid::from_raw) {
            if self.held.remove(&pid) {
                let _ = ptrace::cont(pid, None);
            }
            // Released before its first stop: that stop lets it go on.
            self.to_hold.remove(&pid);
        }
        if control.no_holding.load(Ordering::SeqCst) && self.holding {
            self.holding = false;
            self.to_hold.clear();
            for pid in std::mem::take(&mut self.held) {
                let _ = ptrace::cont(pid, None);
            }
        }
        control.seen.store(request, Ordering::SeqCst);
    }

    /// A new task `new` was reported (by its creator's event): hold it, or
    /// let it go on if it is at its first stop already.
    fn created(&mut self, new: Pid, hold: bool) {
        self.tracees.insert(new);
        let stopped = self.early.remove(&new);
        match (hold, stopped) {
            (true, true) => {
                self.held.insert(new);
            }
            (true, false) => {
                self.to_hold.insert(new);
            }
            (false, true) => {
                let _ = ptrace::cont(new, None);
            }
            (false, false) => {}
        }
    }

    /// One stop of one of the traced tasks: followed, held, or let go on.
    fn handle(&mut self, status: WaitStatus, events: &Sender<Event>) {
        match status {
            WaitStatus::PtraceEvent(pid, _, ev)
                if ev == PtEvent::PTRACE_EVENT_FORK as i32
                    || ev == PtEvent::PTRACE_EVENT_VFORK as i32
                    || ev == PtEvent::PTRACE_EVENT_CLONE as i32 =>
            {
                self.forked(pid, ev, events);
            }
            WaitStatus::PtraceEvent(pid, _, ev) if ev == PtEvent::PTRACE_EVENT_EXEC as i32 => {
                self.exec_event(pid, events);
            }
            WaitStatus::PtraceEvent(pid, sig, ev) if ev == PTRACE_EVENT_STOP => {
                self.ptrace_stop(pid, sig);
            }
            WaitStatus::PtraceSyscall(pid) if self.awaiting.contains_key(&pid) => {
                self.awaited_stop(pid, events);
            }
            // The trap of an awaited process's watchpoint is no signal
            // for it.
            WaitStatus::Stopped(pid, Signal::SIGTRAP)
                if self
                    .awaiting
                    .get(&pid)
                    .is_some_and(|a| a.watching.is_some())
                    && watchpoint::hit(pid) =>
            {
                self.awaited_stop(pid, events);
            }
            WaitStatus::PtraceEvent(pid, _, _) | WaitStatus::PtraceSyscall(pid) => {
                self.tracees.insert(pid);
                self.resume(pid, None);
            }
            // A signal for the process: delivered unchanged.
            WaitStatus::Stopped(pid, sig) => {
                self.tracees.insert(pid);
                self.resume(pid, Some(sig));
            }
            WaitStatus::Exited(pid, code) => {
                self.gone(pid, exited(code));
            }
            WaitStatus::Signaled(pid, sig, core) => {
                self.gone(pid, killed(sig, core));
            }
            _ => {}
        }
    }

    /// `pid` forked, vforked or cloned (`ev`): the new task is traced,
    /// held if it is a fork while holding, and reported if a process.
    fn forked(&mut self, pid: Pid, ev: i32, events: &Sender<Event>) {
        self.tracees.insert(pid);
        if let Ok(new) = ptrace::getevent(pid) {
            let new = new as i32;
            // A clone event is a thread unless the new task leads
            // a thread group of its own.
            let is_process =
                ev != PtEvent::PTRACE_EVENT_CLONE as i32 || tgid(new).is_none_or(|g| g == new);
            let hold = self.holding && ev == PtEvent::PTRACE_EVENT_FORK as i32;
            self.created(Pid::from_raw(new), hold);
            if is_process {
                let _ = events.send(Event::Forked {
                    pid: new,
                    parent: tgid(pid.as_raw()).unwrap_or(pid.as_raw()),
                    // vfork, and posix_spawn's clone(CLONE_VM |
                    // CLONE_VFORK), report as a vfork.
                    shares_memory: ev == PtEvent::PTRACE_EVENT_VFORK as i32,
                    held: hold,
                });
            }
        }
        self.resume(pid, None);
    }

    /// `pid` exec'd.
    fn exec_event(&mut self, pid: Pid, events: &Sender<Event>) {
        self.tracees.insert(pid);
        // A thread that exec'd took its process's id: its own is gone.
        if let Ok(former) = ptrace::getevent(pid)
            && former as i32 != pid.as_raw()
        {
            self.tracees.remove(&Pid::from_raw(former as i32));
        }
        self.exec(pid, events);
    }

    /// A `PTRACE_EVENT_STOP` of `pid` with `sig`: a group stop, a new
    /// task's first stop, or an interrupt.
    fn ptrace_stop(&mut self, pid: Pid, sig: Signal) {
        if is_stop_signal(sig) {
            // A group stop: stay stopped until SIGCONT, as without
            // a tracer.
            self.tracees.insert(pid);
            listen(pid);
        } else if !self.tracees.contains(&pid) {
            // A new task's first stop, before its creator's event
            // said whether to hold it.
            self.tracees.insert(pid);
            self.early.insert(pid);
        } else if self.to_hold.remove(&pid) {
            self.held.insert(pid);
        } else {
            // A new task's first stop, or an interrupt.
            self.resume(pid, None);
        }
    }

    fn gone(&mut self, pid: Pid, status: ExitStatus) {
        self.tracees.remove(&pid);
        self.held.remove(&pid);
        self.early.remove(&pid);
        self.to_hold.remove(&pid);
        self.awaiting.remove(&pid);
        self.syscalls.forget(pid);
        if pid == self.root {
            self.root_status = Some(status);
        }
    }

    /// Detach from every traced task: each is interrupted and detached at
    /// its stop, a signal it stopped for delivered, a group stop kept.
    fn release(&mut self) {
        self.release_awaited();
        let mut left: HashSet<Pid> = HashSet::new();
        // Those at a stop already seen are let go at once.
        let stopped: HashSet<Pid> = self.held.drain().chain(self.early.drain()).collect();
        for &t in &self.tracees {
            if stopped.contains(&t) {
                let _ = ptrace::detach(t, None);
            } else if ptrace::interrupt(t).is_ok() {
                // ESRCH: gone (its exit is reaped below or was already).
                left.insert(t);
            }
        }
        self.tracees.clear();
        super::launch::detach_at_stops(left, RELEASE_WITHIN, |status| match status {
            WaitStatus::Exited(pid, code) => self.gone(pid, exited(code)),
            WaitStatus::Signaled(pid, sig, core) => self.gone(pid, killed(sig, core)),
            _ => {}
        });
        // Exits not yet collected (a process that ended as we let go, the
        // program among them): its status is kept, not left to be lost.
        while let Ok(status) = waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
            match status {
                WaitStatus::Exited(pid, code) => {
                    self.gone(pid, exited(code));
                }
                WaitStatus::Signaled(pid, sig, core) => {
                    self.gone(pid, killed(sig, core));
                }
                WaitStatus::Stopped(pid, sig) => {
                    let _ = ptrace::detach(pid, Some(sig));
                }
                WaitStatus::PtraceEvent(pid, _, _) | WaitStatus::PtraceSyscall(pid) => {
                    let _ = ptrace::detach(pid, None);
                }
                _ => break,
            }
        }
    }
}

/// The wait status of a process that exited with `code`.
fn exited(code: i32) -> ExitStatus {
    ExitStatus::from_raw((code & 0xff) << 8)
}

/// The wait status of a process killed by `sig` (`core`: dumped core).
fn killed(sig: Signal, core: bool) -> ExitStatus {
    ExitStatus::from_raw(sig as i32 | if core { 0x80 } else { 0 })
}

/// `PTRACE_EVENT_STOP`: a seized task's group stop, interrupt, or first stop.
const PTRACE_EVENT_STOP: i32 = 128;

fn is_stop_signal(sig: Signal) -> bool {
    matches!(
        sig,
        Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
    )
}

/// Leave a task in its group stop, still traced (`PTRACE_LISTEN`).
fn listen(pid: Pid) {
    // SAFETY: PTRACE_LISTEN takes no pointers.
    unsafe {
        nix::libc::ptrace(
            nix::libc::PTRACE_LISTEN,
            pid.as_raw(),
            std::ptr::null_mut::<nix::libc::c_void>(),
            std::ptr::null_mut::<nix::libc::c_void>(),
        );
    }
}

/// The thread group (process) of task `tid`, from `/proc`.
fn tgid(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

impl Follower {
    /// The next event, waiting at most `wait` for one.
    pub fn next_event(&self, wait: Duration) -> Option<Event> {
        let rx = self.events.lock().unwrap_or_else(|e| e.into_inner());
        match rx.recv_timeout(wait) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            // The tracer is done (nothing left to trace): no more events;
            // wait as asked rather than spin.
            Err(RecvTimeoutError::Disconnected) => {
                drop(rx);
                std::thread::sleep(wait);
                None
            }
        }
    }

    /// Let go of the held fork `pid`: its profile has begun (or it will
    /// have none). Harmless for any other pid.
    pub fn release(&self, pid: i32) {
        self.control
            .release
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pid);
        self.until_seen();
    }

    /// Hold no more forks, and let go of those held: the session looks for
    /// no more children.
    pub fn stop_holding(&self) {
        self.control.no_holding.store(true, Ordering::SeqCst);
        self.until_seen();
    }

    /// Wake the tracer until it has acted on the request just made.
    fn until_seen(&self) {
        let c = &self.control;
        let request = c.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let deadline = Instant::now() + RELEASE_WITHIN;
        while c.seen.load(Ordering::SeqCst) < request
            && !c.over.load(Ordering::SeqCst)
            && Instant::now() < deadline
        {
            self.wake();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Wake the tracer thread from its wait, to see what it is asked.
    fn wake(&self) {
        let tid = self.control.tid.load(Ordering::SeqCst);
        if tid != 0 {
            // SAFETY: tgkill takes plain integers; aimed at our own
            // tracer thread, whose handler for it does nothing.
            unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_tgkill,
                    nix::unistd::getpid().as_raw(),
                    tid,
                    wake_signal(),
                );
            }
        }
    }

    /// End the following: every traced process is detached (and goes on
    /// running, or exits, as without tachyon). The program's exit status
    /// if it exited while traced (then it was reaped: `Child::wait` would
    /// not find it).
    pub fn finish(&self) -> Option<ExitStatus> {
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        self.control.stop.store(true, Ordering::SeqCst);
        while !thread.is_finished() {
            self.wake();
            std::thread::sleep(Duration::from_millis(2));
        }
        thread.join().ok().flatten()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_read_as_the_shell_would() {
        assert_eq!(exited(3).code(), Some(3));
        assert_eq!(exited(256 + 4).code(), Some(4));
        assert_eq!(killed(Signal::SIGTERM, false).signal(), Some(15));
        assert_eq!(killed(Signal::SIGSEGV, true).signal(), Some(11));
        assert!(killed(Signal::SIGSEGV, true).core_dumped());
    }

    #[test]
    fn only_stop_signals_make_group_stops() {
        assert!(is_stop_signal(Signal::SIGSTOP));
        assert!(is_stop_signal(Signal::SIGTSTP));
        assert!(!is_stop_signal(Signal::SIGTRAP));
        assert!(!is_stop_signal(Signal::SIGCONT));
    }
}
