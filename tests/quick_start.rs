//! The README's quick start, as a new user runs it: `tachyon run app.py`
//! in a directory of their own, with whatever `python3` the machine puts
//! first on `PATH` (on this machine image, pyenv's shim to 3.11, or
//! Debian's 3.11: a version without a debug offsets table). It must print
//! the program's output, then the statistics and the table.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Running, TempDir, tachyon_bin};

const REPORT: &str = include_str!("../fixtures/programs/report.py");

/// With this test's own `PATH` (pyenv's shims first on this machine image)
/// and with a fresh machine's (`/usr/bin/python3`, Debian's 3.11.2).
#[test]
fn tachyon_run_app_py_with_the_machines_python3_prints_the_table() {
    let inherited = std::env::var("PATH").unwrap_or_default();
    for path in [inherited.as_str(), "/usr/local/bin:/usr/bin:/bin"] {
        quick_start(path);
    }
}

fn quick_start(path: &str) {
    // The machine's python3, found as tachyon finds it.
    let which = Command::new("sh")
        .args(["-c", "command -v python3 && python3 --version"])
        .env("PATH", path)
        .output()
        .expect("cannot run sh");
    let found = String::from_utf8_lossy(&which.stdout).into_owned();
    assert!(
        which.status.success(),
        "MISSING INTERPRETER: no python3 on PATH ({})",
        String::from_utf8_lossy(&which.stderr)
    );

    let dir = TempDir::new("quick-start");
    std::fs::write(dir.join("app.py"), REPORT).unwrap();
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(["run", "app.py"])
        .env("PATH", path)
        // Why samples failed, should the table miss a function.
        .env("TACHYON_LOG_FAILED_SAMPLES", "1")
        .current_dir(&dir);
    let out = Running::start(cmd).finish(Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "with {found}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "top: ('/api/item/0', 600)",
        "Captured ",
        "Profile Stats:",
        "filename:lineno(function)",
        "app.py:36(fingerprint)",
        "(fetch_upstream)",
    ] {
        assert!(
            stdout.contains(needle),
            "with {found}: no {needle:?} in\n{stdout}\nfailed samples, first lines:\n{}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    println!("with {found}{stdout}");
}
