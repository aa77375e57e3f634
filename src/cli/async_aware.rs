//! `--async-aware` and `--async-mode` for `run`, `attach` and `dump`:
//! turning an unwinder to asyncio task stacks, or saying clearly why not.

use clap::ValueEnum;

use tachyon::session::open::OpenError;
use tachyon::unwind::asyncio::AsyncMode;

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

/// What the command line says of a process that could not be opened as
/// asked: a read error stays a [`tachyon::Error`] (a refused read is
/// diagnosed from it), a refusal of `--async-aware` is its own message.
pub fn open_error(e: OpenError) -> anyhow::Error {
    match e {
        OpenError::Read(e) => e.into(),
        OpenError::Unsuitable(why) => anyhow::Error::msg(why),
    }
}
