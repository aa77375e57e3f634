//! Stopping a process's threads for a consistent snapshot (`--blocking`).
//!
//! Each thread is seized (`PTRACE_SEIZE`, which unlike `PTRACE_ATTACH` sends
//! no signal the target could notice) and interrupted; the guard detaches
//! from every thread it stopped when it is dropped, so the target always
//! runs again, even when the read in between fails or panics.

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use super::linux::{LinuxProcess, permission_hint};
use crate::error::{Error, Result};

/// Holds the target's threads stopped; resumes them on drop.
pub struct StoppedThreads {
    tids: Vec<Pid>,
}

impl StoppedThreads {
    /// Stop every thread of `proc`. Threads that exit meanwhile are skipped;
    /// threads created meanwhile are caught by a second pass.
    pub fn stop(proc: &LinuxProcess) -> Result<Self> {
        let mut guard = StoppedThreads { tids: Vec::new() };
        for _pass in 0..3 {
            let mut new = 0;
            for tid in proc.thread_ids()? {
                let pid = Pid::from_raw(tid);
                if guard.tids.contains(&pid) {
                    continue;
                }
                match ptrace::seize(pid, ptrace::Options::empty()) {
                    Ok(()) => {}
                    Err(Errno::ESRCH) => continue,
                    Err(Errno::EPERM) => {
                        return Err(Error::PermissionDenied {
                            pid: proc.pid(),
                            hint: permission_hint(),
                        });
                    }
                    Err(e) => {
                        return Err(Error::io(
                            format!("cannot stop thread {tid}"),
                            std::io::Error::from_raw_os_error(e as i32),
                        ));
                    }
                }
                guard.tids.push(pid);
                new += 1;
                if ptrace::interrupt(pid).is_ok() {
                    // __WALL: the thread is not our child in the usual sense.
                    let _ = waitpid(pid, Some(WaitPidFlag::__WALL));
                }
            }
            if new == 0 {
                break;
            }
        }
        Ok(guard)
    }
}

impl Drop for StoppedThreads {
    fn drop(&mut self) {
        for &tid in &self.tids {
            let _ = ptrace::detach(tid, None);
        }
    }
}
