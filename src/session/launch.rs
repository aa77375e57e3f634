//! Starting the program to profile (`tachyon run`) so that no sample of it
//! is lost to start-up races, with nothing running inside the target.
//!
//! For `run script.py` / `run -m module` the interpreter is started under
//! ptrace and stops right after `execve`. A static build (the runtime in the
//! executable) can be located at once; a shared build (the runtime in
//! `libpython`) is stepped from system call to system call until the loader
//! has mapped `libpython`. Then the interpreter is released: sampling starts
//! before its first instruction of Python.
//!
//! For `run -- COMMAND` (wrappers such as `uv run`, shell scripts) the
//! command starts stopped and is seized with ptrace before its first
//! instruction, with fork, clone and exec followed, so every process it
//! starts is held at its exec until tachyon knows whether it is Python. The
//! first one that is gets sampled from its first instruction; then every
//! traced process is released. Where ptrace is refused (some containers),
//! the descendants are polled every half millisecond instead.
//!
//! Under `run --subprocesses` the program is started by
//! [`super::follow`], which starts it the same way (the helper, seizing,
//! `follow_until_python`) but keeps every process traced afterwards.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::signal::kill;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::process::ProcessMemory;
use crate::process::linux::LinuxProcess;
use crate::process::tree::descendants_and_self;
use crate::runtime::{self, Runtime};
use crate::session::probe::{self, Probe};

/// A started program and the Python process inside it.
pub struct Launched {
    /// The process we started (the interpreter itself, or the wrapper).
    pub child: Child,
    pub python_pid: i32,
    pub runtime: Runtime,
}

/// Where the started program's standard streams go.
#[derive(Debug, Default)]
pub enum ChildIo {
    /// tachyon's own (the terminal).
    #[default]
    Inherit,
    /// No input, output discarded, errors into this file: the terminal is
    /// the live view's.
    Quiet(std::fs::File),
}

impl ChildIo {
    pub(crate) fn apply(&self, cmd: &mut Command) -> std::io::Result<()> {
        use std::process::Stdio;
        if let ChildIo::Quiet(err) = self {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err.try_clone()?);
        }
        Ok(())
    }
}

/// The new process did not stop where it should have: end it and say so.
pub(crate) fn did_not_start(
    child: &mut Child,
    program: &OsString,
    status: impl std::fmt::Debug,
) -> Error {
    let _ = child.kill();
    let _ = child.wait();
    Error::io(
        format!(
            "{} did not start as expected ({status:?})",
            program.to_string_lossy()
        ),
        std::io::Error::other("unexpected wait status"),
    )
}

pub(crate) fn spawn_error(program: &OsString, e: std::io::Error) -> Error {
    Error::io(format!("cannot start {}", program.to_string_lossy()), e)
}

