//! Opening a Python process for sampling: the one way every command and
//! every process a session follows gets its [`Unwinder`]. Locate the
//! runtime (for a carried 3.11/3.12 layout, checked against the live
//! process: [`super::locate`] does that), build the unwinder, and with
//! `--async-aware` turn it to asyncio task stacks, or say clearly why not.

use crate::error::{Error, Result};
use crate::process::ProcessMemory;
use crate::process::linux::LinuxProcess;
use crate::runtime::{self, Runtime};
use crate::unwind::asyncio::{AsyncMode, Locator};
use crate::unwind::{UnwindOptions, Unwinder};

/// How a process is opened: the same for the first process of a profile
/// and for every one it follows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opening {
    pub unwind: UnwindOptions,
    /// `--async-aware`: sample asyncio tasks, in this mode.
    pub asyncio: Option<AsyncMode>,
    /// `--mode gil`: only the GIL holder counts, so a process must have a
    /// GIL (a free-threaded build has none unless enabled at run time).
    pub needs_gil: bool,
}

/// Open `pid`, find and validate its runtime, and build an unwinder for
/// it, without asyncio: what the tests and the simplest callers share.
pub fn attach(pid: i32, opts: UnwindOptions) -> Result<Unwinder<LinuxProcess>> {
    let proc = LinuxProcess::open(pid)?;
    let rt: Runtime = super::locate(&proc)?;
    Ok(Unwinder::new(proc, pid, rt, opts))
}

/// Why a process cannot be opened as asked.
#[derive(Debug)]
pub enum OpenError {
    /// It cannot be sampled as asked: its asyncio tasks (its Python, or
    /// no asyncio yet), or the GIL holder of a build without a GIL.
    Unsuitable(String),
    /// Reading the process failed, or it is no Python tachyon reads.
    Read(Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Unsuitable(why) => f.write_str(why),
            OpenError::Read(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Unsuitable(_) => None,
            OpenError::Read(e) => std::error::Error::source(e),
        }
    }
}

impl From<Error> for OpenError {
    fn from(e: Error) -> Self {
        OpenError::Read(e)
    }
}

/// `e` and its causes, one after the other, as the command line shows an
/// error.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Make `u` sample asyncio tasks. Fails for Python before 3.14, whose
/// asyncio has no debug table; with `need_now`, also when the target has
/// not imported asyncio (yet): a one-shot dump cannot wait for it, while a
/// profile looks again as it samples.
pub fn enable_async<M: ProcessMemory>(
    u: &mut Unwinder<M>,
    mode: AsyncMode,
    need_now: bool,
) -> std::result::Result<(), OpenError> {
    let pid = u.pid();
    let rt = u.runtime().clone();
    let v = rt.offsets.version;
    if v.minor < 14 {
        return Err(OpenError::Unsuitable(format!(
            "--async-aware needs Python 3.14 or newer: process {pid} runs Python {v}, whose asyncio keeps no task table (AsyncioDebug) for a profiler to read; profile it without --async-aware"
        )));
    }
    let proc = LinuxProcess::open(pid)?;
    let found = runtime::asyncio::locate(&proc, &rt)?;
    if need_now && found.is_none() {
        return Err(OpenError::Unsuitable(format!(
            "process {pid} has not imported asyncio (no AsyncioDebug section is mapped): there are no tasks to show; dump it without --async-aware"
        )));
    }
    let locate: Locator = Box::new(move || runtime::asyncio::locate(&proc, &rt));
    u.set_async(mode, found, Some(locate));
    Ok(())
}

impl Opening {
    /// Open `pid`: locate its runtime, then [`Opening::located`].
    pub fn open(&self, pid: i32) -> std::result::Result<Unwinder<LinuxProcess>, OpenError> {
        let proc = LinuxProcess::open(pid)?;
        let rt = super::locate(&proc)?;
        let mut u = Unwinder::new(proc, pid, rt, self.unwind);
        self.ready(&mut u)?;
        Ok(u)
    }

    /// The unwinder of `pid`, whose runtime `rt` was found already (by the
    /// launcher, the tracer, a probe).
    pub fn located(
        &self,
        pid: i32,
        rt: Runtime,
    ) -> std::result::Result<Unwinder<LinuxProcess>, OpenError> {
        let proc = LinuxProcess::open(pid)?;
        let mut u = Unwinder::new(proc, pid, rt, self.unwind);
        self.ready(&mut u)?;
        Ok(u)
    }

    /// Ready an unwinder built by hand (a process a profile goes on
    /// into, its frames added to the profile's table) as the others.
    pub fn ready(&self, u: &mut Unwinder<LinuxProcess>) -> std::result::Result<(), OpenError> {
        if self.needs_gil && !u.has_gil()? {
            return Err(OpenError::Unsuitable(format!(
                "process {} runs a free-threaded build of Python {} with its GIL disabled: no thread holds a GIL, so --mode gil has nothing to count; use --mode cpu for the threads running on a CPU",
                u.pid(),
                u.offsets().version
            )));
        }
        if let Some(mode) = self.asyncio {
            enable_async(u, mode, false)?;
        }
        Ok(())
    }
}
