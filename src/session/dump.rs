//! `dump`: one consistent read of a process's stacks, as its steps. The
//! command line drives them and formats the result.
//!
//! Without `--blocking` the target runs while it is read, so a torn read
//! is retried a few times before it is reported. With it, the threads are
//! stopped for the read, and since a stopped thread reads as stopped, each
//! thread's CPU state is taken from `/proc` the instant before and put in
//! the sample's status bits after.

use crate::error::{Error, Result};
use crate::model::{Sample, status};
use crate::process::Target;
use crate::process::corefile::CoreFile;
use crate::process::linux::LinuxProcess;
use crate::process::ptrace::StoppedThreads;
use crate::session::open::{OpenError, enable_async};
use crate::session::snapshot::Recorder;
use crate::unwind::asyncio::AsyncMode;
use crate::unwind::locks::Waited;
use crate::unwind::{UnwindOptions, Unwinder};

/// Reads tried before a torn stack is reported.
const TRIES: usize = 5;

/// The unwinder of a dump: every range it reads is kept when `record`
/// (`--snapshot`); with `asyncio`, the target must have imported asyncio.
pub fn open(
    pid: i32,
    opts: UnwindOptions,
    asyncio: Option<AsyncMode>,
    record: bool,
) -> std::result::Result<Unwinder<Recorder<LinuxProcess>>, OpenError> {
    let proc = LinuxProcess::open(pid)?;
    let rt = super::locate(&proc)?;
    let rec = match record {
        true => Recorder::new(proc),
        false => Recorder::passthrough(proc),
    };
    let mut unwinder = Unwinder::new(rec, pid, rt, opts);
    if let Some(mode) = asyncio {
        enable_async(&mut unwinder, mode, true)?;
    }
    Ok(unwinder)
}

/// The unwinder of `dump --core`: the runtime found in the core file as
/// in a live process. A core whose process is not a Python tachyon reads
/// is refused with the core's name, pid and command.
pub fn open_core(core: CoreFile, opts: UnwindOptions) -> Result<Unwinder<CoreFile>> {
    let rt = crate::runtime::locate(&core, &super::verify::layout).map_err(|e| match e {
        Error::NotPython { pid, why } => Error::BadCore(format!(
            "the core's process {pid} ({}) is not a Python tachyon can read: {why}",
            core.command.as_deref().unwrap_or("command unknown")
        )),
        e => e,
    })?;
    let pid = Target::pid(&core);
    Ok(Unwinder::new(core, pid, rt, opts))
}

/// The threads of `proc`, stopped (`--blocking`), with the CPU state of
/// each the instant before.
pub type Stopped = (StoppedThreads, Vec<(u64, Option<char>)>);

/// Stop every thread of `proc`, their states read first.
pub fn stop(proc: &LinuxProcess) -> Result<Stopped> {
    let before = proc
        .thread_ids()?
        .into_iter()
        .map(|tid| (tid as u64, proc.thread_state(tid as u64)))
        .collect();
    Ok((StoppedThreads::stop(proc)?, before))
}

/// Why no consistent stack was read.
#[derive(Debug)]
pub enum Unread {
    /// The process cannot be read at all.
    Fatal(Error),
    /// Every try was torn: the last one's reason.
    Torn(Error),
}

/// Read one sample of `unwinder` into `sample`, retrying torn reads.
pub fn read_consistent<M: crate::process::ProcessMemory>(
    unwinder: &mut Unwinder<M>,
    sample: &mut Sample,
) -> std::result::Result<(), Unread> {
    let mut last = None;
    for _ in 0..TRIES {
        match unwinder.sample(sample) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_fatal() => return Err(Unread::Fatal(e)),
            Err(e) => last = Some(e),
        }
    }
    Err(Unread::Torn(last.expect("at least one try")))
}

/// `dump --locals`: the locals of every Python frame of `sample`, whose
/// walks kept their frames' places ([`Unwinder::keep_frame_places`]).
pub fn read_locals<M: crate::process::ProcessMemory>(
    u: &Unwinder<M>,
    sample: &Sample,
) -> Vec<crate::unwind::locals::ThreadLocals> {
    let reader = crate::unwind::locals::LocalsReader::new(u.memory(), u.offsets());
    (0..sample.threads.len())
        .map(|i| {
            u.frame_places(i)
                .iter()
                .map(|p| {
                    let l = reader.frame_locals(p).map_err(|e| e.to_string());
                    (p.index, l)
                })
                .collect()
        })
        .collect()
}

/// `dump --locals`: per stack of `sample`, the lock its thread waits
/// for, where that is exactly known (3.14+), with the stack of an
/// `RLock`'s owner. Not per task (`--async-aware`): a task's stack is not
/// a thread's, and its coroutine frames wait for no lock of their own.
pub fn read_lock_waits<M: crate::process::ProcessMemory>(
    u: &Unwinder<M>,
    sample: &Sample,
) -> Vec<Option<Waited>> {
    let n = sample.threads.len();
    let v = u.offsets().version;
    let ops = crate::opcodes::table(v.major as u32, v.minor as u32);
    let Some(ops) = ops.filter(|_| u.task_leaves().is_none()) else {
        return vec![None; n];
    };
    let reader = crate::unwind::locals::LocalsReader::new(u.memory(), u.offsets());
    (0..n)
        .map(|i| {
            let leaf = u.frame_places(i).first()?;
            let lock = reader.lock_wait(leaf, ops)?;
            let owner = lock
                .owner_ident
                .and_then(|id| (0..n).position(|j| u.thread_ident(j) == Some(id)));
            Some(Waited {
                lock,
                frame: leaf.index,
                owner,
            })
        })
        .collect()
}

/// Put the CPU states read before the threads were stopped (`before`)
/// into the sample's status bits, in place of "stopped".
pub fn restore_cpu_states(sample: &mut Sample, before: &[(u64, Option<char>)]) {
    for t in &mut sample.threads {
        if let Some(&(_, Some(state))) = before.iter().find(|(tid, _)| *tid == t.tid) {
            t.status &= !(status::UNKNOWN | status::ON_CPU);
            t.status |= state_bits(state);
        }
    }
}

/// The status bits of a thread in `/proc` state `state`.
fn state_bits(state: char) -> u32 {
    match state {
        'R' => status::ON_CPU,
        'S' | 'D' | 'T' | 'Z' | 'I' | 'X' => 0,
        _ => status::UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_thread_is_on_cpu_and_an_odd_state_is_unknown() {
        assert_eq!(state_bits('R'), status::ON_CPU);
        assert_eq!(state_bits('S'), 0);
        assert_eq!(state_bits('D'), 0);
        assert_eq!(state_bits('?'), status::UNKNOWN);
    }
}