/// Start `argv` (an interpreter and its arguments) stopped at exec, locate
/// its runtime, and let it run.
pub fn launch_python(argv: &[OsString], io: &ChildIo) -> Result<Launched> {
    let (program, args) = argv.split_first().expect("argv is never empty");
    adopt_orphans();
    let mut cmd = Command::new(program);
    cmd.args(args);
    io.apply(&mut cmd).map_err(|e| spawn_error(program, e))?;
    // SAFETY: only async-signal-safe work between fork and exec.
    unsafe {
        cmd.pre_exec(|| ptrace::traceme().map_err(std::io::Error::from));
    }
    let mut child = cmd.spawn().map_err(|e| spawn_error(program, e))?;
    let pid = Pid::from_raw(child.id() as i32);
    match waitpid(pid, None) {
        Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
        Ok(other) => return Err(did_not_start(&mut child, program, other)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::io("waiting for the new process", e.into()));
        }
    }
    match locate_while_stepping(pid) {
        Ok(rt) => Ok(Launched {
            python_pid: pid.as_raw(),
            child,
            runtime: rt,
        }),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// The tracee is stopped at its first exec. Locate its runtime; if it is
/// not there yet (the loader has not mapped libpython, or a wrapper script
/// has yet to exec the interpreter), run to the next system call and try
/// again. Gives up after a bounded number of steps. Signals that arrive
/// meanwhile are delivered, not swallowed; the exec traps are ptrace events,
/// so none is left pending to kill the process after we let go.
fn locate_while_stepping(pid: Pid) -> Result<Runtime> {
    use nix::sys::ptrace::Options;
    let proc = LinuxProcess::open(pid.as_raw())?;
    let _ = ptrace::setoptions(
        pid,
        Options::PTRACE_O_TRACEEXEC | Options::PTRACE_O_TRACESYSGOOD,
    );
    let mut s = Stepper {
        pid,
        proc,
        pending: None,
        last: None,
        startup: runtime::Startup::default(),
        syscalls: SyscallWatch::default(),
        step: true,
        watching: None,
    };
    // At the exec stop: look.
    let mut look = true;
    for _ in 0..50_000 {
        if look && let Some(done) = s.look() {
            s.let_go();
            return done;
        }
        match s.next_stop()? {
            Some(worth_a_look) => look = worth_a_look,
            None => break,
        }
    }
    s.let_go();
    Err(s.last.take().unwrap_or(Error::NotPython {
        pid: pid.as_raw(),
        why: "no Python runtime appeared".into(),
    }))
}

/// A traced process run from stop to stop while its runtime is looked for.
struct Stepper {
    pid: Pid,
    proc: LinuxProcess,
    /// A signal for the process, delivered when it is resumed.
    pending: Option<Signal>,
    /// Why the last look found no runtime.
    last: Option<Error>,
    startup: runtime::Startup,
    syscalls: SyscallWatch,
    /// Stepped from system call to system call, or (a program that is no
    /// Python, such as the shell script of a pyenv shim; or a Python whose
    /// runtime's readiness a watchpoint tells) run to its next stop.
    step: bool,
    /// The address of the flag a hardware watchpoint is on.
    watching: Option<u64>,
}

impl Stepper {
    /// Look for the runtime: `Some` when the start is over, with it or
    /// with why it cannot be read.
    fn look(&mut self) -> Option<Result<Runtime>> {
        let maps = std::cell::OnceCell::new();
        let pythonish = || *maps.get_or_init(|| probe::maps_python_of(&self.proc));
        let found = probe::probe_starting(&self.proc, &mut self.startup, &pythonish);
        self.step = self.startup.python_seen() || pythonish();
        match found {
            Probe::Python(rt) => return Some(Ok(*rt)),
            // The interpreter itself: whatever stops it being read
            // ends the start.
            Probe::Refused(e) | Probe::Unready(e) => return Some(Err(e)),
            Probe::NotYet(e) | Probe::NotPython(e) => self.last = Some(e),
        }
        self.watching = watch_ready_flag(&self.proc, &self.startup, self.watching);
        if self.watching.is_some() {
            self.step = false;
        }
        None
    }

    /// Resume the process to its next system-call entry or exit (or
    /// signal, or exec) and wait for it. `Some`: whether it is worth a
    /// look there; `None`: it could not be resumed; `Err`: it exited.
    fn next_stop(&mut self) -> Result<Option<bool>> {
        let pid = self.pid;
        let resumed = if self.step {
            ptrace::syscall(pid, self.pending.take())
        } else {
            ptrace::cont(pid, self.pending.take())
        };
        if resumed.is_err() {
            return Ok(None);
        }
        let look = match waitpid(pid, None) {
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_) => {
                return Err(Error::ProcessExited { pid: pid.as_raw() });
            }
            // The trap of our watchpoint is no signal for the process.
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP))
                if self.watching.is_some() && watchpoint::hit(pid) =>
            {
                true
            }
            Ok(WaitStatus::Stopped(_, sig)) => {
                self.pending = Some(sig);
                false
            }
            // The only event asked for: an exec, a new program (which
            // has no watchpoints: the kernel drops them at exec).
            Ok(WaitStatus::PtraceEvent(..)) => {
                self.startup.exec();
                self.watching = None;
                true
            }
            Ok(WaitStatus::PtraceSyscall(_)) => self.syscalls.worth_a_look(pid, &self.startup),
            Ok(_) => false,
        };
        Ok(Some(look))
    }

    /// Let the process go, its pending signal delivered.
    fn let_go(&self) {
        if self.watching.is_some() {
            watchpoint::clear(self.pid);
        }
        let _ = ptrace::detach(self.pid, self.pending);
    }
}

