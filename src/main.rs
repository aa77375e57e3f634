//! The command line: parse, dispatch, print errors as one line.
//! `anyhow` lives here and nowhere else.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // `run -- COMMAND` starts the command through this very binary, which
    // stops itself until tachyon has seized it, then becomes the command.
    if let Some(code) = tachyon::session::launch::exec_stopped_helper() {
        return code;
    }
    let code = match cli::run() {
        Ok(code) => code,
        Err(mut e) => {
            // Why reading was refused depends on the target as much as on
            // tachyon: diagnosed here, where the PID is known.
            if let Some(tachyon::Error::PermissionDenied { pid, hint }) =
                e.downcast_mut::<tachyon::Error>()
            {
                *hint = cli::diagnose::why_denied(*pid);
            }
            tachyon::errln!("tachyon: error: {e:#}");
            ExitCode::from(1)
        }
    };
    // A closed pipe (`| head`) is a normal end; any other failure to write
    // standard output (a full disk) lost output the user asked for: say so,
    // and fail unless the exit code already says something did.
    match tachyon::console::stdout_error() {
        Some(e) => {
            tachyon::errln!("tachyon: error: cannot write to standard output: {e}");
            if code == ExitCode::SUCCESS {
                ExitCode::from(1)
            } else {
                code
            }
        }
        None => code,
    }
}
