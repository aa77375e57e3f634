//! What an install sets up:
//! - `tachyon completions bash` loads into bash and completes;
//! - `tachyon man` renders with groff and `man -l`, without a warning.
//!
//! man and groff come from Debian (`scripts/provision-tools.sh`); a
//! missing one fails the test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Running, tachyon_bin};

/// A hang guard only; nothing here is timed.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A temporary directory, removed on drop whatever happens.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tachyon-install-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `cmd` to its end (killed, with everything it started, after
/// `timeout`); panic with its output unless it succeeded.
fn run_ok(cmd: Command, timeout: Duration) -> Output {
    let what = format!("{cmd:?}");
    let out = Running::start(cmd).finish(timeout);
    assert!(
        out.status.success(),
        "{what} failed ({})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn machine_command(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/local/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("MISSING TOOL: {name} (run scripts/provision-tools.sh)")
}

/// What bash completes for the words typed so far (the last one is the
/// word under the cursor), with tachyon's completion script loaded as a
/// user's `.bashrc` would load it.
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let body = format!(
        r#"set -e
source "$1"
complete -p tachyon
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
_tachyon tachyon "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
    );
    let mut cmd = Command::new(machine_command("bash"));
    cmd.arg("-c").arg(body).arg("bash").arg(script);
    let out = text(&run_ok(cmd, RUN_TIMEOUT).stdout);
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("complete -o bashdefault -o default -o nosort -F _tachyon tachyon"),
        "the script registers its completion function:\n{out}"
    );
    lines.map(str::to_string).collect()
}

#[test]
fn bash_completion_script_loads_and_completes_subcommands_and_flags() {
    let tmp = TempDir::new("completions");
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(["completions", "bash"]);
    let script = tmp.path().join("tachyon.bash");
    std::fs::write(&script, run_ok(cmd, RUN_TIMEOUT).stdout).unwrap();

    let mut cmd = Command::new(machine_command("bash"));
    cmd.arg("-n").arg(&script);
    run_ok(cmd, RUN_TIMEOUT);

    assert_eq!(bash_completes(&script, &["tachyon", "ru"]), ["run"]);
    assert_eq!(bash_completes(&script, &["tachyon", "re"]), ["replay"]);
    let all = bash_completes(&script, &["tachyon", ""]);
    for sub in ["run", "attach", "dump", "replay", "completions", "man"] {
        assert!(all.iter().any(|w| w == sub), "{sub} in {all:?}");
    }
    assert_eq!(
        bash_completes(&script, &["tachyon", "dump", "--all"]),
        ["--all-threads"]
    );
    assert_eq!(
        bash_completes(&script, &["tachyon", "run", "--flame"]),
        ["--flamegraph"]
    );
    assert_eq!(
        bash_completes(&script, &["tachyon", "completions", "fi"]),
        ["fish"]
    );
}

#[test]
fn completions_for_every_shell_name_the_subcommands_and_flags() {
    // Only bash is on the machine to load its script; the others are
    // checked for what they must name.
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let mut cmd = Command::new(tachyon_bin());
        cmd.args(["completions", shell]);
        let script = text(&run_ok(cmd, RUN_TIMEOUT).stdout);
        for word in ["attach", "dump", "replay", "all-threads", "flamegraph"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let out = Command::new(tachyon_bin())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid value 'tcsh'"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn man_page_renders_without_warnings_and_documents_every_subcommand() {
    let tmp = TempDir::new("man");
    let mut cmd = Command::new(tachyon_bin());
    cmd.arg("man");
    let roff = run_ok(cmd, RUN_TIMEOUT).stdout;
    let page = tmp.path().join("tachyon.1");
    std::fs::write(&page, &roff).unwrap();

    // groff with every warning on: none may come.
    let mut cmd = Command::new(machine_command("groff"));
    cmd.args(["-man", "-Tutf8", "-ww"]).arg(&page);
    let out = run_ok(cmd, RUN_TIMEOUT);
    assert_eq!(text(&out.stderr), "", "groff warns");

    // man itself, as `man -l` shows a page file.
    let mut cmd = Command::new(machine_command("man"));
    cmd.arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .env_remove("MAN_KEEP_FORMATTING");
    let out = run_ok(cmd, RUN_TIMEOUT);
    assert_eq!(text(&out.stderr), "", "man warns");
    let shown = text(&out.stdout);
    for heading in [
        "NAME",
        "SYNOPSIS",
        "TACHYON RUN",
        "TACHYON ATTACH",
        "TACHYON DUMP",
        "TACHYON REPLAY",
        "TACHYON COMPLETIONS",
        "TACHYON MAN",
        "NOTES",
        "VERSION",
    ] {
        assert!(
            shown.lines().any(|l| l == heading),
            "{heading} missing:\n{shown}"
        );
    }
    // Each subcommand's own options are on the page, with their help.
    for flag in [
        "--all-threads",
        "--flamegraph",
        "--sampling-rate",
        "--blocking",
    ] {
        assert!(shown.contains(flag), "{flag} missing:\n{shown}");
    }
    assert!(shown.contains("Sample every thread, not only the main thread"));
    assert!(shown.contains(&format!("v{}", env!("CARGO_PKG_VERSION"))));
}