/// After a look found a 3.11/3.12 runtime not initialised yet: the flag
/// to watch (already watched, or a watchpoint set on it now), so the
/// process runs until it writes there instead of stopping at each system
/// call. `None`: step instead (no address yet; no watchpoint here; or the
/// flag says ready while the runtime was not, so a write there is no
/// sign any more).
pub(crate) fn watch_ready_flag(
    proc: &LinuxProcess,
    startup: &runtime::Startup,
    watching: Option<u64>,
) -> Option<u64> {
    let pid = Pid::from_raw(proc.pid());
    let Some(flag) = startup.ready_flag() else {
        if watching.is_some() {
            watchpoint::clear(pid);
        }
        return None;
    };
    let mut value = [0u8; 4];
    let set = proc.read(flag, &mut value).is_ok() && value == [1, 0, 0, 0];
    if set {
        if watching.is_some() {
            watchpoint::clear(pid);
        }
        return None;
    }
    if watching == Some(flag) {
        return watching;
    }
    watchpoint::set(pid, flag).then_some(flag)
}

/// A hardware watchpoint on a 4-byte word of a stopped tracee: it traps
/// (`SIGTRAP`) right after the tracee writes there. Set in the tracee's
/// debug registers through ptrace, nothing is written to its memory.
#[cfg(target_arch = "x86_64")]
pub(crate) mod watchpoint {
    use nix::libc;
    use nix::unistd::Pid;

    /// Where debug register `i` is in the tracee's `struct user`.
    fn offset(i: usize) -> usize {
        std::mem::offset_of!(libc::user, u_debugreg) + i * 8
    }

    fn poke(pid: Pid, i: usize, value: u64) -> bool {
        // SAFETY: POKEUSER takes plain integers, checked by the kernel.
        unsafe {
            libc::ptrace(
                libc::PTRACE_POKEUSER,
                pid.as_raw(),
                offset(i),
                value as usize,
            ) == 0
        }
    }

    fn peek(pid: Pid, i: usize) -> Option<u64> {
        // SAFETY: PEEKUSER takes plain integers; errno tells a failure
        // from a value of -1.
        unsafe {
            *libc::__errno_location() = 0;
            let v = libc::ptrace(libc::PTRACE_PEEKUSER, pid.as_raw(), offset(i), 0usize);
            (*libc::__errno_location() == 0).then_some(v as u64)
        }
    }

    /// DR7: breakpoint 0 enabled (L0), on writes (R/W0 = 01), of 4 bytes
    /// (LEN0 = 11).
    const WRITE_4_BYTES: u64 = 1 | (0b01 << 16) | (0b11 << 18);

    pub fn set(pid: Pid, addr: u64) -> bool {
        if !addr.is_multiple_of(4) {
            return false;
        }
        if poke(pid, 0, addr) && poke(pid, 7, WRITE_4_BYTES) {
            return true;
        }
        clear(pid);
        false
    }

    /// Whether the tracee stopped for the watchpoint (DR6's B0), which
    /// is then acknowledged.
    pub fn hit(pid: Pid) -> bool {
        let hit = peek(pid, 6).is_some_and(|dr6| dr6 & 1 != 0);
        if hit {
            poke(pid, 6, 0);
        }
        hit
    }

    pub fn clear(pid: Pid) {
        poke(pid, 7, 0);
        poke(pid, 0, 0);
        poke(pid, 6, 0);
    }
}

/// No watchpoints on other machines: the process is stepped.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) mod watchpoint {
    use nix::unistd::Pid;
    pub fn set(_: Pid, _: u64) -> bool {
        false
    }
    pub fn hit(_: Pid) -> bool {
        false
    }
    pub fn clear(_: Pid) {}
}

