//! The command line: parse, dispatch, print errors as one line.
//! `anyhow` lives here and nowhere else.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tachyon: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
