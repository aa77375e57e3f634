//! "Is this process Python yet?": the one answer every way in uses (the
//! launcher, the tracer of `run --subprocesses`, the children's watcher,
//! the next process of a command), and the one place that sorts what
//! [`super::locate`] (or a [`Startup`] look) says into that answer.
//!
//! How long to wait on "not yet" or "unready", and whether a refusal ends
//! the command, is each caller's: a launched interpreter that is refused
//! ends `run`, a refused child is only skipped.

use crate::error::Error;
use crate::process::linux::LinuxProcess;
use crate::process::tree;
use crate::runtime::{Runtime, Startup};

/// What a look at a process found.
#[derive(Debug)]
pub enum Probe {
    /// A Python runtime tachyon reads, ready.
    Python(Box<Runtime>),
    /// No runtime yet, in a process that runs or maps a file named like
    /// Python (an interpreter whose runtime is not mapped or not set up
    /// yet), or a read that failed on the way: look again.
    NotYet(Error),
    /// A runtime whose table or layout does not check out yet: an
    /// interpreter that has just started may not have filled it in.
    Unready(Error),
    /// A Python tachyon cannot read (too old, free-threaded, not ours to
    /// read).
    Refused(Error),
    /// Not Python, as far as what it runs now goes.
    NotPython(Error),
}

/// Look at `pid` from outside, as it runs.
pub fn probe(pid: i32) -> Probe {
    let proc = match LinuxProcess::open(pid) {
        Ok(p) => p,
        Err(e) => return Probe::NotPython(e),
    };
    sort(super::locate(&proc), false, || pythonish(pid))
}

/// Look at `proc`, stopped by its tracer, through `startup` (which parses
/// each binary once per image and checks a carried layout only once the
/// runtime is set up, so a layout that does not fit then is final).
/// `pythonish`: whether it looks like an interpreter (the caller's, who
/// asks it too, and reads the map once for both).
pub fn probe_starting(
    proc: &LinuxProcess,
    startup: &mut Startup,
    pythonish: &dyn Fn() -> bool,
) -> Probe {
    sort(startup.look(proc, &super::verify::layout), true, pythonish)
}

/// Sort an answer of [`super::locate`] (or [`Startup::look`], whose
/// layout mismatches are `final_layout`).
fn sort(
    found: crate::Result<Runtime>,
    final_layout: bool,
    pythonish: impl FnOnce() -> bool,
) -> Probe {
    match found {
        Ok(rt) => Probe::Python(Box::new(rt)),
        Err(e @ (Error::UnsupportedVersion { .. } | Error::PermissionDenied { .. })) => {
            Probe::Refused(e)
        }
        Err(e @ Error::LayoutMismatch { .. }) if final_layout => Probe::Refused(e),
        Err(e @ (Error::InvalidOffsets { .. } | Error::LayoutMismatch { .. })) => Probe::Unready(e),
        Err(e @ Error::NotPython { .. }) if !pythonish() => Probe::NotPython(e),
        Err(e) => Probe::NotYet(e),
    }
}

/// [`probe`], with the image the answer is about: a process that exec'd
/// while it was probed is probed again, a few times; one that keeps
/// changing is "not yet" (the callers' deadlines bound the waiting).
/// `None`: it is gone.
pub fn probe_image(pid: i32) -> Option<(Probe, String)> {
    const TRIES: usize = 8;
    let mut before = tree::image(pid)?;
    for _ in 0..TRIES {
        let p = probe(pid);
        let after = tree::image(pid)?;
        if after == before {
            return Some((p, before));
        }
        before = after;
    }
    let changing = Error::NotPython {
        pid,
        why: "it keeps changing what it runs".into(),
    };
    Some((Probe::NotYet(changing), before))
}

/// Does the process run or map a file named like Python (an interpreter
/// whose runtime is not mapped yet)? Its executable counts too: in the
/// middle of an exec the new image's maps hold only its stack for an
/// instant (seen under load: a child that exec'd Python was taken for
/// another program and its profile dropped).
pub fn pythonish(pid: i32) -> bool {
    let exe_named_python = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("python"))
    });
    exe_named_python || maps_python(pid)
}

/// Whether `pid` maps a file named like an interpreter (its executable,
/// or a libpython the loader has mapped).
fn maps_python(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| {
        m.lines().any(|l| {
            l.rsplit('/')
                .next()
                .is_some_and(|b| l.contains('/') && b.contains("python"))
        })
    })
}

/// Whether `proc` maps a file named like an interpreter (its executable,
/// or a libpython the loader has mapped): it may become a Python without
/// another exec. What a tracer asks before it steps a process.
pub fn maps_python_of(proc: &LinuxProcess) -> bool {
    proc.maps().is_ok_and(|m| {
        m.iter()
            .any(|e| e.basename().is_some_and(|b| b.contains("python")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_python() -> Error {
        Error::NotPython {
            pid: 1,
            why: "x".into(),
        }
    }

    fn mismatch() -> Error {
        Error::LayoutMismatch {
            pid: 1,
            version: "3.11".into(),
            what: "x".into(),
        }
    }

    #[test]
    fn a_layout_mismatch_is_final_only_once_the_runtime_is_set_up() {
        assert!(matches!(
            sort(Err(mismatch()), true, || true),
            Probe::Refused(_)
        ));
        assert!(matches!(
            sort(Err(mismatch()), false, || true),
            Probe::Unready(_)
        ));
    }

    #[test]
    fn no_runtime_is_not_yet_only_in_a_process_named_like_python() {
        assert!(matches!(
            sort(Err(not_python()), false, || true),
            Probe::NotYet(_)
        ));
        assert!(matches!(
            sort(Err(not_python()), false, || false),
            Probe::NotPython(_)
        ));
    }
}