/// Which system-call stops of a stepped process are worth a look for its
/// runtime. Until it is known to be a Python, only the stops where its
/// memory map may just have changed (the exit of `mmap`, `mprotect`,
/// `munmap`, `mremap`): the runtime appears when the loader maps it. Once
/// it is a Python waiting for its runtime's initialisation, every stop
/// (that look is one read of its memory). Where the kernel cannot say
/// which call a stop is (`PTRACE_GET_SYSCALL_INFO`, Linux 5.3), every
/// stop.
#[derive(Default)]
pub(crate) struct SyscallWatch {
    /// The call the process entered last, not exited yet.
    entered: HashMap<Pid, u64>,
}

impl SyscallWatch {
    pub(crate) fn worth_a_look(&mut self, pid: Pid, startup: &runtime::Startup) -> bool {
        let entered = self.entered.remove(&pid);
        if startup.python_seen() {
            return true;
        }
        match syscall_stop(pid) {
            SyscallStop::Entry(nr) => {
                self.entered.insert(pid, nr);
                false
            }
            SyscallStop::Exit => entered.is_none_or(changes_maps),
            SyscallStop::Unknown => true,
        }
    }

    pub(crate) fn forget(&mut self, pid: Pid) {
        self.entered.remove(&pid);
    }
}

enum SyscallStop {
    /// Entering the call of this number.
    Entry(u64),
    Exit,
    Unknown,
}

/// Which system-call stop `pid` is at.
fn syscall_stop(pid: Pid) -> SyscallStop {
    use nix::libc;
    // SAFETY: a plain C struct, all zeroes is a valid value; the kernel
    // writes at most `size_of` bytes into it.
    let mut info: libc::ptrace_syscall_info = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::ptrace_syscall_info>();
    // SAFETY: the pointer and size describe `info`, which outlives the call.
    let got = unsafe {
        libc::ptrace(
            libc::PTRACE_GET_SYSCALL_INFO,
            pid.as_raw(),
            size,
            &mut info as *mut libc::ptrace_syscall_info,
        )
    };
    if got <= 0 {
        return SyscallStop::Unknown;
    }
    match info.op {
        // SAFETY: at an entry stop the kernel filled the `entry` member.
        libc::PTRACE_SYSCALL_INFO_ENTRY => SyscallStop::Entry(unsafe { info.u.entry.nr }),
        libc::PTRACE_SYSCALL_INFO_EXIT => SyscallStop::Exit,
        _ => SyscallStop::Unknown,
    }
}

/// Whether system call `nr` may change the memory map.
fn changes_maps(nr: u64) -> bool {
    use nix::libc;
    [
        libc::SYS_mmap,
        libc::SYS_mprotect,
        libc::SYS_munmap,
        libc::SYS_mremap,
    ]
    .iter()
    .any(|&n| n as u64 == nr)
}

/// Start `argv` (any command) and wait for the first Python process among
/// it and its descendants.
pub fn launch_command(argv: &[OsString], timeout: Duration, io: &ChildIo) -> Result<Launched> {
    let (program, _) = argv.split_first().expect("argv is never empty");
    adopt_orphans();
    // The command starts as tachyon itself in helper mode, which stops
    // itself and, once continued, execs the command: so it can be seized
    // before the command's first instruction. (Stopping in a pre_exec hook
    // instead would deadlock: spawn() waits for the exec.)
    let me = std::env::current_exe()
        .map_err(|e| Error::io("cannot find tachyon's own executable", e))?;
    let mut cmd = Command::new(me);
    cmd.arg(HELPER_FLAG).args(argv);
    io.apply(&mut cmd).map_err(|e| spawn_error(program, e))?;
    let mut child = cmd.spawn().map_err(|e| spawn_error(program, e))?;
    let root = Pid::from_raw(child.id() as i32);
    match waitpid(root, Some(WaitPidFlag::WUNTRACED)) {
        Ok(WaitStatus::Stopped(_, Signal::SIGSTOP)) => {}
        other => return Err(did_not_start(&mut child, program, other)),
    }
    use nix::sys::ptrace::Options;
    let opts = Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACESYSGOOD;
    if ptrace::seize(root, opts).is_err() {
        // No ptrace here: let it run and watch from outside.
        let _ = kill(root, Signal::SIGCONT);
        return poll_for_python(child, timeout);
    }
    let _ = kill(root, Signal::SIGCONT);
    match follow_until_python(root, false) {
        Ok((pid, runtime, _)) => Ok(Launched {
            child,
            python_pid: pid.as_raw(),
            runtime,
        }),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// The hidden first argument of helper mode (see [`launch_command`]).
pub(crate) const HELPER_FLAG: &str = "--tachyon-internal-exec-stopped";

/// Helper mode: when this process was started as `tachyon
/// --tachyon-internal-exec-stopped COMMAND...`, stop until continued, then
/// become COMMAND. Returns an exit code only if the exec failed; `None` when
/// not in helper mode.
pub fn exec_stopped_helper() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os();
    let _me = args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(HELPER_FLAG)) {
        return None;
    }
    let program = args.next()?;
    let rest: Vec<OsString> = args.collect();
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
    let err = Command::new(&program).args(&rest).exec();
    crate::errln!("tachyon: cannot start {}: {err}", program.to_string_lossy());
    Some(std::process::ExitCode::from(127))
}

