//! The command line: parse, dispatch, print errors as one line.
//! `anyhow` lives here and nowhere else.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // `run -- COMMAND` starts the command through this very binary, which
    // stops itself until tachyon has seized it, then becomes the command.
    if let Some(code) = tachyon::sample::launch::exec_stopped_helper() {
        return code;
    }
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tachyon: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
