//! Stopping a process's threads for a consistent snapshot (`--blocking`).
//!
//! Each thread is seized (`PTRACE_SEIZE`, which unlike `PTRACE_ATTACH` sends
//! no signal the target could notice) and interrupted; the guard detaches
//! from every thread it stopped when it is dropped, so the target always
//! runs again, even when the read in between fails or panics.
//!
//! The target keeps changing while we stop it: threads start (caught by
//! listing the threads again until a pass finds no new one), threads end
//! (`ESRCH`, or `EPERM` for one already exiting: skipped), and a signal may
//! reach a thread just as we stop it (handed back to it when it resumes,
//! never swallowed). A thread some other tool already traces cannot be
//! stopped by us: that is said as such, not as a permission problem.

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

use super::linux::{LinuxProcess, permission_hint};
use crate::error::{Error, Result};

/// Passes over the thread list before giving up on a target that starts
/// threads faster than we stop them (in practice two or three suffice:
/// once every listed thread is stopped, none can start another).
const MAX_PASSES: usize = 1000;

/// One thread we hold stopped, and the signal it was about to receive
/// when it stopped (delivered when it resumes).
struct Held {
    tid: Pid,
    signal: Option<Signal>,
}

/// Holds the target's threads stopped; resumes them on drop.
pub struct StoppedThreads {
    held: Vec<Held>,
}

/// What became of a thread we asked to stop.
enum Outcome {
    Stopped(Option<Signal>),
    Gone,
}

impl StoppedThreads {
    /// Stop every thread of `proc`. Threads that exit meanwhile are skipped;
    /// threads created meanwhile are caught by further passes.
    pub fn stop(proc: &LinuxProcess) -> Result<Self> {
        let mut guard = StoppedThreads { held: Vec::new() };
        // Threads seen and finished with (stopped, or gone).
        let mut done: Vec<i32> = Vec::new();
        for _pass in 0..MAX_PASSES {
            let mut new = 0;
            for tid in proc.thread_ids()? {
                if done.contains(&tid) {
                    continue;
                }
                done.push(tid);
                new += 1;
                let pid = Pid::from_raw(tid);
                if !seize(proc, tid)? {
                    continue;
                }
                match interrupt_and_wait(proc, pid) {
                    Outcome::Stopped(signal) => guard.held.push(Held { tid: pid, signal }),
                    Outcome::Gone => {}
                }
            }
            if new == 0 {
                if guard.held.is_empty() && !proc.is_alive() {
                    return Err(Error::ProcessExited { pid: proc.pid() });
                }
                return Ok(guard);
            }
        }
        Err(Error::io(
            format!("cannot stop process {}", proc.pid()),
            std::io::Error::other("it starts threads faster than they can be stopped"),
        ))
    }
}