/// Drive the seized command until one of its processes turns out to be
/// Python, then release every traced process, or with `keep` let them all
/// go on traced (the Python one too) and return them, for
/// [`super::follow`] to go on tracing. Runs in the thread that seized the
/// command (ptrace requests must come from the tracer).
pub(crate) fn follow_until_python(root: Pid, keep: bool) -> Result<(Pid, Runtime, Vec<Pid>)> {
    let mut seized = Seized {
        root,
        tracees: vec![root],
        stepping: Vec::new(),
        startups: HashMap::new(),
        syscalls: SyscallWatch::default(),
    };
    let (pid, rt) = loop {
        let status = match waitpid(None, Some(WaitPidFlag::__WALL)) {
            Ok(s) => s,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Error::io("following the command", e.into())),
        };
        if let Some(found) = seized.on(status)? {
            break found;
        }
    };
    if keep {
        // Processes still stepped stop at their next system call; the
        // tracer then lets them run on.
        let _ = ptrace::cont(pid, None);
    } else {
        release(&seized.tracees, Some(pid));
    }
    Ok((pid, rt, seized.tracees))
}

/// The processes of a seized command, followed until one is Python.
struct Seized {
    root: Pid,
    tracees: Vec<Pid>,
    /// Processes that exec'd something python-like whose runtime is not
    /// mapped yet (a shared build): stepped from system call to system call.
    stepping: Vec<Pid>,
    /// What each stepped process was found to be so far.
    startups: HashMap<Pid, runtime::Startup>,
    syscalls: SyscallWatch,
}

impl Seized {
    /// One stop of one of the command's processes: `Some` when it is
    /// Python, the others left stopped or running.
    fn on(&mut self, status: WaitStatus) -> Result<Option<(Pid, Runtime)>> {
        use nix::sys::ptrace::Event;
        match status {
            WaitStatus::PtraceEvent(pid, _, ev) if ev == Event::PTRACE_EVENT_EXEC as i32 => {
                return self.exec(pid);
            }
            WaitStatus::PtraceEvent(pid, _, ev)
                if ev == Event::PTRACE_EVENT_FORK as i32
                    || ev == Event::PTRACE_EVENT_VFORK as i32
                    || ev == Event::PTRACE_EVENT_CLONE as i32 =>
            {
                if let Ok(new) = ptrace::getevent(pid) {
                    self.tracees.push(Pid::from_raw(new as i32));
                }
                self.resume(pid, None);
            }
            // A group stop, or the first stop of a newly traced process.
            WaitStatus::PtraceEvent(pid, _, _) => {
                self.adopt(pid);
                self.resume(pid, None);
            }
            WaitStatus::PtraceSyscall(pid) => return self.syscall(pid),
            // A signal for the process: deliver it.
            WaitStatus::Stopped(pid, sig) => {
                self.adopt(pid);
                self.resume(pid, Some(sig));
            }
            WaitStatus::Exited(pid, code) => {
                self.gone(pid, || format!("exited with code {code}"))?
            }
            WaitStatus::Signaled(pid, sig, _) => {
                self.gone(pid, || format!("was killed by {sig}"))?
            }
            _ => {}
        }
        Ok(None)
    }

