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
//! For `run -- COMMAND` (wrappers such as `uv run` or a shell script) the
//! command runs freely and its descendants are polled every half
//! millisecond for the first Python process; that is fast next to an
//! interpreter's start-up, but not a guarantee.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::process::linux::LinuxProcess;
use crate::runtime::{self, Runtime};

/// A started program and the Python process inside it.
pub struct Launched {
    /// The process we started (the interpreter itself, or the wrapper).
    pub child: Child,
    pub python_pid: i32,
    pub runtime: Runtime,
}

fn spawn_error(program: &OsString, e: std::io::Error) -> Error {
    Error::io(format!("cannot start {}", program.to_string_lossy()), e)
}

/// Start `argv` (an interpreter and its arguments) stopped at exec, locate
/// its runtime, and let it run.
pub fn launch_python(argv: &[OsString]) -> Result<Launched> {
    let (program, args) = argv.split_first().expect("argv is never empty");
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: only async-signal-safe work between fork and exec.
    unsafe {
        cmd.pre_exec(|| ptrace::traceme().map_err(std::io::Error::from));
    }
    let mut child = cmd.spawn().map_err(|e| spawn_error(program, e))?;
    let pid = Pid::from_raw(child.id() as i32);
    match waitpid(pid, None) {
        Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
        Ok(other) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::io(
                format!(
                    "{} did not start as expected ({other:?})",
                    program.to_string_lossy()
                ),
                std::io::Error::other("unexpected wait status"),
            ));
        }
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
    let mut pending: Option<Signal> = None;
    let mut last = None;
    for _ in 0..50_000 {
        match runtime::locate(&proc) {
            Ok(rt) => {
                let _ = ptrace::detach(pid, pending);
                return Ok(rt);
            }
            Err(
                e @ (Error::UnsupportedVersion { .. }
                | Error::FreeThreaded { .. }
                | Error::InvalidOffsets { .. }
                | Error::PermissionDenied { .. }),
            ) => {
                let _ = ptrace::detach(pid, pending);
                return Err(e);
            }
            Err(e) => last = Some(e),
        }
        // Step to the next system-call entry or exit (or signal, or exec).
        if ptrace::syscall(pid, pending.take()).is_err() {
            break;
        }
        match waitpid(pid, None) {
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_) => {
                return Err(Error::ProcessExited { pid: pid.as_raw() });
            }
            Ok(WaitStatus::Stopped(_, sig)) => pending = Some(sig),
            Ok(_) => {}
        }
    }
    let _ = ptrace::detach(pid, pending);
    Err(last.unwrap_or(Error::NotPython {
        pid: pid.as_raw(),
        why: "no Python runtime appeared".into(),
    }))
}

/// Start `argv` (any command) and wait for the first Python process among
/// it and its descendants.
pub fn launch_command(argv: &[OsString], timeout: Duration) -> Result<Launched> {
    let (program, args) = argv.split_first().expect("argv is never empty");
    let mut child = Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| spawn_error(program, e))?;
    let root = child.id() as i32;
    let deadline = Instant::now() + timeout;
    let mut refused: Option<Error> = None;
    loop {
        for pid in descendants_and_self(root) {
            let Ok(proc) = LinuxProcess::open(pid) else {
                continue;
            };
            match runtime::locate(&proc) {
                Ok(rt) => {
                    return Ok(Launched {
                        child,
                        python_pid: pid,
                        runtime: rt,
                    });
                }
                Err(e @ (Error::UnsupportedVersion { .. } | Error::FreeThreaded { .. })) => {
                    refused = Some(e)
                }
                Err(_) => {}
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(refused.unwrap_or(Error::NotPython {
                pid: root,
                why: format!("the command exited ({status}) without starting a Python process"),
            }));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(refused.unwrap_or(Error::NotPython {
                pid: root,
                why: format!("no Python process appeared within {} s", timeout.as_secs()),
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
    loop {
        for pid in descendants_and_self(root) {
            if seen.contains(&pid) {
                continue;
            }
            let Ok(proc) = LinuxProcess::open(pid) else {
                continue;
            };
            if let Ok(rt) = runtime::locate(&proc) {
                return Some((pid, rt));
            }
        }
        if !keep_waiting() {
            return None;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// `root` and every process below it, parents before children.
pub fn descendants_and_self(root: i32) -> Vec<i32> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Some(ppid) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let after = &s[s.rfind(')')? + 2..];
                    after.split_whitespace().nth(1)?.parse().ok()
                })
            {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for &(pid, ppid) in &parent_of {
            if ppid == p && !out.contains(&pid) {
                out.push(pid);
            }
        }
        i += 1;
    }
    out
}
