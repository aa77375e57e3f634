//! Typed errors for everything below the CLI edge.
//!
//! Every message is written for the person at the terminal: one line that
//! says what went wrong and, where there is something to do, what to do.
//! `anyhow` only appears in `main.rs`; inside the crate errors stay typed so
//! the sampler can tell a fatal condition (the process is gone) from a
//! transient one (a torn read that costs one sample).

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    #[error("no such process: {pid} (check the PID; `ps -ef | grep python` lists candidates)")]
    NoSuchProcess { pid: i32 },

    #[error("permission denied reading process {pid}: {hint}")]
    PermissionDenied { pid: i32, hint: String },

    /// `run -- COMMAND` ended without ever starting Python.
    #[error("the command {how} without starting a Python process to profile")]
    NoPythonStarted { how: String },

    #[error(
        "process {pid} is not a Python process tachyon can read: {why} (for wrappers such as `uv run` or shell scripts, give the PID of the python child)"
    )]
    NotPython { pid: i32, why: String },

    #[error(
        "unsupported Python version {found} in process {pid}: tachyon reads CPython 3.11 to 3.15 (final releases and release candidates)"
    )]
    UnsupportedVersion { pid: i32, found: String },

    /// A process that the layout tachyon reads its version with does not
    /// fit (one carried for 3.11/3.12, or a free-threaded 3.14+ table
    /// whose rules come from headers): refused rather than guessed at.
    #[error(
        "process {pid} runs Python {version}, but its interpreter does not fit the layout tachyon reads that version with ({what}); it may be a build with other options or a patched CPython, which tachyon cannot read"
    )]
    LayoutMismatch {
        pid: i32,
        version: String,
        what: String,
    },

    #[error("the debug offsets table of process {pid} (Python {version}) is invalid: {what}")]
    InvalidOffsets {
        pid: i32,
        version: String,
        what: String,
    },

    /// `--blocking` must stop the threads with ptrace, and a thread has
    /// only one tracer: another tool (a debugger, strace) holds it.
    #[error(
        "process {pid} is already traced by {} (PID {tracer}); --blocking must stop its threads, which only one tracer at a time can do: detach the other tool, or profile without --blocking",
        tracer_name.as_deref().unwrap_or("another process")
    )]
    AlreadyTraced {
        pid: i32,
        tracer: i32,
        tracer_name: Option<String>,
    },

    #[error("process {pid} has exited")]
    ProcessExited { pid: i32 },

    /// `--native-frames`: a thread's native stack ran the eval loop a
    /// different number of times than its Python stack has entry frames,
    /// so the two were not read at one instant (a thread entering or
    /// leaving the loop) or the native walk was cut short. Costs the
    /// sample; never spliced.
    #[error(
        "thread {tid}: its native stack runs the eval loop {eval_frames} times, its Python stack has {python_groups} entries"
    )]
    NativeMismatch {
        tid: u64,
        eval_frames: usize,
        python_groups: usize,
    },

    /// `--native-frames`: a thread's native stack could not be walked.
    #[error("thread {tid}: its native stack cannot be walked: {why}")]
    NativeWalk { tid: u64, why: String },

    /// A read of target memory failed. Usually transient (the target moved on
    /// while we read); the sampler counts it as a failed sample.
    // The cause is part of the message (and deliberately not a `source`,
    // so error chains do not print it twice).
    #[error("cannot read {len} bytes at {addr:#x}: {cause}")]
    Read {
        addr: u64,
        len: usize,
        cause: std::io::Error,
    },

    /// Target memory was read but does not make sense (torn or corrupt).
    #[error("inconsistent target memory: {0}")]
    Corrupt(String),

    /// A thread's frame chain is not one intact stack: the target changed
    /// it while it was read (or its memory is corrupt). A reported stack
    /// is always complete, so this costs the sample.
    ///
    /// Its message holds the [`Torn`] reason, which is therefore not its
    /// `source`: an error chain would print the reason twice.
    #[error("torn stack (the target changed it while it was read): {0}")]
    Torn(Torn),

    /// One sample asked for more reads of target memory than any intact
    /// set of stacks needs: the pointers followed lead through torn or
    /// corrupt memory. The sample is given up rather than let it cost
    /// without bound.
    #[error(
        "a sample needed more than {calls} reads or {bytes} bytes of target memory (torn or corrupt memory)"
    )]
    ReadBudget { calls: u32, bytes: u64 },

    /// `--async-aware` on a 3.14+ target that has not imported asyncio
    /// yet: its task offsets are not mapped, so there is no task to show.
    /// Costs the sample; the offsets are looked for again later.
    #[error(
        "asyncio is not loaded in the target yet (no AsyncioDebug section mapped): no task stacks to sample"
    )]
    AsyncioNotLoaded,

    /// A binary profile (`.bin`) that cannot be read: what is wrong with it
    /// (the message says it is about a binary profile).
    #[error("{0}")]
    InvalidProfile(String),

    /// A core file that cannot be read: what is wrong with it (the
    /// message names the file).
    #[error("{0}")]
    BadCore(String),

    /// A local file or system operation failed; the cause is part of the
    /// message.
    #[error("{context}: {cause}")]
    Io {
        context: String,
        cause: std::io::Error,
    },
}

