//! Installing tachyon as its users do, and what an install sets up:
//! - the wheel (maturin, `bindings = "bin"`, as py-spy ships) built once,
//!   `pip install`ed into a fresh venv, whose `tachyon` then answers
//!   `--version` and dumps a real Python 3.11 process;
//! - `cargo install --path .` into a temporary root, reusing the wheel's
//!   release build (same target directory, so one full build for both);
//! - `tachyon completions bash` loads into bash and completes;
//! - `tachyon man` renders with groff and `man -l`, without a warning.
//!
//! maturin comes from `scripts/provision-tools.sh`, man and groff from
//! Debian; a missing one fails the test. The release build lives in
//! `target/tmp/install-build`, kept between runs like the rest of
//! `target/`: the first run builds it (minutes on a busy machine), later
//! runs only relink.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

use common::{Running, TempDir, tachyon_bin, text};

/// A hang guard only: a cold release build on two shared cores takes
/// minutes; nothing here is timed.
const BUILD_TIMEOUT: Duration = Duration::from_secs(3600);
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// A temporary directory, removed on drop whatever happens.
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

fn tool(rel: &str) -> PathBuf {
    let tools = std::env::var_os("TACHYON_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/tachyon/tools"));
    let path = tools.join(rel);
    assert!(
        path.exists(),
        "MISSING TOOL: {} (run scripts/provision-tools.sh)",
        path.display()
    );
    path
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

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The release build the wheel and `cargo install` share: maturin and
/// cargo both take the lock on it, and this mutex keeps the two tests from
/// waiting on each other's build with their hang guards running.
fn release_target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("install-build")
}
static RELEASE_BUILD: Mutex<()> = Mutex::new(());

fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

/// A Python target that prints `ready` and then waits in `waiting_here`,
/// under Debian's own python3.11: tachyon reads it through a carried layout.
fn start_target() -> common::Target {
    let py = common::machine_old_interpreters()
        .into_iter()
        .find(|i| i.name == "debian-3.11")
        .expect("Debian's python3.11 is one of the machine's interpreters");
    let mut target = common::spawn(
        &py,
        "import time\ndef waiting_here():\n    print('ready', flush=True)\n    while True:\n        time.sleep(0.05)\nwaiting_here()\n",
        &[],
        &[],
    );
    target.wait_for("ready", RUN_TIMEOUT);
    target
}

#[test]
fn wheel_installs_into_a_venv_and_its_tachyon_dumps_a_real_python() {
    let maturin = tool("maturin/bin/maturin");
    let tmp = TempDir::new("wheel");
    let wheels = tmp.path().join("wheels");

    // Build the wheel once, as a release (what PyPI would carry).
    {
        let _build = RELEASE_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = Command::new(&maturin);
        cmd.args(["build", "--release", "--locked", "--manifest-path"])
            .arg(manifest_dir().join("Cargo.toml"))
            .arg("--out")
            .arg(&wheels)
            .env("CARGO_TARGET_DIR", release_target_dir());
        run_ok(cmd, BUILD_TIMEOUT);
    }
    let built: Vec<PathBuf> = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(built.len(), 1, "one wheel: {built:?}");
    let wheel = &built[0];
    let wheel_name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    // Any Python 3 may install it: the binary links no libpython.
    let prefix = format!("tachyon-{}-py3-none-", env!("CARGO_PKG_VERSION"));
    assert!(
        wheel_name.starts_with(&prefix) && wheel_name.ends_with("_x86_64.whl"),
        "{wheel_name}"
    );

    // A fresh venv of the machine's python3, as a user would make it, and
    // pip install of the wheel file alone (no index).
    let venv = tmp.path().join("venv");
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "venv"]).arg(&venv);
    run_ok(cmd, RUN_TIMEOUT);
    let mut cmd = Command::new(venv.join("bin/pip"));
    cmd.args(["install", "--no-index", "--disable-pip-version-check"])
        .arg(wheel);
    run_ok(cmd, RUN_TIMEOUT);
    let installed = venv.join("bin/tachyon");
    assert!(
        installed.exists(),
        "pip put no tachyon in {}",
        venv.display()
    );

    // Activated, the venv's `tachyon` is the one on PATH, and it runs.
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(r#". "$1/bin/activate" && command -v tachyon && tachyon --version"#)
        .arg("bash")
        .arg(&venv);
    let out = text(&run_ok(cmd, RUN_TIMEOUT).stdout);
    assert_eq!(
        out,
        format!(
            "{}\ntachyon {}\n",
            installed.display(),
            env!("CARGO_PKG_VERSION")
        )
    );

    // The installed binary reads a real Python process. On a busy
    // machine the first dump can come while `print('ready')` is still
    // returning: dumps are taken until one shows the loop's line.
    let target = start_target();
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    let dump = loop {
        let mut cmd = Command::new(&installed);
        cmd.arg("dump").arg(target.pid().to_string());
        let dump = text(&run_ok(cmd, RUN_TIMEOUT).stdout);
        if dump.contains("time.sleep(0.05)") || std::time::Instant::now() > deadline {
            break dump;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        dump.starts_with(&format!("Stack dump for PID {}", target.pid()))
            && dump.contains("in waiting_here")
            && dump.contains("time.sleep(0.05)"),
        "{dump}"
    );
    drop(target);
}

#[test]
fn cargo_install_path_builds_a_tachyon_that_runs() {
    let root = TempDir::new("cargo-root");
    {
        let _build = RELEASE_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = Command::new(cargo());
        cmd.args(["install", "--locked", "--offline", "--path"])
            .arg(manifest_dir())
            .arg("--root")
            .arg(root.path())
            .env("CARGO_TARGET_DIR", release_target_dir());
        run_ok(cmd, BUILD_TIMEOUT);
    }
    let installed = root.path().join("bin/tachyon");
    let mut cmd = Command::new(&installed);
    cmd.arg("--version");
    let out = text(&run_ok(cmd, RUN_TIMEOUT).stdout);
    assert_eq!(out, format!("tachyon {}\n", env!("CARGO_PKG_VERSION")));

    let target = start_target();
    let mut cmd = Command::new(&installed);
    cmd.arg("dump").arg(target.pid().to_string());
    let dump = text(&run_ok(cmd, RUN_TIMEOUT).stdout);
    assert!(dump.contains("in waiting_here"), "{dump}");
    drop(target);
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
