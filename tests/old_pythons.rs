//! CPython 3.11 and 3.12 end to end, through the real binary: `run` prints
//! the table, `attach` writes every output format, on the machine's Debian
//! python3.11 (static, non-PIE), pyenv 3.11.7 and pyenv 3.12.1 (shared
//! libpython). A missing interpreter fails the test. Their stacks are
//! checked frame for frame in tests/oracle.rs, `dump` in tests/errors.rs.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Interp, machine_old_interpreters, spawn, tachyon_bin};

/// A directory of the test's own, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "tachyon-old-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run tachyon with `args`, killed after two minutes.
fn tachyon(args: &[&str], cwd: &std::path::Path) -> Output {
    let mut child = Command::new(tachyon_bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run tachyon");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

const WORK: &str = "import time\n\
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
def main():\n    t = time.time()\n    while time.time() - t < 0.7:\n        fib(15)\n\
main()\nprint('DONE', flush=True)\n";

fn exe(interp: &Interp) -> String {
    interp.exe.to_string_lossy().into_owned()
}

#[test]
fn run_prints_the_table() {
    for interp in machine_old_interpreters() {
        let dir = Scratch::new("run");
        std::fs::write(dir.0.join("work.py"), WORK).unwrap();
        let out = tachyon(&["run", "--python", &exe(&interp), "work.py"], &dir.0);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}\n{stdout}",
            interp.name,
            String::from_utf8_lossy(&out.stderr)
        );
        for needle in ["DONE", "Profile Stats:", "work.py:3(fib)", "Captured "] {
            assert!(
                stdout.contains(needle),
                "{}: no {needle:?} in\n{stdout}",
                interp.name
            );
        }
        println!("{}:\n{stdout}", interp.name);
    }
}

const THREADS: &str = "import threading, time\n\
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
def busy():\n    while True:\n        fib(12)\n\
def sleeper():\n    time.sleep(600)\n\
threading.Thread(target=sleeper, daemon=True).start()\n\
print('READY', flush=True)\nbusy()\n";

#[test]
fn attach_writes_every_format() {
    let formats: &[(&str, &str)] = &[
        ("--collapsed", "fib"),
        ("--flamegraph", "fib"),
        ("--gecko", "fib"),
        ("--jsonl", "fib"),
        ("--pstats", "fib"),
        ("--binary", ""),
    ];
    for interp in machine_old_interpreters() {
        let mut t = spawn(&interp, THREADS, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let dir = Scratch::new("attach");
        for (flag, needle) in formats {
            let path = dir.0.join(format!("out{flag}"));
            let out = tachyon(
                &[
                    "attach",
                    "-a",
                    "-d",
                    "0.5",
                    flag,
                    "-o",
                    path.to_str().unwrap(),
                    &t.pid().to_string(),
                ],
                &dir.0,
            );
            assert!(
                out.status.success(),
                "{} attach {flag}: {}",
                interp.name,
                String::from_utf8_lossy(&out.stderr)
            );
            let body = std::fs::read(&path).unwrap_or_default();
            assert!(!body.is_empty(), "{} {flag}: empty output", interp.name);
            let text = String::from_utf8_lossy(&body);
            assert!(
                text.contains(needle),
                "{} {flag}: no {needle:?} in the output",
                interp.name
            );
            if *flag == "--collapsed" {
                // Both threads, the sleeper in its own function.
                assert!(text.contains("sleeper"), "{}: {text}", interp.name);
            }
            if *flag == "--binary" {
                let back = dir.0.join("replayed.txt");
                let replayed = tachyon(
                    &[
                        "replay",
                        "--collapsed",
                        "-o",
                        back.to_str().unwrap(),
                        path.to_str().unwrap(),
                    ],
                    &dir.0,
                );
                let r = std::fs::read_to_string(&back).unwrap_or_default();
                assert!(
                    replayed.status.success() && r.contains("fib"),
                    "{} replay: {r} {}",
                    interp.name,
                    String::from_utf8_lossy(&replayed.stderr)
                );
            }
        }
        println!("{}: every format written", interp.name);
    }
}