    /// Let `pid` run to its next stop: its next system call if stepped.
    fn resume(&self, pid: Pid, sig: Option<Signal>) {
        let _ = if self.stepping.contains(&pid) {
            ptrace::syscall(pid, sig)
        } else {
            ptrace::cont(pid, sig)
        };
    }

    /// A process not known yet stopped: it is traced.
    fn adopt(&mut self, pid: Pid) {
        if !self.tracees.contains(&pid) {
            self.tracees.push(pid);
        }
    }

    /// `pid` exec'd: look at the new program.
    fn exec(&mut self, pid: Pid) -> Result<Option<(Pid, Runtime)>> {
        self.stepping.retain(|&p| p != pid);
        let startup = self.startups.entry(pid).or_default();
        startup.exec();
        self.syscalls.forget(pid);
        match look_traced(pid, startup) {
            Traced::Python(rt) => return Ok(Some((pid, *rt))),
            Traced::Maybe => {
                self.stepping.push(pid);
                self.resume(pid, None);
            }
            Traced::Refused(e) => {
                release(&self.tracees, None);
                return Err(e);
            }
            Traced::No => self.resume(pid, None),
        }
        Ok(None)
    }

    /// A stepped process is at a system call: look again, if worth it.
    fn syscall(&mut self, pid: Pid) -> Result<Option<(Pid, Runtime)>> {
        let startup = self.startups.entry(pid).or_default();
        if !self.syscalls.worth_a_look(pid, startup) {
            self.resume(pid, None);
            return Ok(None);
        }
        match look_traced(pid, startup) {
            Traced::Python(rt) => return Ok(Some((pid, *rt))),
            Traced::Refused(e) => {
                release(&self.tracees, None);
                return Err(e);
            }
            _ => self.resume(pid, None),
        }
        Ok(None)
    }

    /// `pid` exited or was killed (`how`): the command's root ends the
    /// search, with no Python started.
    fn gone(&mut self, pid: Pid, how: impl FnOnce() -> String) -> Result<()> {
        self.tracees.retain(|&p| p != pid);
        self.stepping.retain(|&p| p != pid);
        self.startups.remove(&pid);
        self.syscalls.forget(pid);
        if pid == self.root {
            release(&self.tracees, None);
            return Err(Error::NoPythonStarted { how: how() });
        }
        Ok(())
    }
}

/// What a traced process of a command is to its tracer.
pub(crate) enum Traced {
    Python(Box<Runtime>),
    /// Looks like an interpreter whose runtime is not ready yet: stepped.
    Maybe,
    No,
    /// A Python tachyon cannot read (too old, free-threaded, a layout
    /// that does not fit): the command's start fails on it.
    Refused(Error),
}

/// [`probe::probe_starting`] for a traced process of a command: a process
/// not ours to read (a setuid program the command runs) is not Python to
/// it, and only one that maps an interpreter's file is stepped.
pub(crate) fn look_traced(pid: Pid, startup: &mut runtime::Startup) -> Traced {
    let Ok(proc) = LinuxProcess::open(pid.as_raw()) else {
        return Traced::No;
    };
    let maps = std::cell::OnceCell::new();
    let pythonish = || *maps.get_or_init(|| probe::maps_python_of(&proc));
    match probe::probe_starting(&proc, startup, &pythonish) {
        Probe::Python(rt) => Traced::Python(rt),
        Probe::Refused(e) if !matches!(e, Error::PermissionDenied { .. }) => Traced::Refused(e),
        _ if pythonish() => Traced::Maybe,
        _ => Traced::No,
    }
}

/// Detach from every traced process. `stopped` is already in a ptrace
/// stop; the others are interrupted first (possible because they were
/// seized) and detached at their stop, their pending signal delivered.
fn release(tracees: &[Pid], stopped: Option<Pid>) {
    let mut left = HashSet::new();
    for &t in tracees {
        if Some(t) == stopped {
            let _ = ptrace::detach(t, None);
        } else if ptrace::interrupt(t).is_ok() {
            left.insert(t);
        }
    }
    detach_at_stops(left, Duration::from_secs(2), |_| {});
}