/// Why a frame chain is not one intact stack (see [`Error::Torn`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Torn {
    #[error("the frame at {addr:#x} cannot be read")]
    UnreadableFrame { addr: u64 },
    #[error("the frame at {addr:#x} is at an impossible address")]
    BadAddress { addr: u64 },
    #[error("the frame at {addr:#x} has owner {owner}, which no frame in a stack has")]
    UnknownOwner { addr: u64, owner: u8 },
    #[error("the frame at {addr:#x} belongs to the thread's data stack but lies outside it")]
    OutsideDataStack { addr: u64 },
    #[error("the frame at {addr:#x} lies above its callee in the data stack")]
    OutOfOrder { addr: u64 },
    #[error(
        "the frame at {addr:#x} ends at {end:#x}, not where the frame above it in the data stack begins ({expected:#x})"
    )]
    NotContiguous { addr: u64, end: u64, expected: u64 },
    #[error(
        "the newest data-stack frame ends at {end:#x}, below the stack's top, and the frame there does not link to the current frame {current:#x}"
    )]
    AboveNotLinked { end: u64, current: u64 },
    #[error("the frame at {addr:#x}, below the newest, has no code: a slot being reused")]
    NoCode { addr: u64 },
    #[error(
        "the newest frame at {addr:#x} is a generator's call, popped by its RETURN_GENERATOR: a stale slot"
    )]
    PoppedGeneratorFrame { addr: u64 },
    #[error(
        "the newest frame, a generator's at {leaf:#x}, was left while the stack was read (the thread is at {now:#x})"
    )]
    LeafLeft { leaf: u64, now: u64 },
    #[error(
        "the instruction pointer {instr_ptr:#x} is not inside the bytecode of its code object at {code:#x}: a frame read while it was pushed"
    )]
    OutsideItsCode { code: u64, instr_ptr: u64 },
    #[error(
        "the newest frame at {addr:#x}, at its first instruction, no longer runs that code linked to {previous:#x}: a frame read while it was pushed"
    )]
    JustPushed { addr: u64, previous: u64 },
    #[error("the running task's frame at {addr:#x} is not called from an eval loop's entry")]
    TaskFrameNotRunning { addr: u64 },
    #[error("the frame at {addr:#x} was reached twice (a cycle)")]
    Cycle { addr: u64 },
    #[error("the code object at {code:#x} of the frame at {addr:#x} cannot be read: {cause}")]
    UnreadableCode { addr: u64, code: u64, cause: String },
    #[error("the chain did not end in an entry frame")]
    NoEntryFrame,
    #[error("the chain ended in a generator's frame, cut from its caller by a yield")]
    SuspendedGenerator,
    #[error("the chain did not reach the thread's base frame")]
    NoBaseFrame,
    #[error(
        "the newest frame at {addr:#x}, at its first instruction, stands alone on an entry frame: a frame read while it was pushed"
    )]
    LoneFreshLeaf { addr: u64 },
    #[error("the thread's eval loop published its _PyCFrame at {cframe:#x} before its frame")]
    CFrameWithoutFrame { cframe: u64 },
    #[error("the chain holds {walked} Python frames, the thread's own count {counted}")]
    DepthMismatch { walked: u32, counted: u32 },
    #[error(
        "the thread list ends at {tail:#x} without the main thread: a thread was linked or unlinked while it was read"
    )]
    MainThreadUnlisted { tail: u64 },
    #[error(
        "the frame cache's mark vouched for the frames below the leaf, but the kept walk does not fit this sample"
    )]
    NotVouched,
    #[error(
        "the entry frame at {addr:#x} links to {previous:#x}, not to the outer eval loop's frame {expected:#x}: a stale current frame"
    )]
    StaleCurrentFrame {
        addr: u64,
        previous: u64,
        expected: u64,
    },
}

impl From<Torn> for Error {
    fn from(t: Torn) -> Self {
        Error::Torn(t)
    }
}

impl Error {
    pub fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }

    pub fn io(context: impl Into<String>, cause: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            cause,
        }
    }

    /// True when retrying cannot help: the process is gone or cannot be read
    /// at all. Everything else is a failed sample, not a failed run.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::NoSuchProcess { .. }
                | Error::ProcessExited { .. }
                | Error::PermissionDenied { .. }
                | Error::AlreadyTraced { .. }
                | Error::NotPython { .. }
                | Error::UnsupportedVersion { .. }
                | Error::InvalidOffsets { .. }
                | Error::LayoutMismatch { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_stack_gives_its_reason_once() {
        let e = Error::from(Torn::NoCode { addr: 0x10 });
        // The reason is in the message, not again as its source, which an
        // error chain (the command line's) would print after it.
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(e.to_string().matches("has no code").count(), 1, "{e}");
    }
}
