//! What an installer needs from the binary itself: shell completions
//! (`tachyon completions bash`) and the manual page (`tachyon man`), both
//! generated from the same clap definition as `--help`, so they can never
//! fall out of step with the flags this binary takes.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::Cli;

#[derive(Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write the completion script for
    shell: Shell,
}

pub(crate) fn completions(a: CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "tachyon", &mut buf);
    tachyon::out!("{}", String::from_utf8_lossy(&buf));
    Ok(ExitCode::SUCCESS)
}

/// One page, tachyon(1), with every subcommand's synopsis and options in
/// it: a user saves one file (`tachyon man > .../man1/tachyon.1`) and
/// `man tachyon` tells everything. clap_mangen's own page for a command
/// with subcommands points to one page per subcommand (tachyon-run(1), ...)
/// that a single redirect would not install; so the main page is built
/// from its sections, and each subcommand's sections follow under its own
/// heading instead of that list.
pub(crate) fn man() -> Result<ExitCode> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let page = clap_mangen::Man::new(cmd.clone());
    let mut buf = Vec::new();
    page.render_title(&mut buf)?;
    page.render_name_section(&mut buf)?;
    page.render_synopsis_section(&mut buf)?;
    page.render_description_section(&mut buf)?;
    page.render_options_section(&mut buf)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_page = clap_mangen::Man::new(sub.clone());
        let mut part = Vec::new();
        sub_page.render_synopsis_section(&mut part)?;
        sub_page.render_description_section(&mut part)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            sub_page.render_options_section(&mut part)?;
        }
        buf.extend_from_slice(
            format!(".SH \"TACHYON {}\"\n", sub.get_name().to_uppercase()).as_bytes(),
        );
        // Its SYNOPSIS, DESCRIPTION and OPTIONS become subsections of the
        // subcommand's section.
        for line in String::from_utf8_lossy(&part).lines() {
            match line.strip_prefix(".SH ") {
                Some(title) => buf.extend_from_slice(format!(".SS {title}\n").as_bytes()),
                None => buf.extend_from_slice(format!("{line}\n").as_bytes()),
            }
        }
    }
    page.render_extra_section(&mut buf)?;
    page.render_version_section(&mut buf)?;
    // Each section rendered alone repeats roff's two-line `Aq` preamble:
    // keep the first; clap_mangen calls the after-help text EXTRA, man
    // pages call it NOTES.
    let text = String::from_utf8_lossy(&buf);
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let preamble = line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq");
        if preamble && !seen.insert(line) {
            continue;
        }
        let line = if line == ".SH EXTRA" {
            ".SH NOTES"
        } else {
            line
        };
        tachyon::outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