/// Let go of traced tasks `left`, each interrupted or about to stop: wait
/// (at most `within`) for each one's stop and detach it there, the signal
/// it stopped for delivered. A task caught at a fork brings its new child,
/// traced too, into `left`. Any other status (an exit) goes to `other`.
pub(crate) fn detach_at_stops(
    mut left: HashSet<Pid>,
    within: Duration,
    mut other: impl FnMut(WaitStatus),
) {
    use nix::sys::ptrace::Event;
    let deadline = Instant::now() + within;
    while !left.is_empty() && Instant::now() < deadline {
        let status = match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            Ok(s) => s,
            Err(_) => break,
        };
        let Some(pid) = status.pid() else { continue };
        match status {
            WaitStatus::Stopped(_, sig) => {
                let _ = ptrace::detach(pid, Some(sig));
            }
            WaitStatus::PtraceEvent(_, _, ev)
                if ev == Event::PTRACE_EVENT_FORK as i32
                    || ev == Event::PTRACE_EVENT_VFORK as i32
                    || ev == Event::PTRACE_EVENT_CLONE as i32 =>
            {
                // Caught at a fork before our interrupt: its new child is
                // traced too, and stops at its first instruction.
                if let Ok(new) = ptrace::getevent(pid) {
                    left.insert(Pid::from_raw(new as i32));
                }
                let _ = ptrace::detach(pid, None);
            }
            WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_) => {
                let _ = ptrace::detach(pid, None);
            }
            s => other(s),
        }
        left.remove(&pid);
    }
}

