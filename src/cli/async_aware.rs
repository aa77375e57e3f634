//! `--async-aware` and `--async-mode` for `run`, `attach` and `dump`:
//! turning an unwinder to asyncio task stacks, or saying clearly why not.

use anyhow::{Result, bail};
use clap::ValueEnum;

use tachyon::process::ProcessMemory;
use tachyon::process::linux::LinuxProcess;
use tachyon::unwind::Unwinder;
use tachyon::unwind::asyncio::{AsyncMode, Locator};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AsyncModeArg {
    /// Only the running task and the tasks awaiting it
    Running,
    /// Every task, waiting ones included
    All,
}

impl From<AsyncModeArg> for AsyncMode {
    fn from(m: AsyncModeArg) -> AsyncMode {
        match m {
            AsyncModeArg::Running => AsyncMode::Running,
            AsyncModeArg::All => AsyncMode::All,
        }
    }
}

/// Make `u` sample asyncio tasks. Fails for Python before 3.14, whose
/// asyncio has no debug table; with `need_now`, also when the target has
/// not imported asyncio (yet): a one-shot dump cannot wait for it, while a
/// profile looks again as it samples.
pub fn enable<M: ProcessMemory>(
    u: &mut Unwinder<M>,
    mode: AsyncMode,
    need_now: bool,
) -> Result<()> {
    let pid = u.pid();
    let rt = u.runtime().clone();
    let v = rt.offsets.version;
    if v.minor < 14 {
        bail!(
            "--async-aware needs Python 3.14 or newer: process {pid} runs Python {v}, whose asyncio keeps no task table (AsyncioDebug) for a profiler to read; profile it without --async-aware"
        );
    }
    let proc = LinuxProcess::open(pid)?;
    let found = tachyon::runtime::asyncio::locate(&proc, &rt)?;
    if need_now && found.is_none() {
        bail!(
            "process {pid} has not imported asyncio (no AsyncioDebug section is mapped): there are no tasks to show; dump it without --async-aware"
        );
    }
    let locate: Locator = Box::new(move || tachyon::runtime::asyncio::locate(&proc, &rt));
    u.set_async(mode, found, Some(locate));
    Ok(())
}