/// Seize one thread. `Ok(false)`: it is gone or on its way out (skip it).
fn seize(proc: &LinuxProcess, tid: i32) -> Result<bool> {
    let pid = Pid::from_raw(tid);
    // A thread may be caught between "exiting" and "gone": ask twice
    // before calling a refusal a permission problem.
    for attempt in 0..2 {
        match ptrace::seize(pid, ptrace::Options::empty()) {
            Ok(()) => return Ok(true),
            Err(Errno::ESRCH) => return Ok(false),
            Err(Errno::EPERM) => {
                if !proc.is_alive() {
                    return Err(Error::ProcessExited { pid: proc.pid() });
                }
                match proc.thread_status(tid) {
                    ThreadStatus::Gone => return Ok(false),
                    ThreadStatus::TracedBy(tracer) if tracer != std::process::id() as i32 => {
                        return Err(Error::AlreadyTraced {
                            pid: proc.pid(),
                            tracer,
                            tracer_name: process_name(tracer),
                        });
                    }
                    _ if attempt == 0 => {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    _ => {
                        return Err(Error::PermissionDenied {
                            pid: proc.pid(),
                            hint: permission_hint(),
                        });
                    }
                }
            }
            Err(e) => {
                return Err(Error::io(
                    format!("cannot stop thread {tid} of process {}", proc.pid()),
                    std::io::Error::from_raw_os_error(e as i32),
                ));
            }
        }
    }
    Ok(false)
}

/// Interrupt a seized thread and wait until it stops (or ends).
fn interrupt_and_wait(proc: &LinuxProcess, pid: Pid) -> Outcome {
    if ptrace::interrupt(pid).is_err() {
        // Not ours any more: it ended between seize and interrupt.
        return Outcome::Gone;
    }
    // The main thread of a process we started ourselves (`run`): its exit
    // status belongs to whoever waits for the program. Look without taking
    // it; leave an exit where it is.
    if pid.as_raw() == proc.pid() && *proc.our_child.get_or_init(|| is_our_child(proc.pid())) {
        loop {
            let flags = WaitPidFlag::__WALL
                | WaitPidFlag::WEXITED
                | WaitPidFlag::WSTOPPED
                | WaitPidFlag::WNOWAIT;
            match waitid(Id::Pid(pid), flags) {
                Err(Errno::EINTR) => continue,
                Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_) => {
                    return Outcome::Gone;
                }
                Ok(_) => break,
            }
        }
    }
    loop {
        // __WALL: a thread is not our child in the usual sense.
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Err(Errno::EINTR) => continue,
            // The interrupt's stop, a group stop, or some other event stop:
            // the thread is stopped, nothing is pending.
            Ok(WaitStatus::PtraceEvent(..)) | Ok(WaitStatus::PtraceSyscall(_)) => {
                return Outcome::Stopped(None);
            }
            // A signal was being delivered: it stopped for us first. The
            // signal is handed back when the thread resumes.
            Ok(WaitStatus::Stopped(_, sig)) => return Outcome::Stopped(Some(sig)),
            Ok(WaitStatus::Continued(_)) | Ok(WaitStatus::StillAlive) => continue,
            // Ended (and reaped: a traced thread's end is ours to collect).
            Ok(_) | Err(_) => return Outcome::Gone,
        }
    }
}

/// Is `pid` a child of this process (started by `tachyon run`)?
fn is_our_child(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| status_field(&s, "PPid:"))
        == Some(std::process::id() as i32)
}

/// The command name of a process, for messages ("strace", "gdb", ...).
fn process_name(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// What `/proc/PID/task/TID/status` says about a thread that refused to be
/// seized.
pub enum ThreadStatus {
    /// Ended, or a zombie on its way out.
    Gone,
    /// Traced by this process.
    TracedBy(i32),
    /// Alive and not traced.
    Untraced,
}

/// An integer field of a status file.
pub(crate) fn status_field(status: &str, name: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

impl LinuxProcess {
    /// Is this thread gone, traced by someone, or neither?
    pub fn thread_status(&self, tid: i32) -> ThreadStatus {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid()))
        else {
            return ThreadStatus::Gone;
        };
        let state = s
            .lines()
            .find_map(|l| l.strip_prefix("State:"))
            .and_then(|v| v.trim_start().chars().next());
        if matches!(state, Some('Z') | Some('X')) {
            return ThreadStatus::Gone;
        }
        match status_field(&s, "TracerPid:") {
            Some(t) if t > 0 => ThreadStatus::TracedBy(t),
            _ => ThreadStatus::Untraced,
        }
    }
}

impl Drop for StoppedThreads {
    fn drop(&mut self) {
        for h in &self.held {
            // Fails only for a thread killed meanwhile (SIGKILL ends even a
            // stopped thread): nothing left to resume.
            let _ = ptrace::detach(h.tid, h.signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_parse() {
        let s = "Name:\tpython3\nState:\tS (sleeping)\nTgid:\t42\nPid:\t43\nTracerPid:\t0\n";
        assert_eq!(status_field(s, "Tgid:"), Some(42));
        assert_eq!(status_field(s, "TracerPid:"), Some(0));
        assert_eq!(status_field(s, "Nope:"), None);
        assert_eq!(status_field("TracerPid:\tx\n", "TracerPid:"), None);
    }
}