/// The command already runs: poll its descendants for a Python process.
pub(crate) fn poll_for_python(mut child: Child, timeout: Duration) -> Result<Launched> {
    let root = child.id() as i32;
    let deadline = Instant::now() + timeout;
    let mut refused: Option<Error> = None;
    loop {
        for pid in descendants_and_self(root) {
            match probe::probe(pid) {
                Probe::Python(rt) => {
                    return Ok(Launched {
                        child,
                        python_pid: pid,
                        runtime: *rt,
                    });
                }
                // Kept to say why no Python started, if none does.
                Probe::Refused(e) if !matches!(e, Error::PermissionDenied { .. }) => {
                    refused = Some(e)
                }
                Probe::Unready(e @ Error::LayoutMismatch { .. }) => refused = Some(e),
                _ => {}
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(refused.unwrap_or(Error::NoPythonStarted {
                how: format!("exited ({status})"),
            }));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(refused.unwrap_or(Error::NoPythonStarted {
                how: format!("ran for {} s", timeout.as_secs()),
            }));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Wait for a Python process among `root`'s descendants that is not in
/// `seen`, while `keep_waiting` says so; used to follow a command's next
/// interpreter when the one being profiled exits (a wrapper that probes an
/// interpreter first, a script that runs several programs).
pub fn next_python(
    root: i32,
    seen: &[i32],
    keep_waiting: &dyn Fn() -> bool,
) -> Option<(i32, Runtime)> {
    // Processes found not to be Python (the wrapper itself, a shell), by
    // what they run: looked at again only once that changes (an exec, a
    // libpython loaded). Parsing a 40 MB wrapper binary every half
    // millisecond made the next interpreter late on a busy machine.
    let mut not_python: std::collections::HashMap<i32, String> = Default::default();
    loop {
        for pid in descendants_and_self(root) {
            if seen.contains(&pid) {
                continue;
            }
            let what = what_it_runs(pid);
            if not_python.get(&pid) == Some(&what) {
                continue;
            }
            match probe::probe(pid) {
                Probe::Python(rt) => return Some((pid, *rt)),
                Probe::NotPython(Error::NotPython { .. })
                | Probe::NotYet(Error::NotPython { .. }) => {
                    not_python.insert(pid, what);
                }
                _ => {}
            }
        }
        if !keep_waiting() {
            return None;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// What a process runs, as far as finding Python goes: its executable and
/// how many of its mappings are Python's.
fn what_it_runs(pid: i32) -> String {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let pythons = maps.lines().filter(|l| l.contains("python")).count();
    format!("{exe}|{pythons}")
}

/// How long the first Python of a command is waited for.
const FIRST_PYTHON_WITHIN: Duration = Duration::from_secs(30);

/// Start the program to profile, `argv`: a `command` (any program, whose
/// first Python process is waited for) or an interpreter and its script;
/// with `follow` (`run --subprocesses`) under a tracer that goes on
/// following every process it starts, when ptrace allows.
pub fn start(
    argv: &[OsString],
    command: bool,
    follow: bool,
    io: &ChildIo,
) -> Result<(Launched, Option<super::follow::Follower>)> {
    match (follow, command) {
        (true, _) => super::follow::launch(argv, FIRST_PYTHON_WITHIN, io),
        (false, true) => Ok((launch_command(argv, FIRST_PYTHON_WITHIN, io)?, None)),
        (false, false) => Ok((launch_python(argv, io)?, None)),
    }
}

/// The profile could not begin: end the program (it must not outlive
/// tachyon) and reap it.
pub fn abandon(child: &mut Child, tracer: Option<&super::follow::Follower>) {
    let reaped = tracer.and_then(super::follow::Follower::finish);
    end_program(child, Duration::from_secs(2));
    if reaped.is_none() {
        let _ = child.wait();
    }
}

/// The profile is over: let go of every traced process, end the program
/// if it outlived sampling (duration over, Ctrl-C; not when the
/// `target_exited`), as the reference does, politely first, and reap it.
/// Its exit status, and whether tachyon ended it.
pub fn end(
    child: &mut Child,
    tracer: Option<&super::follow::Follower>,
    target_exited: bool,
) -> std::io::Result<(std::process::ExitStatus, bool)> {
    // No process stays traced past the profile; the tracer has the
    // program's exit status if it exited meanwhile (and reaped it).
    let reaped = tracer.and_then(super::follow::Follower::finish);
    let ended_by_us =
        reaped.is_none() && child.try_wait().ok().flatten().is_none() && !target_exited;
    if ended_by_us {
        end_program(child, Duration::from_secs(2));
    }
    let status = match reaped {
        Some(status) => status,
        None => child.wait()?,
    };
    Ok((status, ended_by_us))
}

/// Make the processes the program leaves behind (the children of a script
/// whose shell exited) tachyon's rather than init's, so that ending the
/// program ([`end_program`]) finds every process it started. The child
/// stays in tachyon's process group: a terminal's Ctrl-C reaches the
/// program and tachyon alike, as without a profiler.
pub(crate) fn adopt_orphans() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// End the program tachyon started and every process it started in turn:
/// SIGTERM to each, then, after `grace`, SIGKILL to whatever is left. The
/// processes that became tachyon's are reaped; `child`'s own exit status
/// is left for the caller to collect.
pub fn end_program(child: &mut Child, grace: Duration) {
    let me = std::process::id() as i32;
    let root = child.id() as i32;
    let alive = |pid: i32| LinuxProcess::open(pid).is_ok_and(|p| p.is_alive());
    // Everything below tachyon: the program, its descendants, and the
    // orphans adopted from it.
    let tree = || -> Vec<i32> {
        descendants_and_self(me)
            .into_iter()
            .filter(|&p| p != me && alive(p))
            .collect()
    };
    let reap_adopted = || {
        for pid in descendants_and_self(me) {
            if pid != me && pid != root {
                // ECHILD for those that are not ours: harmless.
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
            }
        }
    };
    let mut signalled: Vec<i32> = Vec::new();
    let deadline = Instant::now() + grace;
    let mut sig = Signal::SIGTERM;
    // After SIGKILL, give the kernel a bounded while to finish them.
    let hard_deadline = deadline + Duration::from_secs(5);
    loop {
        let left = tree();
        if left.is_empty() || Instant::now() > hard_deadline {
            break;
        }
        if sig == Signal::SIGTERM && Instant::now() > deadline {
            sig = Signal::SIGKILL;
            signalled.clear();
        }
        for &pid in &left {
            if !signalled.contains(&pid) {
                let _ = kill(Pid::from_raw(pid), sig);
                signalled.push(pid);
            }
        }
        reap_adopted();
        std::thread::sleep(Duration::from_millis(10));
    }
    reap_adopted();
}
